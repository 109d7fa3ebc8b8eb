package store

import (
	"os"
	"path/filepath"
	"syscall"
	"testing"
)

// modeOf is the permission and setgid bits of path.
func modeOf(t *testing.T, path string) uint32 {
	t.Helper()
	var st syscall.Stat_t
	if err := syscall.Lstat(path, &st); err != nil {
		t.Fatal(err)
	}
	return st.Mode & 0o7777
}

// TestSharedModes checks every way the store creates something, in a
// directory shared with its group and in one that is not, under a umask
// that would narrow both: a shared directory's files must be group
// read-write, its lock files openable by the group, its new directories
// shared in turn; anything else keeps its narrow mode.
func TestSharedModes(t *testing.T) {
	old := syscall.Umask(0o077)
	defer syscall.Umask(old)
	for _, c := range []struct {
		name           string
		top            os.FileMode
		file, lock, dr uint32
		// exact: the mode is set outright; else the umask may narrow
		// it, and no bit beyond it may be set.
		exact bool
	}{
		{"shared", os.ModeSetgid | 0o770, 0o660, 0o660, 0o2770, true},
		// Setgid alone, as a setgid yard root passes on to imps/ and
		// policies/, shares nothing.
		{"setgid only", os.ModeSetgid | 0o750, 0o640, 0o640, 0o2750, false},
		// Group write alone is not a choice to share either.
		{"group-writable only", 0o770, 0o640, 0o640, 0o750, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			root := t.TempDir()
			if err := os.Mkdir(filepath.Join(root, "w"), 0o700); err != nil {
				t.Fatal(err)
			}
			if err := os.Chmod(filepath.Join(root, "w"), c.top); err != nil {
				t.Fatal(err)
			}
			d, err := OpenDir(root, "w/sub")
			if err != nil {
				t.Fatal(err)
			}
			err = d.Update(func(tx *Tx) error {
				if err := tx.Write("f.json", []byte("{}\n")); err != nil {
					return err
				}
				_, err := tx.Scratch(".marker", true)
				return err
			})
			if err != nil {
				t.Fatal(err)
			}
			if err := AppendLineIn(root, "w/sub", "in.jsonl", []byte("{}\n"), "mid-append"); err != nil {
				t.Fatal(err)
			}
			if err := AppendLine(filepath.Join(d.Path(), "by-path.jsonl"), []byte("{}\n")); err != nil {
				t.Fatal(err)
			}
			l := NewLog(filepath.Join(d.Path(), "log.jsonl"), func(error) {})
			if err := l.Append([]byte("{}\n"), true); err != nil {
				t.Fatal(err)
			}

			// In a shared directory, w itself.
			if err := AppendLineIn(root, "w", "top.jsonl", []byte("{}\n"), "mid-append"); err != nil {
				t.Fatal(err)
			}
			sub := d.Path()
			for _, w := range []struct {
				path string
				want uint32
			}{
				{sub, c.dr},
				{filepath.Join(sub, ".tmp"), c.dr},
				{filepath.Join(sub, "f.json"), c.file},
				{filepath.Join(sub, "in.jsonl"), c.file},
				{filepath.Join(sub, "by-path.jsonl"), c.file},
				{filepath.Join(sub, "log.jsonl"), c.file},
				{filepath.Join(sub, ".marker"), c.lock},
				{filepath.Join(sub, ".lock"), c.lock},
				{filepath.Join(root, "w", "top.jsonl"), c.file},
				{filepath.Join(root, "w", ".lock"), c.lock},
			} {
				got := modeOf(t, w.path)
				if c.exact && got != w.want || got&^w.want != 0 {
					t.Errorf("%s: mode %04o, want %04o", w.path, got, w.want)
				}
			}
		})
	}
}
