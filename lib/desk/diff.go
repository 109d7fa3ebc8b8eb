package desk

import (
	"encoding/json"
	"strings"

	"github.com/impyard/impyard/lib/blob"
	"github.com/impyard/impyard/lib/intent"
	"github.com/impyard/impyard/lib/yard"
)

// Diff is what a code gate's payload names: its stat, and its diff read
// from blobs/sha256/ and checked against its hash.
type Diff struct {
	Name string // sha256:<hex>
	Stat string
	Text []byte
}

// DiffOf returns the diff a gate's frozen payload names ("diff":
// "sha256:<hex>", as a commit-and-push gate's does), or nil for a
// payload that names none.
func DiffOf(y *yard.Yard, frozen []byte) (*Diff, error) {
	var p intent.Push
	if json.Unmarshal(frozen, &p) != nil || !strings.HasPrefix(p.Diff, blob.Prefix) {
		return nil, nil
	}
	text, err := blob.Get(y, p.Diff)
	if err != nil {
		return nil, err
	}
	return &Diff{Name: p.Diff, Stat: p.Stat, Text: text}, nil
}
