package store

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// ReadDirIn lists every entry of a directory below the root, has nothing
// for a missing one, and refuses one reached through a symlink.
func TestReadDirIn(t *testing.T) {
	root := t.TempDir()
	dir := filepath.Join(root, "gates", "yuko")
	if err := os.MkdirAll(dir, 0o750); err != nil {
		t.Fatal(err)
	}
	want := []string{"a.json", "b.json", "c.json", "sub"}
	for _, n := range want[:3] {
		os.WriteFile(filepath.Join(dir, n), []byte(n), 0o640)
	}
	os.Mkdir(filepath.Join(dir, "sub"), 0o750)
	entries, err := ReadDirIn(root, "gates/yuko")
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, e := range entries {
		got = append(got, e.Name())
	}
	slices.Sort(got)
	if !slices.Equal(got, want) {
		t.Errorf("entries %q, want %q", got, want)
	}
	if entries, err := ReadDirIn(root, "gates/missing"); err != nil || entries != nil {
		t.Errorf("missing directory: %v %v", entries, err)
	}
	// A symlink on the way, or at the directory itself, is refused.
	os.Symlink(filepath.Join(root, "gates"), filepath.Join(root, "alias"))
	for _, rel := range []string{"alias/yuko", "alias"} {
		if entries, err := ReadDirIn(root, rel); err == nil || !strings.Contains(err.Error(), "symlink") || !strings.Contains(err.Error(), filepath.Join(root, "alias")) || entries != nil {
			t.Errorf("%s: %v %v, want a refusal naming the link", rel, entries, err)
		}
	}
	// An empty directory has no entries; once closed it cannot be
	// listed, and the error names it.
	d, err := OpenIn(root, "gates/yuko/sub")
	if err != nil {
		t.Fatal(err)
	}
	if entries, err := d.ReadDir(); err != nil || len(entries) != 0 {
		t.Errorf("empty directory: %v %v", entries, err)
	}
	d.Close()
	if entries, err := d.ReadDir(); err == nil || entries != nil || !strings.Contains(err.Error(), filepath.Join(dir, "sub")) {
		t.Errorf("closed directory: %v %v", entries, err)
	}
	// Files read through an opened directory come from it.
	top, err := OpenIn(root, "gates/yuko")
	if err != nil {
		t.Fatal(err)
	}
	defer top.Close()
	if b, err := top.ReadFile("b.json"); err != nil || string(b) != "b.json" {
		t.Errorf("ReadFile through the opened directory: %q %v", b, err)
	}
	if _, err := top.ReadFile(".."); err == nil || !strings.Contains(err.Error(), "not a plain name") {
		t.Errorf("ReadFile(..): %v", err)
	}
}

// ExistsIn sees anything at the path, a symlink included (not followed),
// says no for what is missing, even a missing directory on the way, and
// refuses a symlinked directory on the way.
func TestExistsIn(t *testing.T) {
	root := t.TempDir()
	dir := filepath.Join(root, "tasks")
	os.Mkdir(dir, 0o750)
	os.WriteFile(filepath.Join(dir, "t-1.json"), nil, 0o640)
	os.Symlink(filepath.Join(root, "nowhere"), filepath.Join(dir, "dangling"))
	os.Symlink(dir, filepath.Join(root, "alias"))
	for _, c := range []struct {
		rel  string
		want bool
	}{
		{"tasks/t-1.json", true},
		{"tasks", true},
		{"tasks/dangling", true},
		{"tasks/t-2.json", false},
		{"missing/t-1.json", false},
		{"tasks/t-1.json/x", false},
	} {
		got, err := ExistsIn(root, c.rel)
		if c.rel == "tasks/t-1.json/x" {
			// A file where a directory should be is an error, not absence.
			if err == nil || !strings.Contains(err.Error(), "not a directory") {
				t.Errorf("%s: %v %v, want an error", c.rel, got, err)
			}
			continue
		}
		if err != nil || got != c.want {
			t.Errorf("ExistsIn(%s) = %v %v, want %v", c.rel, got, err, c.want)
		}
	}
	if got, err := ExistsIn(root, "alias/t-1.json"); err == nil || got || !strings.Contains(err.Error(), "symlink") {
		t.Errorf("through a symlinked directory: %v %v", got, err)
	}
	if got, err := ExistsIn(root, "tasks/.."); err == nil || got || !strings.Contains(err.Error(), "not a plain name") {
		t.Errorf("tasks/..: %v %v", got, err)
	}
	// A name too long for the file system is an error naming it.
	long := strings.Repeat("n", 300)
	if got, err := ExistsIn(root, "tasks/"+long); err == nil || got || !strings.Contains(err.Error(), filepath.Join(dir, long)) {
		t.Errorf("over-long name: %v %v", got, err)
	}
}

func TestBelow(t *testing.T) {
	root := t.TempDir()
	for _, c := range []struct{ path, want string }{
		{filepath.Join(root, "a", "b.json"), "a/b.json"},
		{root + "/a/../c", "c"},
		{root, "."},
		{filepath.Join(root, "..x"), "..x"},
	} {
		if got, err := Below(root+"/", c.path); err != nil || got != c.want {
			t.Errorf("Below(%s) = %q %v, want %q", c.path, got, err, c.want)
		}
	}
	for _, p := range []string{filepath.Dir(root), filepath.Join(root, "..", "x"), "/", "relative/path"} {
		if got, err := Below(root, p); err == nil || !strings.Contains(err.Error(), "not inside "+root) {
			t.Errorf("Below(%s) = %q %v, want an error", p, got, err)
		}
	}
}
