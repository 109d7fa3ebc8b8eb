package stale

import (
	"os"
	"path/filepath"
	"runtime"
	"testing"
	"time"
)

// counted waits until f's count moves past gen: the watch reports a
// change after the call that made it returns.
func counted(t *testing.T, f *Flag, gen uint64, what string) {
	t.Helper()
	for end := time.Now().Add(10 * time.Second); ; runtime.Gosched() {
		if g, _ := f.Gen(); g != gen {
			return
		}
		if time.Now().After(end) {
			t.Fatalf("%s: not counted", what)
		}
	}
}

func TestCountsChangesOfItsFileOnly(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "policy.json")
	os.WriteFile(p, []byte("{}"), 0o644)
	f := Watch(p)
	other := Watch(filepath.Join(dir, "other.json"))
	gen, ok := f.Gen()
	if !ok {
		t.Fatal("a plain directory is not watched")
	}
	for _, c := range []struct {
		what   string
		change func() error
	}{
		{"write in place", func() error { return os.WriteFile(p, []byte(`{"a":1}`), 0o644) }},
		{"chmod", func() error { return os.Chmod(p, 0o600) }},
		{"replace", func() error {
			os.WriteFile(p+".tmp", []byte(`{"b":1}`), 0o644)
			return os.Rename(p+".tmp", p)
		}},
		{"remove", func() error { return os.Remove(p) }},
		{"create", func() error { return os.WriteFile(p, []byte("{}"), 0o644) }},
	} {
		if err := c.change(); err != nil {
			t.Fatal(err)
		}
		counted(t, f, gen, c.what)
		gen, _ = f.Gen()
	}
	if g, _ := other.Gen(); g != 0 {
		t.Errorf("another file's changes counted for other.json: %d", g)
	}
}

func TestMovedDirectoryIsNoLongerWatched(t *testing.T) {
	top := t.TempDir()
	dir := filepath.Join(top, "policies")
	os.Mkdir(dir, 0o755)
	f := Watch(filepath.Join(dir, "gateway.json"))
	gen, _ := f.Gen()
	if err := os.Rename(dir, filepath.Join(top, "old")); err != nil {
		t.Fatal(err)
	}
	counted(t, f, gen, "the directory moved")
	for end := time.Now().Add(10 * time.Second); ; runtime.Gosched() {
		if _, ok := f.Gen(); !ok {
			break
		}
		if time.Now().After(end) {
			t.Fatal("still watched after its directory moved")
		}
	}
}

func TestSymlinkedDirectoryIsNotWatched(t *testing.T) {
	top := t.TempDir()
	os.Mkdir(filepath.Join(top, "real"), 0o755)
	os.Symlink("real", filepath.Join(top, "link"))
	if _, ok := Watch(filepath.Join(top, "link", "gateway.json")).Gen(); ok {
		t.Error("a file reached through a symlink is watched; a change of the link would go unseen")
	}
	if _, ok := Watch(filepath.Join(top, "missing", "gateway.json")).Gen(); ok {
		t.Error("a file in a missing directory is watched")
	}
}
