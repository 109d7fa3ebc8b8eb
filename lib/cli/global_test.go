package cli

import (
	"errors"
	"slices"
	"strings"
	"testing"
)

func TestHoist(t *testing.T) {
	for _, tc := range []struct {
		args, want []string
	}{
		{[]string{"ls"}, []string{"ls"}},
		{[]string{"--root", "D", "ls"}, []string{"ls", "--root", "D"}},
		{[]string{"--root=D", "--json", "ls", "--state", "waiting"}, []string{"ls", "--state", "waiting", "--root=D", "--json"}},
		{[]string{"-root", "D", "token", "issue", "yuko"}, []string{"token", "issue", "yuko", "-root", "D"}},
		{[]string{"--color", "never", "add", "--imp", "y", "--", "--not-a-flag"}, []string{"add", "--imp", "y", "--color", "never", "--", "--not-a-flag"}},
		{[]string{"--timeout", "5s", "cancel", "t-1"}, []string{"cancel", "t-1", "--timeout", "5s"}},
		{[]string{"--version"}, []string{"--version"}},
		{[]string{"--", "ls"}, []string{"--", "ls"}},
	} {
		got, err := Hoist(tc.args)
		if err != nil || !slices.Equal(got, tc.want) {
			t.Errorf("Hoist(%q) = %q, %v; want %q", tc.args, got, err, tc.want)
		}
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--imp", "yuko", "ls"}, "flag --imp goes after the command; before it only --color, --json, --root, --timeout"},
		{[]string{"--root"}, "flag needs an argument: --root"},
		{[]string{"--root", "D"}, "global flags --root D name no command"},
	} {
		_, err := Hoist(tc.args)
		var u *UsageError
		if !errors.As(err, &u) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Hoist(%q) = %v; want a usage error %q", tc.args, err, tc.want)
		}
	}
}

// Abbrev shows the abbreviation on a terminal, where a person types it,
// and the whole id anywhere else, where a script reads it.
func TestAbbrev(t *testing.T) {
	shorts := map[string]string{"g-01m8tg16agjyf77k": "g-01m8tg16agjy"}
	e, _, _ := newEnv()
	if got := e.Abbrev("g-01m8tg16agjyf77k", shorts); got != "g-01m8tg16agjyf77k" {
		t.Errorf("off a terminal: %q, want the whole id", got)
	}
	e.Stdout = openTTY(t)
	if got := e.Abbrev("g-01m8tg16agjyf77k", shorts); got != "g-01m8tg16agjy" {
		t.Errorf("on a terminal: %q, want the abbreviation", got)
	}
	if got := e.Abbrev("g-01m8zzzzzzzzzzzz", shorts); got != "g-01m8zzzzzzzzzzzz" {
		t.Errorf("an id without an abbreviation: %q, want it whole", got)
	}
}
