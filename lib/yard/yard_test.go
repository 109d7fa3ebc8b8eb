package yard_test

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/impyard/impyard/lib/yard"
	"github.com/impyard/impyard/lib/yard/yardtest"
)

// TestOpenRefusesNonYards: a directory without the marker, a missing one
// and a file are each not a yard, by the sentinel and in the words every
// program prints, and Open creates nothing in any of them.
func TestOpenRefusesNonYards(t *testing.T) {
	dir := t.TempDir()
	empty := filepath.Join(dir, "empty")
	os.Mkdir(empty, 0o750)
	file := filepath.Join(dir, "file")
	os.WriteFile(file, []byte("x"), 0o640)
	for _, root := range []string{empty, filepath.Join(dir, "missing"), file, filepath.Join(file, "below")} {
		before := yardtest.Tree(t, dir)
		_, err := yard.Open(root)
		if !errors.Is(err, yard.ErrNotAYard) {
			t.Errorf("Open(%s): %v; want ErrNotAYard", root, err)
			continue
		}
		want := "not a yard: " + root + " (set IMPYARD_ROOT or run 'impsup init " + root + "')"
		if err.Error() != want {
			t.Errorf("Open(%s):\n got %q\nwant %q", root, err, want)
		}
		yardtest.Unchanged(t, dir, before, "Open of "+root)
	}
}

// TestOpenResolvesRoot: the flag wins over IMPYARD_ROOT, which wins over
// the current directory, and the root is made absolute.
func TestOpenResolvesRoot(t *testing.T) {
	flag, env, cwd := yardtest.New(t), yardtest.New(t), yardtest.New(t)
	t.Setenv("IMPYARD_ROOT", env.Root)
	t.Chdir(cwd.Root)
	for _, c := range []struct{ flag, want string }{{flag.Root, flag.Root}, {"", env.Root}} {
		y, err := yard.Open(c.flag)
		if err != nil || y.Root != c.want {
			t.Errorf("Open(%q) = %v, %v; want %s", c.flag, y, err, c.want)
		}
	}
	t.Setenv("IMPYARD_ROOT", "")
	if y, err := yard.Open(""); err != nil || y.Root != cwd.Root {
		t.Errorf("Open(\"\") with no IMPYARD_ROOT = %v, %v; want the current directory %s", y, err, cwd.Root)
	}
}

// TestMarkOnce: Mark writes the marker once, in its format, and a second
// Mark leaves it as it was.
func TestMarkOnce(t *testing.T) {
	defer func(n func() time.Time) { yard.Now = n }(yard.Now)
	yard.Now = func() time.Time { return time.Date(2026, 11, 30, 8, 0, 30, 999, time.FixedZone("x", 3600)) }
	y, made, err := yard.Prepare(filepath.Join(t.TempDir(), "new", "yard"))
	if err != nil || !made {
		t.Fatalf("Prepare: %v, %v; want it made", made, err)
	}
	if _, err := yard.Open(y.Root); !errors.Is(err, yard.ErrNotAYard) {
		t.Fatalf("Open before Mark: %v; want ErrNotAYard", err)
	}
	for i, want := range []bool{true, false} {
		if i == 1 {
			yard.Now = time.Now
		}
		wrote, err := y.Mark()
		if err != nil || wrote != want {
			t.Fatalf("Mark #%d: %v, %v; want %v", i+1, wrote, err, want)
		}
		b, _ := os.ReadFile(y.Path(yard.Marker))
		if got := string(b); got != `{"schema":"impyard.yard/1","created":"2026-11-30T07:00:30Z"}`+"\n" {
			t.Errorf("marker after Mark #%d: %q", i+1, got)
		}
	}
	if _, err := yard.Open(y.Root); err != nil {
		t.Errorf("Open after Mark: %v", err)
	}
	if _, made, err := yard.Prepare(y.Root); err != nil || made {
		t.Errorf("Prepare of a yard: made %v, %v; want false, nil", made, err)
	}
}

// TestMarkerChecked: a marker of another major, not a marker, or planted
// as a symlink or directory is refused naming it, not taken for a yard
// and not taken for a missing marker either.
func TestMarkerChecked(t *testing.T) {
	for name, plant := range map[string]func(p string) error{
		"future":  func(p string) error { return os.WriteFile(p, []byte(`{"schema":"impyard.yard/2"}`), 0o640) },
		"task":    func(p string) error { return os.WriteFile(p, []byte(`{"schema":"impyard.task/1"}`), 0o640) },
		"garbage": func(p string) error { return os.WriteFile(p, []byte("yes"), 0o640) },
		"symlink": func(p string) error { return os.Symlink(filepath.Join(filepath.Dir(p), "elsewhere"), p) },
		"dir":     func(p string) error { return os.Mkdir(p, 0o750) },
	} {
		root := t.TempDir()
		if err := plant(filepath.Join(root, yard.Marker)); err != nil {
			t.Fatal(err)
		}
		_, err := yard.Open(root)
		if err == nil || errors.Is(err, yard.ErrNotAYard) || !strings.Contains(err.Error(), filepath.Join(root, yard.Marker)) {
			t.Errorf("%s: Open = %v; want an error naming the marker", name, err)
		}
		y, _, _ := yard.Prepare(root)
		if _, err := y.Marked(); err == nil {
			t.Errorf("%s: Marked took it for a marker", name)
		}
	}
}

// TestPrepareRefusesFile: a root that is a file is refused and left alone.
func TestPrepareRefusesFile(t *testing.T) {
	file := filepath.Join(t.TempDir(), "file")
	os.WriteFile(file, []byte("mine"), 0o640)
	if _, _, err := yard.Prepare(file); err == nil || !strings.Contains(err.Error(), file+": exists and is not a directory") {
		t.Errorf("Prepare(file) = %v; want a refusal naming it", err)
	}
	if b, _ := os.ReadFile(file); string(b) != "mine" {
		t.Errorf("the file is now %q", b)
	}
}

// TestSkeleton: the directories are made once, and reported only then.
func TestSkeleton(t *testing.T) {
	y := yardtest.New(t)
	made, err := y.Skeleton()
	if err != nil {
		t.Fatal(err)
	}
	var rel []string
	for _, p := range made {
		r, _ := filepath.Rel(y.Root, p)
		rel = append(rel, r)
	}
	if got, want := strings.Join(rel, " "), "queue gates/pending gates/resolved journal runs policies"; got != want {
		t.Errorf("Skeleton made %q, want %q", got, want)
	}
	if made, err := y.Skeleton(); err != nil || len(made) != 0 {
		t.Errorf("second Skeleton made %v, %v; want nothing", made, err)
	}
}

// TestSkeletonRefusesSymlink: a directory of the yard planted as a
// symlink is refused, naming it, and nothing is made through it.
func TestSkeletonRefusesSymlink(t *testing.T) {
	y := yardtest.New(t)
	elsewhere := t.TempDir()
	if err := os.Symlink(elsewhere, y.Path("gates")); err != nil {
		t.Fatal(err)
	}
	if _, err := y.Skeleton(); err == nil || !strings.Contains(err.Error(), y.Path("gates")) {
		t.Errorf("Skeleton with gates/ a symlink: %v; want a refusal naming it", err)
	}
	if entries, _ := os.ReadDir(elsewhere); len(entries) != 0 {
		t.Errorf("Skeleton made %v through the symlink", entries)
	}
	if _, err := y.CreatePolicy([]byte("{}")); err != nil {
		t.Fatal(err)
	}
	os.Remove(y.PolicyPath())
	os.Symlink(filepath.Join(elsewhere, "p.json"), y.PolicyPath())
	if made, err := y.CreatePolicy([]byte("{}")); err != nil || made {
		t.Errorf("CreatePolicy over a symlink: %v, %v; want it left alone", made, err)
	}
	if _, err := os.Lstat(filepath.Join(elsewhere, "p.json")); !os.IsNotExist(err) {
		t.Errorf("CreatePolicy wrote through a symlink: %v", err)
	}
}

// TestOpenRefusesHome: a directory whose .impyard is the default
// IMPYARD_HOME (a directory, or a symlink to one) is not a yard, in the
// words every program prints, not an error about the marker; a home
// directory run in without IMPYARD_ROOT says what the manual says.
func TestOpenRefusesHome(t *testing.T) {
	for name, plant := range map[string]func(p string) error{
		"dir": func(p string) error { return os.MkdirAll(filepath.Join(p, "ca"), 0o700) },
		"symlink": func(p string) error {
			home := filepath.Join(filepath.Dir(filepath.Dir(p)), "elsewhere")
			if err := os.MkdirAll(home, 0o700); err != nil {
				return err
			}
			return os.Symlink(home, p)
		},
	} {
		dir := t.TempDir()
		root := filepath.Join(dir, "home")
		os.Mkdir(root, 0o750)
		if err := plant(filepath.Join(root, ".impyard")); err != nil {
			t.Fatal(err)
		}
		before := yardtest.Tree(t, dir)
		_, err := yard.Open(root)
		want := "not a yard: " + root + " (set IMPYARD_ROOT or run 'impsup init " + root + "')"
		if !errors.Is(err, yard.ErrNotAYard) || err.Error() != want {
			t.Errorf("%s: Open = %v; want %q", name, err, want)
		}
		yardtest.Unchanged(t, dir, before, name+": Open")
	}
}

// oldMarker is a marker as 'impsup init' wrote it before the marker's
// name was changed.
const oldMarker = `{"schema":"impyard.yard/1","created":"2026-11-01T08:00:00Z"}` + "\n"

// TestOldMarkerRenamed: a yard made with the marker's old name .impyard
// is a yard, and the first Open renames its marker to the new name, bytes
// unchanged; later Opens find it there.
func TestOldMarkerRenamed(t *testing.T) {
	root := t.TempDir()
	os.WriteFile(filepath.Join(root, ".impyard"), []byte(oldMarker), 0o640)
	for i := 1; i <= 2; i++ {
		if _, err := yard.Open(root); err != nil {
			t.Fatalf("Open #%d of a yard with the old marker: %v", i, err)
		}
		if b, err := os.ReadFile(filepath.Join(root, yard.Marker)); err != nil || string(b) != oldMarker {
			t.Errorf("after Open #%d, %s is %q, %v; want the old marker's bytes", i, yard.Marker, b, err)
		}
		if _, err := os.Lstat(filepath.Join(root, ".impyard")); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("after Open #%d the old marker is still there: %v", i, err)
		}
	}
}

// TestOldMarkerKept: an old marker is still a yard's where it cannot be
// renamed (the yard's lock cannot be taken), and left where it is beside
// a marker of the new name, which is the one read.
func TestOldMarkerKept(t *testing.T) {
	stuck := t.TempDir()
	os.WriteFile(filepath.Join(stuck, ".impyard"), []byte(oldMarker), 0o640)
	os.Mkdir(filepath.Join(stuck, ".lock"), 0o750)
	if _, err := yard.Open(stuck); err != nil {
		t.Errorf("Open of an old yard whose marker cannot be renamed: %v", err)
	}
	if b, _ := os.ReadFile(filepath.Join(stuck, ".impyard")); string(b) != oldMarker {
		t.Errorf("the old marker that could not be renamed is now %q", b)
	}
	both := yardtest.New(t)
	os.WriteFile(both.Path(".impyard"), []byte("not a marker"), 0o640)
	if _, err := yard.Open(both.Root); err != nil {
		t.Errorf("Open of a yard with both markers: %v", err)
	}
	if b, _ := os.ReadFile(both.Path(".impyard")); string(b) != "not a marker" {
		t.Errorf("the old name beside a new marker is now %q", b)
	}
}

// TestOldMarkerChecked: a regular file of the old name is read as a
// marker and refused, naming it, when it is not one.
func TestOldMarkerChecked(t *testing.T) {
	for name, data := range map[string]string{"future": `{"schema":"impyard.yard/2"}`, "garbage": "yes"} {
		root := t.TempDir()
		os.WriteFile(filepath.Join(root, ".impyard"), []byte(data), 0o640)
		_, err := yard.Open(root)
		if err == nil || errors.Is(err, yard.ErrNotAYard) || !strings.Contains(err.Error(), filepath.Join(root, ".impyard")) {
			t.Errorf("%s: Open = %v; want an error naming the old marker", name, err)
		}
		if _, err := os.Lstat(filepath.Join(root, yard.Marker)); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s: a marker was made from it: %v", name, err)
		}
	}
}

// TestOldMarkerRace: programs opening an old yard at once all take it
// for a yard, whichever of them renames the marker while the others
// look for it.
func TestOldMarkerRace(t *testing.T) {
	for round := 0; round < 50; round++ {
		root := t.TempDir()
		os.WriteFile(filepath.Join(root, ".impyard"), []byte(oldMarker), 0o640)
		errs := make(chan error, 8)
		for range 8 {
			go func() {
				_, err := yard.Open(root)
				errs <- err
			}()
		}
		for range 8 {
			if err := <-errs; err != nil {
				t.Fatalf("round %d: Open while another renames the marker: %v", round, err)
			}
		}
	}
}
