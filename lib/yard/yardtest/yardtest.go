// Package yardtest holds what the tests of the yard's stores share: a
// fresh yard (with its marker) in a test's temporary directory, and a
// listing of a tree that shows an operation changed nothing, and a fixed
// clock for transitions.
package yardtest

import (
	"os"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/impyard/impyard/lib/state"
	"github.com/impyard/impyard/lib/yard"
)

// FixedNow makes transition times 2026-11-30T12:00:00Z for the rest of
// the test, and returns that time.
func FixedNow(t testing.TB) time.Time {
	t.Helper()
	now := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	old := state.Now
	state.Now = func() time.Time { return now }
	t.Cleanup(func() { state.Now = old })
	return now
}

// New makes a yard, marker and all, in a new temporary directory of t
// and opens it.
func New(t testing.TB) *yard.Yard {
	t.Helper()
	return At(t, t.TempDir())
}

// At makes dir a yard, creating it if needed, and opens it.
func At(t testing.TB, dir string) *yard.Yard {
	t.Helper()
	y, _, err := yard.Prepare(dir)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := y.Mark(); err != nil {
		t.Fatal(err)
	}
	if y, err = yard.Open(dir); err != nil {
		t.Fatal(err)
	}
	return y
}

// Tree lists every path below root with its mode and, for a regular
// file, its contents, one line each, sorted.
func Tree(t testing.TB, root string) string {
	t.Helper()
	var lines []string
	filepath.Walk(root, func(p string, fi os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		line := p + " " + fi.Mode().String()
		if fi.Mode().IsRegular() {
			b, _ := os.ReadFile(p)
			line += " " + string(b)
		}
		lines = append(lines, line)
		return nil
	})
	sort.Strings(lines)
	return strings.Join(lines, "\n")
}

// Unchanged reports, as what, a tree below root that no longer lists as
// before did.
func Unchanged(t testing.TB, root, before, what string) {
	t.Helper()
	if after := Tree(t, root); after != before {
		t.Errorf("%s:\nbefore:\n%s\nafter:\n%s", what, before, after)
	}
}

// foreignUID is the account a test gives a file to, as a writer of the
// yard other than its owner would leave one: nobody's.
const foreignUID = 65534

// Foreign gives the file at p to another account, as a writer of the
// yard would leave a file it wrote. It skips the test where it cannot
// (not root).
func Foreign(t testing.TB, p string) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root to give a file to another uid")
	}
	if err := os.Chown(p, foreignUID, foreignUID); err != nil {
		t.Fatal(err)
	}
}

// StillForeign fails t unless the file at p still holds want and is
// still the other account's: nothing rewrote it as the owner's.
func StillForeign(t testing.TB, p, want string) {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	st, err := os.Stat(p)
	if err != nil {
		t.Fatal(err)
	}
	if string(b) != want || st.Sys().(*syscall.Stat_t).Uid != foreignUID {
		t.Fatalf("%s changed: %q, owner %d", p, b, st.Sys().(*syscall.Stat_t).Uid)
	}
}
