package desk

import (
	"strings"
	"testing"
)

func TestParseScript(t *testing.T) {
	lines, err := ParseScript(strings.NewReader(`# morning review
approve g-0000000000000001 80706C860dd0bd10

deny g-0000000000000002   wrong  recipients, again
  skip g-0000000000000003
approve g-0000000000000004 ` + strings.Repeat("a", 64) + `
`))
	if err != nil {
		t.Fatal(err)
	}
	want := []Line{
		{N: 2, Action: Approve, Gate: "g-0000000000000001", SHA: "80706c860dd0bd10"},
		{N: 4, Action: Deny, Gate: "g-0000000000000002", Reason: "wrong  recipients, again"},
		{N: 5, Action: Skip, Gate: "g-0000000000000003"},
		{N: 6, Action: Approve, Gate: "g-0000000000000004", SHA: strings.Repeat("a", 64)},
	}
	if len(lines) != len(want) {
		t.Fatalf("%d lines: %+v", len(lines), lines)
	}
	for i := range want {
		if lines[i] != want[i] {
			t.Errorf("line %d: %+v, want %+v", i, lines[i], want[i])
		}
	}
}

// Any mistake refuses the whole script, naming its line.
func TestParseScriptRefuses(t *testing.T) {
	ok := "approve g-0000000000000001 80706c86\n"
	for _, tc := range []struct{ script, want string }{
		{ok + "allow g-0000000000000001", `line 2: unknown action "allow"`},
		{"approve g-0000000000000001", "line 1: want 'approve GATE SHA'"},
		{"approve g-0000000000000001 80706c8", `"80706c8" is not at least 8 hex digits`},
		{"approve g-0000000000000001 80706c8z", `is not at least 8 hex digits`},
		{"approve g-0000000000000001 " + strings.Repeat("a", 65), `is not at least 8 hex digits`},
		{"approve g-0000000000000001 80706c86 extra", "want 'approve GATE SHA'"},
		{"deny g-0000000000000001", "want 'deny GATE REASON'"},
		{"skip g-0000000000000001 now", "want 'skip GATE'"},
		{"skip", `"skip" wants a gate id`},
		{"skip ../../etc/passwd", "line 1: invalid gate id"},
		{strings.Repeat("#", MaxScript+1), "over"},
	} {
		if _, err := ParseScript(strings.NewReader(tc.script)); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%.40q: %v, want %q", tc.script, err, tc.want)
		}
	}
}
