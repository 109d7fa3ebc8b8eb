package notify

import (
	"strings"
	"testing"
)

// TestSummarizeBlanksCredentialsInNestedArrays: a member named like a
// credential is blanked at any depth, inside arrays inside objects and
// arrays inside arrays included.
func TestSummarizeBlanksCredentialsInNestedArrays(t *testing.T) {
	for in, want := range map[string]string{
		`{"r":{"h":[{"auth":"sk-arr-5678"}]}}`:         `r={"h":[{"auth":"[redacted]"}]}`,
		`{"r":{"d":[[{"token":"sk-deep-9012"}],"x"]}}`: `r={"d":[[{"token":"[redacted]"}],"x"]}`,
		`{"l":[{"p":[{"key":"sk-list-3456"}]}]}`:       `l={"p":[{"key":"[redacted]"}]}`,
	} {
		got := Summarize([]byte(in), 200, nil)
		if got != want || strings.Contains(got, "sk-") {
			t.Errorf("Summarize(%s) = %q, want %q", in, got, want)
		}
	}
}
