package yard_test

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/impyard/impyard/lib/yard"
	"github.com/impyard/impyard/lib/yard/yardtest"
)

// nobody is the uid that stands for a writer of the yard: an account
// other than the owner and root.
const nobody = 65534

// authorityYard is a yard holding org.toml, policies/gateway.json and
// imps/a/imp.toml as a test running as root with umask 022 writes them.
func authorityYard(t *testing.T) *yard.Yard {
	t.Helper()
	y := yardtest.New(t)
	for _, rel := range []string{"org.toml", "policies/gateway.json", "imps/a/imp.toml"} {
		p := y.Path(rel)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte("x"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for _, d := range []string{"queue", "gates", "journal", "runs"} {
		if err := os.MkdirAll(y.Path(d), 0o775); err != nil {
			t.Fatal(err)
		}
	}
	return y
}

func TestReadAuthority(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to give files to another uid")
	}
	chown := func(rel string) func(*yard.Yard) error {
		return func(y *yard.Yard) error { return os.Lchown(y.Path(rel), nobody, nobody) }
	}
	chmod := func(rel string, mode fs.FileMode) func(*yard.Yard) error {
		return func(y *yard.Yard) error { return os.Chmod(y.Path(rel), mode) }
	}
	for _, tc := range []struct {
		name  string
		file  string
		setup func(*yard.Yard) error
		want  string // "" accepted; else the refused path, below the root
	}{
		{"as written with umask 022", "org.toml", nil, ""},
		{"imp.toml as written", "imps/a/imp.toml", nil, ""},
		{"work directories group-writable", "org.toml", chmod("queue", 0o2775), ""},
		{"owned by root, read in a yard of another owner", "org.toml", chown(""), ""},
		{"file of another uid", "org.toml", chown("org.toml"), "org.toml"},
		{"policy of another uid", "policies/gateway.json", chown("policies/gateway.json"), "policies/gateway.json"},
		{"imp.toml of another uid", "imps/a/imp.toml", chown("imps/a/imp.toml"), "imps/a/imp.toml"},
		{"group-writable file", "org.toml", chmod("org.toml", 0o664), "org.toml"},
		{"other-writable file", "imps/a/imp.toml", chmod("imps/a/imp.toml", 0o646), "imps/a/imp.toml"},
		{"group-writable policies", "policies/gateway.json", chmod("policies", 0o775), "policies"},
		{"group-writable imps", "imps/a/imp.toml", chmod("imps", 0o2775), "imps"},
		{"imp directory of another uid", "imps/a/imp.toml", chown("imps/a"), "imps/a"},
		{"group-writable yard root", "org.toml", chmod("", 0o770), "."},
	} {
		t.Run(tc.name, func(t *testing.T) {
			y := authorityYard(t)
			if tc.setup != nil {
				if err := tc.setup(y); err != nil {
					t.Fatal(err)
				}
			}
			b, err := y.ReadAuthority(y.Path(tc.file))
			if tc.want == "" {
				if err != nil || string(b) != "x" {
					t.Fatalf("ReadAuthority(%s) = %q, %v; want it read", tc.file, b, err)
				}
				return
			}
			if !errors.Is(err, yard.ErrUnsafe) {
				t.Fatalf("ReadAuthority(%s) = %q, %v; want ErrUnsafe", tc.file, b, err)
			}
			if p := y.Path(tc.want); !strings.Contains(err.Error(), p+" is ") {
				t.Errorf("error %q does not name %s", err, p)
			}
		})
	}
}

// TestReadAuthorityOwner: the yard root's owner is an accepted owner, and
// root; no other account is, whoever runs the reader.
func TestReadAuthorityOwner(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to give files to another uid")
	}
	y := authorityYard(t)
	for _, p := range []string{"", "org.toml"} {
		if err := os.Chown(y.Path(p), nobody, nobody); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := y.ReadAuthority(y.Path("org.toml")); err != nil {
		t.Fatalf("a file of the yard's owner: %v", err)
	}
	if err := os.Chown(y.Path("org.toml"), nobody+1, nobody); err != nil {
		t.Fatal(err)
	}
	if _, err := y.ReadAuthority(y.Path("org.toml")); !errors.Is(err, yard.ErrUnsafe) {
		t.Fatalf("a file of a third account: %v, want ErrUnsafe", err)
	}
}

func TestReadAuthoritySymlink(t *testing.T) {
	y := authorityYard(t)
	elsewhere := t.TempDir()
	if err := os.WriteFile(filepath.Join(elsewhere, "imp.toml"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(elsewhere, y.Path("imps", "b")); err != nil {
		t.Fatal(err)
	}
	if _, err := y.ReadAuthority(y.Path("imps", "b", "imp.toml")); err == nil || !strings.Contains(err.Error(), "symlink") {
		t.Fatalf("an imp directory that is a symlink: %v, want it refused", err)
	}
	if err := os.Symlink(filepath.Join(elsewhere, "imp.toml"), y.Path("imps", "a", "link.toml")); err != nil {
		t.Fatal(err)
	}
	if _, err := y.ReadAuthority(y.Path("imps", "a", "link.toml")); err == nil || !strings.Contains(err.Error(), "symlink") {
		t.Fatalf("a file that is a symlink: %v, want it refused", err)
	}
}

func TestReadAuthorityMissing(t *testing.T) {
	y := authorityYard(t)
	if _, err := y.ReadAuthority(y.Path("imps", "a", "none.toml")); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("a missing file: %v, want ErrNotExist", err)
	}
	// A missing file in a directory a writer controls is still refused:
	// the writer could put one there.
	if err := os.Chmod(y.Root, 0o777); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(y.Path("org.toml")); err != nil {
		t.Fatal(err)
	}
	if err := y.CheckAuthority(y.Path("org.toml")); !errors.Is(err, yard.ErrUnsafe) {
		t.Fatalf("missing org.toml in a world-writable root: %v, want ErrUnsafe", err)
	}
}

// TestReadAuthorityOutside: a policy named outside the yard is checked
// from / down; one in a world-writable directory such as /tmp is refused.
func TestReadAuthorityOutside(t *testing.T) {
	y := authorityYard(t)
	dir := t.TempDir()
	if err := os.Chmod(dir, 0o1777); err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(dir, "gateway.json")
	if err := os.WriteFile(p, []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := y.ReadAuthority(p); !errors.Is(err, yard.ErrUnsafe) {
		t.Fatalf("a policy in a world-writable directory: %v, want ErrUnsafe", err)
	}
}
