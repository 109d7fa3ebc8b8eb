package store

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestTxRename: a file is renamed in one step, content and all, and
// never over something already at the new name, which is left as it
// was (fs.ErrExist, naming it); a missing source is fs.ErrNotExist.
func TestTxRename(t *testing.T) {
	d := mustDir(t)
	os.WriteFile(filepath.Join(d.Path(), "old"), []byte("marker\n"), FilePerm)
	if err := d.Update(func(tx *Tx) error { return tx.Rename("old", "new") }); err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(filepath.Join(d.Path(), "new")); err != nil || string(b) != "marker\n" {
		t.Errorf("new after the rename: %q, %v", b, err)
	}
	if _, err := os.Lstat(filepath.Join(d.Path(), "old")); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("old is still there: %v", err)
	}
	err := d.Update(func(tx *Tx) error { return tx.Rename("old", "new") })
	if !errors.Is(err, fs.ErrNotExist) || !contains(err, filepath.Join(d.Path(), "old")) {
		t.Errorf("rename of a missing file: %v; want ErrNotExist naming it", err)
	}
	os.WriteFile(filepath.Join(d.Path(), "other"), []byte("other\n"), FilePerm)
	err = d.Update(func(tx *Tx) error { return tx.Rename("other", "new") })
	if !errors.Is(err, fs.ErrExist) || !contains(err, filepath.Join(d.Path(), "new")) {
		t.Errorf("rename over a file: %v; want ErrExist naming it", err)
	}
	if b, _ := os.ReadFile(filepath.Join(d.Path(), "new")); string(b) != "marker\n" {
		t.Errorf("new was replaced: %q", b)
	}
	if b, _ := os.ReadFile(filepath.Join(d.Path(), "other")); string(b) != "other\n" {
		t.Errorf("other was lost: %q", b)
	}
	for _, bad := range [][2]string{{"..", "x"}, {"other", "a/../b"}, {"other", ""}} {
		if err := d.Update(func(tx *Tx) error { return tx.Rename(bad[0], bad[1]) }); err == nil {
			t.Errorf("Rename(%q, %q) accepted", bad[0], bad[1])
		}
	}
}

// TestRegularIn: only a regular file is one; a directory, a symlink (to a
// file too, never followed) and a missing name are not, and a symlinked
// directory on the way is refused.
func TestRegularIn(t *testing.T) {
	root := t.TempDir()
	os.MkdirAll(filepath.Join(root, "a", "dir"), 0o700)
	os.WriteFile(filepath.Join(root, "a", "file"), nil, FilePerm)
	os.Symlink(filepath.Join(root, "a", "file"), filepath.Join(root, "a", "link"))
	os.Symlink(filepath.Join(root, "a"), filepath.Join(root, "alias"))
	for rel, want := range map[string]bool{"a/file": true, "a/dir": false, "a/link": false, "a/missing": false, "missing/file": false} {
		if got, err := RegularIn(root, rel); got != want || err != nil {
			t.Errorf("RegularIn(%s) = %v, %v; want %v", rel, got, err, want)
		}
	}
	if got, err := RegularIn(root, "alias/file"); got || !contains(err, filepath.Join(root, "alias")) {
		t.Errorf("RegularIn through a symlink = %v, %v; want a refusal naming it", got, err)
	}
}

// contains reports whether err names s.
func contains(err error, s string) bool { return err != nil && strings.Contains(err.Error(), s) }

// TestTxRenameTraced: a rename reaches the trace hook, then the sync of
// its directory that makes it durable.
func TestTxRenameTraced(t *testing.T) {
	d := mustDir(t)
	os.WriteFile(filepath.Join(d.Path(), "old"), nil, FilePerm)
	var ops []Op
	restore := SetTrace(func(op Op) {
		if op.Kind == OpRename || op.Kind == OpDirSync {
			ops = append(ops, op)
		}
	})
	err := d.Update(func(tx *Tx) error { return tx.Rename("old", "new") })
	restore()
	if err != nil {
		t.Fatal(err)
	}
	want := []Op{{Kind: OpRename, Path: filepath.Join(d.Path(), "old"), To: filepath.Join(d.Path(), "new")}, {Kind: OpDirSync, Path: d.Path()}}
	if len(ops) != len(want) {
		t.Fatalf("traced %+v, want %+v", ops, want)
	}
	for i, op := range ops {
		if op.Kind != want[i].Kind || op.Path != want[i].Path || op.To != want[i].To {
			t.Errorf("traced #%d %+v, want %+v", i+1, op, want[i])
		}
	}
}
