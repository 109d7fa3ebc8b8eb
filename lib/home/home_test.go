package home

import (
	"os"
	"path/filepath"
	"testing"
)

func TestResolve(t *testing.T) {
	t.Setenv("IMPYARD_HOME", "rel/home")
	got, err := Resolve()
	wd, _ := os.Getwd()
	if err != nil || string(got) != filepath.Join(wd, "rel/home") {
		t.Fatalf("Resolve with IMPYARD_HOME=rel/home = %q, %v; want it made absolute", got, err)
	}
	t.Setenv("IMPYARD_HOME", "")
	t.Setenv("HOME", "/home/yuko")
	if got, err := Resolve(); err != nil || got != "/home/yuko/.impyard" {
		t.Fatalf("Resolve without IMPYARD_HOME = %q, %v; want /home/yuko/.impyard", got, err)
	}
}

func TestTokensPrivate(t *testing.T) {
	h := Dir(filepath.Join(t.TempDir(), "home"))
	d, err := h.Tokens()
	if err != nil {
		t.Fatal(err)
	}
	if d.Path() != filepath.Join(string(h), "tokens") {
		t.Fatalf("tokens at %s", d.Path())
	}
	fi, err := os.Stat(string(h))
	if err != nil || fi.Mode().Perm() != 0o700 {
		t.Fatalf("IMPYARD_HOME mode %v, %v; want 0700", fi.Mode().Perm(), err)
	}
}

// TestPrivate: the directory is made 0700 whatever the umask, a looser
// one is tightened, and a symlink in its place is refused and left alone.
func TestPrivate(t *testing.T) {
	h := Dir(filepath.Join(t.TempDir(), "home"))
	if err := h.Private(h.Keys()); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{string(h), h.Keys()} {
		if fi, err := os.Stat(p); err != nil || fi.Mode().Perm() != 0o700 {
			t.Errorf("%s: %v %v, want 0700", p, fi.Mode(), err)
		}
	}
	os.Chmod(h.Keys(), 0o755)
	if err := h.Private(h.Keys()); err != nil {
		t.Fatal(err)
	}
	if fi, _ := os.Stat(h.Keys()); fi.Mode().Perm() != 0o700 {
		t.Errorf("keys/ left %v", fi.Mode())
	}
	elsewhere := t.TempDir()
	os.Chmod(elsewhere, 0o755)
	if err := os.Symlink(elsewhere, h.CA()); err != nil {
		t.Fatal(err)
	}
	if err := h.Private(h.CA()); err == nil {
		t.Error("a symlinked ca/ was accepted")
	}
	if fi, _ := os.Stat(elsewhere); fi.Mode().Perm() != 0o755 {
		t.Errorf("the symlink's target was changed to %v", fi.Mode())
	}
}
