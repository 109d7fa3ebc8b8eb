package main

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/impyard/impyard/lib/cli"
	"github.com/impyard/impyard/lib/config"
	"github.com/impyard/impyard/lib/yard"
)

// TestInitStrictModes: the yard init makes passes strict modes even under
// umask 002, the umask of a shared group: each directory on the way to an
// authority file, and each such file, is writable by its owner alone.
func TestInitStrictModes(t *testing.T) {
	old := syscall.Umask(0o002)
	defer syscall.Umask(old)
	t.Setenv("IMPYARD_HOME", filepath.Join(t.TempDir(), "home"))
	dir := filepath.Join(t.TempDir(), "yard")
	if code, _, stderr := initYard(t, dir); code != 0 {
		t.Fatalf("init exited %d: %s", code, stderr)
	}
	y, err := yard.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	if errs := config.Unsafe(y); len(errs) != 0 {
		t.Fatalf("init made unsafe authority files: %v", errs)
	}
	if _, err := config.LoadOrg(y); err != nil {
		t.Fatal(err)
	}
	for _, rel := range []string{".", "imps", "policies"} {
		fi, err := os.Stat(y.Path(rel))
		if err != nil {
			t.Fatal(err)
		}
		if fi.Mode().Perm()&0o022 != 0 {
			t.Errorf("%s is %v", rel, fi.Mode())
		}
	}
}

// TestInitRefusesWritableRoot: init on a directory its group may write
// makes no yard there (no marker): every daemon would refuse its
// authority files. The error names the directory and the fix.
func TestInitRefusesWritableRoot(t *testing.T) {
	t.Setenv("IMPYARD_HOME", filepath.Join(t.TempDir(), "home"))
	dir := filepath.Join(t.TempDir(), "yard")
	if err := os.Mkdir(dir, 0o775); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(dir, 0o775); err != nil {
		t.Fatal(err)
	}
	code, _, stderr := initYard(t, dir)
	if code != 1 || !strings.Contains(stderr, dir+" is writable by its group or others") || !strings.Contains(stderr, "chmod go-w") {
		t.Fatalf("init exited %d: %s", code, stderr)
	}
	if _, err := yard.Open(dir); !errors.Is(err, yard.ErrNotAYard) {
		t.Fatalf("a yard was made: %v", err)
	}
}

// TestConfirm: only y or yes, in any case, is a yes; anything else, an
// empty line or none, is a no.
func TestConfirm(t *testing.T) {
	for in, want := range map[string]bool{"y\n": true, "YES\n": true, " y \n": true, "n\n": false, "\n": false, "": false, "yep\n": false} {
		var stderr strings.Builder
		e := &cli.Env{Name: "impsup", Stdin: strings.NewReader(in), Stderr: &stderr}
		if got := e.Confirm("apply? [y/N] "); got != want || stderr.String() != "apply? [y/N] " {
			t.Errorf("confirm(%q) = %v asking %q, want %v", in, got, stderr.String(), want)
		}
	}
}
