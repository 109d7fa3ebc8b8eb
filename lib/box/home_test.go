package box

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestCheckHome: a path that is IMPYARD_HOME, lies below it or holds it,
// directly or through a symlink, is refused naming its key; any other is
// returned resolved.
func TestCheckHome(t *testing.T) {
	dir := t.TempDir()
	home := filepath.Join(dir, "home")
	repo := filepath.Join(dir, "repo")
	for _, d := range []string{filepath.Join(home, "secrets"), filepath.Join(home, "keys"), repo} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			t.Fatal(err)
		}
	}
	link := filepath.Join(dir, "innocent")
	if err := os.Symlink(filepath.Join(home, "keys"), link); err != nil {
		t.Fatal(err)
	}
	homeLink := filepath.Join(dir, "homelink")
	if err := os.Symlink(home, homeLink); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, home, path string
		refused          bool
	}{
		{"IMPYARD_HOME itself", home, home, true},
		{"below it", home, filepath.Join(home, "secrets"), true},
		{"its parent", home, dir, true},
		{"the root", home, "/", true},
		{"a symlink into it", home, link, true},
		{"through a symlinked home", homeLink, filepath.Join(home, "keys"), true},
		{"a path below it, spelled with ..", home, filepath.Join(repo, "..", "home", "secrets"), true},
		{"a sibling", home, repo, false},
		{"a sibling whose name starts like it", home, filepath.Join(dir, "home2"), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.name == "a sibling whose name starts like it" {
				if err := os.MkdirAll(tc.path, 0o700); err != nil {
					t.Fatal(err)
				}
			}
			got, err := CheckHome(tc.home, "repo", tc.path)
			if tc.refused {
				if !errors.Is(err, ErrHome) || !strings.HasPrefix(err.Error(), "repo "+tc.path+" ") {
					t.Fatalf("CheckHome(%s) = %q, %v; want ErrHome naming repo and the path", tc.path, got, err)
				}
				return
			}
			if err != nil || got != tc.path {
				t.Fatalf("CheckHome(%s) = %q, %v; want it as it is", tc.path, got, err)
			}
		})
	}
	if _, err := CheckHome(home, "rootfs", filepath.Join(dir, "nonexistent")); err == nil || !strings.HasPrefix(err.Error(), "rootfs: ") {
		t.Fatalf("a path that does not resolve: %v; want it refused naming rootfs", err)
	}
	if _, err := CheckHome(filepath.Join(dir, "not-yet"), "rootfs", dir); !errors.Is(err, ErrHome) {
		t.Fatalf("the parent of a home not made yet: %v; want ErrHome", err)
	}
}
