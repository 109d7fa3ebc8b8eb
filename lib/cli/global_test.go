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
