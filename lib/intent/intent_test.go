package intent

import (
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/impyard/impyard/lib/payload"
)

// TestFieldsMatchTags keeps the declared fields that trust entries are
// checked against equal to the JSON the payload types write.
func TestFieldsMatchTags(t *testing.T) {
	for _, c := range []struct {
		typ    any
		fields payload.Fields
	}{{Push{}, PushFields}, {PullRequest{}, PullRequestFields}} {
		rt := reflect.TypeOf(c.typ)
		var tags []string
		for i := range rt.NumField() {
			name, _, _ := strings.Cut(rt.Field(i).Tag.Get("json"), ",")
			tags = append(tags, name)
		}
		var declared []string
		for k := range c.fields {
			declared = append(declared, k)
		}
		slices.Sort(tags)
		slices.Sort(declared)
		if !slices.Equal(tags, declared) {
			t.Errorf("%s: json fields %v, declared fields %v", rt.Name(), tags, declared)
		}
	}
}
