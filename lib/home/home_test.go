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
