package store

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

func TestTxReadWriteRemove(t *testing.T) {
	d := mustDir(t)
	err := d.Update(func(tx *Tx) error {
		if got, want := tx.Path("a.json"), filepath.Join(d.Path(), "a.json"); got != want {
			t.Errorf("Path = %s, want %s", got, want)
		}
		if _, err := tx.Read("a.json"); !IsNotExist(err) {
			t.Errorf("read of a missing file: %v", err)
		}
		if err := tx.Write("a.json", []byte("1")); err != nil {
			return err
		}
		// One sub-directory is created on the way.
		if err := tx.Write(".unique/k", []byte("t-1\n")); err != nil {
			return err
		}
		b, err := tx.Read(".unique/k")
		if err != nil || string(b) != "t-1\n" {
			t.Errorf("read back %q %v", b, err)
		}
		if err := tx.Remove("a.json"); err != nil {
			return err
		}
		// Removing what is not there is not an error.
		return tx.Remove("a.json")
	})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(d.Path(), "a.json")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a.json survived its removal: %v", err)
	}
	if b, err := os.ReadFile(filepath.Join(d.Path(), ".unique", "k")); err != nil || string(b) != "t-1\n" {
		t.Errorf(".unique/k on disk: %q %v", b, err)
	}
	// Bad names are refused by every operation, naming the path.
	for _, name := range []string{"a\\b", "x\x00", "..", "", "sub/"} {
		err := d.Update(func(tx *Tx) error {
			if _, err := tx.Read(name); err == nil {
				t.Errorf("Read(%q) succeeded", name)
			}
			if err := tx.Remove(name); err == nil {
				t.Errorf("Remove(%q) succeeded", name)
			}
			return tx.Write(name, nil)
		})
		if err == nil || !strings.Contains(err.Error(), "not a plain name") {
			t.Errorf("Write(%q): %v", name, err)
		}
	}
	// Removing a non-empty directory by name fails and says so.
	os.MkdirAll(filepath.Join(d.Path(), "full", "x"), 0o750)
	if err := d.Update(func(tx *Tx) error { return tx.Remove("full") }); err == nil {
		t.Error("removed a non-empty directory")
	}
	// An error from the transaction is returned as it is.
	sentinel := errors.New("stop")
	if err := d.Update(func(*Tx) error { return sentinel }); err != sentinel {
		t.Errorf("Update returned %v, want the transaction's error", err)
	}
}

func TestMkdirAll(t *testing.T) {
	root := t.TempDir()
	for _, rel := range []string{"", "."} {
		if got, err := MkdirAll(root+"/", rel); err != nil || got != root {
			t.Errorf("MkdirAll(root, %q) = %q %v, want the root", rel, got, err)
		}
	}
	got, err := MkdirAll(root, "a/b/c")
	if err != nil || got != filepath.Join(root, "a", "b", "c") {
		t.Fatalf("MkdirAll = %q %v", got, err)
	}
	fi, err := os.Stat(got)
	if err != nil || !fi.IsDir() || fi.Mode().Perm() != dirPerm {
		t.Errorf("made %v %v, want a directory with mode %o", fi, err, dirPerm)
	}
	// Again: nothing to do, no error.
	if again, err := MkdirAll(root, "a/b/c"); err != nil || again != got {
		t.Errorf("second MkdirAll = %q %v", again, err)
	}
	// A file in the way is refused, naming it.
	os.WriteFile(filepath.Join(root, "a", "file"), nil, 0o640)
	if _, err := MkdirAll(root, "a/file/x"); err == nil || !strings.Contains(err.Error(), "is not a directory") || !strings.Contains(err.Error(), filepath.Join(root, "a", "file")) {
		t.Errorf("file in the way: %v", err)
	}
	// The root itself may be a symlink: the operator's choice.
	link := filepath.Join(t.TempDir(), "yard")
	os.Symlink(root, link)
	if got, err := MkdirAll(link, "a/b"); err != nil || got != filepath.Join(link, "a", "b") {
		t.Errorf("through a symlinked root: %q %v", got, err)
	}
	// A root that does not exist cannot have directories made below it.
	if _, err := MkdirAll(filepath.Join(root, "missing", "deeper"), "x/y"); err == nil {
		t.Error("made directories below a missing root")
	}
}

func TestTryLock(t *testing.T) {
	p := filepath.Join(t.TempDir(), "g.lock")
	unlock, ok, err := TryLock(p)
	if err != nil || !ok {
		t.Fatalf("first TryLock: %v %v", ok, err)
	}
	fi, err := os.Stat(p)
	// 0640 (at most: the umask applies outside a shared directory), so
	// that the group can lock it for reading.
	if err != nil || fi.Mode().Perm()&^0o640 != 0 {
		t.Errorf("lock file %v %v, want mode 0640", fi, err)
	}
	// Held (flock is per open file, so a second open conflicts).
	if u, ok, err := TryLock(p); err != nil || ok || u != nil {
		t.Errorf("TryLock while held: %v %v", ok, err)
	}
	unlock()
	u, ok, err := TryLock(p)
	if err != nil || !ok {
		t.Errorf("TryLock after unlock: %v %v", ok, err)
	}
	u()
	// A symlink at the lock's path is refused, not followed.
	target := filepath.Join(t.TempDir(), "target")
	link := filepath.Join(t.TempDir(), "l.lock")
	os.Symlink(target, link)
	if _, _, err := TryLock(link); err == nil || !strings.Contains(err.Error(), link) {
		t.Errorf("TryLock through a symlink: %v", err)
	}
	if _, err := Lock(link); err == nil || !strings.Contains(err.Error(), link) {
		t.Errorf("Lock through a symlink: %v", err)
	}
	if _, err := os.Stat(target); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the symlink was followed: %v", err)
	}
}

func TestReadFileLimits(t *testing.T) {
	dir := t.TempDir()
	// A sparse file one byte over the limit is refused without reading it.
	big := filepath.Join(dir, "big.json")
	f, _ := os.Create(big)
	f.Truncate(MaxFile + 1)
	f.Close()
	if _, err := ReadFile(big); err == nil || !strings.Contains(err.Error(), "over the 67108864 limit") || !strings.Contains(err.Error(), big) {
		t.Errorf("over MaxFile: %v", err)
	}
	// At the limit it is read whole.
	os.Truncate(big, MaxFile)
	if b, err := ReadFile(big); err != nil || len(b) != MaxFile {
		t.Errorf("at MaxFile: %d bytes, %v", len(b), err)
	}
	empty := filepath.Join(dir, "empty.json")
	os.WriteFile(empty, nil, 0o640)
	if b, err := ReadFile(empty); err != nil || len(b) != 0 {
		t.Errorf("empty file: %q %v", b, err)
	}
	if _, err := ReadFile(filepath.Join(dir, "missing.json")); !IsNotExist(err) {
		t.Errorf("missing file: %v", err)
	}
}

func TestEncodeDecode(t *testing.T) {
	type rec struct {
		Schema string `json:"schema"`
		Text   string `json:"text"`
		N      int    `json:"n,omitempty"`
	}
	b, err := Encode(rec{Schema: Schema("note", 1), Text: "<a&b>"})
	if err != nil {
		t.Fatal(err)
	}
	if want := "{\n  \"schema\": \"impyard.note/1\",\n  \"text\": \"<a&b>\"\n}\n"; string(b) != want {
		t.Errorf("Encode = %q, want %q", b, want)
	}
	l, err := Line(rec{Schema: "s", Text: "<x>", N: 2})
	if err != nil || string(l) != `{"schema":"s","text":"<x>","n":2}`+"\n" {
		t.Errorf("Line = %q %v", l, err)
	}
	if _, err := Encode(func() {}); err == nil {
		t.Error("Encode of a func succeeded")
	}
	if _, err := Line(make(chan int)); err == nil {
		t.Error("Line of a chan succeeded")
	}

	var got rec
	if err := Decode("notes/a.json", b, "note", 1, &got); err != nil || got.Text != "<a&b>" {
		t.Errorf("Decode = %+v %v", got, err)
	}
	for _, c := range []struct{ data, want string }{
		{`{"schema":"impyard.note/2","text":"x"}`, "not supported"},
		{`{"schema":"impyard.note/1","text":"x","extra":1}`, "notes/a.json: "},
		{`{"schema":"impyard.note/1","text":"x","text":"y"}`, "notes/a.json: "},
		{`{"schema":"impyard.note/1","text":1}`, "notes/a.json: "},
	} {
		if err := Decode("notes/a.json", []byte(c.data), "note", 1, &got); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("Decode(%s) = %v, want an error with %q", c.data, err, c.want)
		}
	}
	for _, c := range []struct {
		kind  string
		major int
		want  string
	}{
		{"task", 1, "impyard.task/1"},
		{"gate", 12, "impyard.gate/12"},
	} {
		if got := Schema(c.kind, c.major); got != c.want {
			t.Errorf("Schema(%s, %d) = %s, want %s", c.kind, c.major, got, c.want)
		}
	}
	// The major must match exactly, not as a prefix.
	for _, s := range []string{"impyard.note/10", "impyard.note/01", "impyard.note/", "impyard.Note/1", "xmpyard.note/1", "impyard.note/1 "} {
		if err := CheckSchema("a", []byte(`{"schema":"`+s+`"}`), "note", 1); err == nil {
			t.Errorf("schema %q accepted as impyard.note/1", s)
		}
	}
}

// Check makes the sub-directories the names need and refuses a name that
// could not be written, before the transaction changes anything.
func TestTxCheck(t *testing.T) {
	d := mustDir(t)
	elsewhere := t.TempDir()
	os.Symlink(elsewhere, filepath.Join(d.Path(), "linked"))
	err := d.Update(func(tx *Tx) error {
		if err := tx.Check("a.json", "sub/b.json", "other/c.json"); err != nil {
			return err
		}
		for _, sub := range []string{"sub", "other"} {
			if fi, err := os.Lstat(filepath.Join(d.Path(), sub)); err != nil || !fi.IsDir() {
				t.Errorf("Check did not make %s: %v %v", sub, fi, err)
			}
		}
		if err := tx.Check("a.json", "linked/x.json"); err == nil || !strings.Contains(err.Error(), "symlink") {
			t.Errorf("Check through a symlinked directory: %v", err)
		}
		if err := tx.Check("b.json", ".."); err == nil || !strings.Contains(err.Error(), "not a plain name") {
			t.Errorf("Check(..): %v", err)
		}
		return tx.Check()
	})
	if err != nil {
		t.Fatal(err)
	}
	if entries, _ := os.ReadDir(elsewhere); len(entries) != 0 {
		t.Errorf("Check made %v through the symlink", entries)
	}
	for _, n := range []string{"a.json", "b.json"} {
		if _, err := os.Lstat(filepath.Join(d.Path(), n)); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("Check wrote %s: %v", n, err)
		}
	}
}

// A write that cannot be renamed into place (a directory is there) fails
// naming the file and leaves no temp file behind; the directory is kept.
func TestTxWriteFailureLeavesNoTemp(t *testing.T) {
	d := mustDir(t)
	os.MkdirAll(filepath.Join(d.Path(), "busy", "x"), 0o750)
	err := d.Update(func(tx *Tx) error { return tx.Write("busy", []byte("data")) })
	if err == nil || !strings.Contains(err.Error(), filepath.Join(d.Path(), "busy")) {
		t.Fatalf("write over a directory: %v", err)
	}
	if left, _ := os.ReadDir(filepath.Join(d.Path(), tmpName)); len(left) != 0 {
		t.Errorf("temp files left: %v", left)
	}
	if fi, err := os.Stat(filepath.Join(d.Path(), "busy", "x")); err != nil || !fi.IsDir() {
		t.Errorf("the directory written over is gone: %v", err)
	}
	// A .tmp replaced by a symlink is refused, and nothing is written
	// through it.
	other := t.TempDir()
	os.RemoveAll(filepath.Join(d.Path(), tmpName))
	os.Symlink(other, filepath.Join(d.Path(), tmpName))
	err = d.Update(func(tx *Tx) error { return tx.Write("a.json", []byte("1")) })
	if err == nil || !strings.Contains(err.Error(), "symlink") {
		t.Errorf("write through a symlinked .tmp: %v", err)
	}
	if left, _ := os.ReadDir(other); len(left) != 0 {
		t.Errorf("written through the symlink: %v", left)
	}
}

// Scratch opens a file once per transaction, created only when asked,
// never through a symlink and never anything but a regular file with one
// link; what is written through it stays.
func TestTxScratch(t *testing.T) {
	d := mustDir(t)
	p := filepath.Join(d.Path(), "mark")
	err := d.Update(func(tx *Tx) error {
		if f, err := tx.Scratch("mark", false); f != nil || err != nil {
			t.Errorf("missing, not created: %v %v", f, err)
		}
		if _, err := os.Lstat(p); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("created without create: %v", err)
		}
		f, err := tx.Scratch("mark", true)
		if err != nil {
			return err
		}
		if _, err := f.WriteAt([]byte("t-1"), 0); err != nil {
			return err
		}
		if again, err := tx.Scratch("mark", false); again != f || err != nil {
			t.Errorf("opened twice in one transaction: %v", err)
		}
		_, err = tx.Scratch("../mark", true)
		if err == nil || !strings.Contains(err.Error(), "not a plain name") {
			t.Errorf("a path for a name: %v", err)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(p); string(b) != "t-1" {
		t.Errorf("written through it: %q %v", b, err)
	}
	if fi, _ := os.Stat(p); fi.Mode().Perm() != 0o600 {
		t.Errorf("mode %v, want 0600", fi.Mode().Perm())
	}
	target := filepath.Join(t.TempDir(), "target")
	for name, plant := range map[string]func() error{
		"a symlink":    func() error { return os.Symlink(target, p) },
		"a hard link":  func() error { os.WriteFile(target, nil, 0o600); return os.Link(target, p) },
		"a directory":  func() error { return os.Mkdir(p, 0o700) },
		"a named pipe": func() error { return syscall.Mkfifo(p, 0o600) },
	} {
		os.RemoveAll(p)
		os.Remove(target)
		if err := plant(); err != nil {
			t.Fatal(err)
		}
		err := d.Update(func(tx *Tx) error {
			_, err := tx.Scratch("mark", true)
			return err
		})
		if err == nil || !strings.Contains(err.Error(), p) {
			t.Errorf("%s as the file: %v", name, err)
		}
	}
	if _, err := os.Lstat(target); err == nil {
		if b, _ := os.ReadFile(target); len(b) != 0 {
			t.Errorf("written through a link: %q", b)
		}
	}
}

// Open lists and reads a sub-directory of the transaction, or the
// directory itself, refusing a symlinked one.
func TestTxOpen(t *testing.T) {
	d := mustDir(t)
	err := d.Update(func(tx *Tx) error {
		if err := tx.Write("sub/a.json", []byte("1")); err != nil {
			return err
		}
		for _, rel := range []string{"sub", ""} {
			o, err := tx.Open(rel)
			if err != nil {
				return err
			}
			entries, err := o.ReadDir()
			o.Close()
			if err != nil || len(entries) == 0 {
				t.Errorf("Open(%q): %v %v", rel, entries, err)
			}
		}
		if b, err := tx.Read("sub/a.json"); string(b) != "1" || err != nil {
			t.Errorf("read back %q %v", b, err)
		}
		os.Symlink(t.TempDir(), filepath.Join(d.Path(), "link"))
		if _, err := tx.Open("link"); err == nil || !strings.Contains(err.Error(), "symlink") {
			t.Errorf("opened a symlinked directory: %v", err)
		}
		if _, err := tx.Read("link/a.json"); err == nil || !strings.Contains(err.Error(), "symlink") {
			t.Errorf("read through a symlinked directory: %v", err)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// UpdateChecked runs its check only where there is no lock file yet: a
// refusal there creates nothing, not even the lock file; with the check
// passed, or a lock file there, the transaction runs.
func TestUpdateChecked(t *testing.T) {
	d := mustDir(t)
	lock := filepath.Join(d.Path(), lockName)
	refused := errors.New("newer")
	checked, ran := 0, 0
	check := func(err error) func() error { return func() error { checked++; return err } }
	fn := func(tx *Tx) error { ran++; return tx.Write("a.json", []byte("1")) }
	before := openFDs(t)
	if err := d.UpdateChecked(check(refused), fn); err != refused || checked != 1 || ran != 0 {
		t.Fatalf("refused: %v, checked %d, ran %d", err, checked, ran)
	}
	if n := openFDs(t); n != before {
		t.Errorf("%d descriptors open after a refusal, %d before", n, before)
	}
	if entries, _ := os.ReadDir(d.Path()); len(entries) != 0 {
		t.Fatalf("a refusal created %v", entries)
	}
	if err := d.UpdateChecked(check(nil), fn); err != nil || checked != 2 || ran != 1 {
		t.Fatalf("passed: %v, checked %d, ran %d", err, checked, ran)
	}
	if _, err := os.Stat(lock); err != nil {
		t.Fatalf("no lock file after a transaction: %v", err)
	}
	if err := d.UpdateChecked(check(refused), fn); err != nil || checked != 2 || ran != 2 {
		t.Fatalf("with a lock file: %v, checked %d, ran %d", err, checked, ran)
	}
}

// Existing names a store directory without touching it; its transactions
// walk it as OpenDir's do, and fail naming it once it is gone or a
// symlink. A rel that is not plain names is refused.
func TestExisting(t *testing.T) {
	root := t.TempDir()
	if _, err := OpenDir(root, "queue/yuko"); err != nil {
		t.Fatal(err)
	}
	d, err := Existing(root, "queue/yuko")
	if err != nil || d.Path() != filepath.Join(root, "queue", "yuko") {
		t.Fatalf("Existing: %v %v", d, err)
	}
	if err := d.Update(func(tx *Tx) error { return tx.Write("a.json", []byte("1")) }); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(filepath.Join(root, "queue", "yuko", "a.json")); string(b) != "1" {
		t.Errorf("written: %q", b)
	}
	for _, rel := range []string{"queue/..", "..", "/queue", "", "queue/a\\b"} {
		if _, err := Existing(root, rel); err == nil || !strings.Contains(err.Error(), "not a plain name") {
			t.Errorf("Existing(%q): %v", rel, err)
		}
	}
	gone, _ := Existing(root, "queue/kit")
	if err := gone.Update(func(*Tx) error { return nil }); err == nil || !strings.Contains(err.Error(), filepath.Join(root, "queue", "kit")) {
		t.Errorf("a store that is not there: %v", err)
	}
	if _, err := os.Lstat(filepath.Join(root, "queue", "kit")); err == nil {
		t.Error("a missing store was created")
	}
	os.Symlink(t.TempDir(), filepath.Join(root, "queue", "rex"))
	link, _ := Existing(root, "queue/rex")
	if err := link.Update(func(*Tx) error { return nil }); err == nil || !strings.Contains(err.Error(), "symlink") {
		t.Errorf("a symlinked store: %v", err)
	}
}

// Opened.Exists looks below an open directory, through sub-directories
// walked without following a symlink.
func TestOpenedExists(t *testing.T) {
	root := t.TempDir()
	os.MkdirAll(filepath.Join(root, "queue", "yuko"), 0o750)
	os.WriteFile(filepath.Join(root, "queue", "yuko", "t-1.json"), nil, 0o640)
	os.Symlink(filepath.Join(root, "queue", "yuko"), filepath.Join(root, "queue", "alias"))
	o, err := OpenIn(root, "queue")
	if err != nil {
		t.Fatal(err)
	}
	defer o.Close()
	for rel, want := range map[string]bool{"yuko/t-1.json": true, "yuko/t-2.json": false, "kit/t-1.json": false, "yuko": true, "alias": true} {
		if got, err := o.Exists(rel); got != want || err != nil {
			t.Errorf("Exists(%s) = %v %v, want %v", rel, got, err, want)
		}
	}
	if got, err := o.Exists("alias/t-1.json"); got || err == nil || !strings.Contains(err.Error(), "symlink") {
		t.Errorf("through a symlink: %v %v", got, err)
	}
	if _, err := o.Exists("yuko/.."); err == nil {
		t.Error("Exists(yuko/..) accepted")
	}
	// The directory stays usable: nothing it was given was closed.
	if got, err := o.Exists("yuko/t-1.json"); !got || err != nil {
		t.Errorf("after the walks: %v %v", got, err)
	}
}

// A file longer than fstat says (a /proc file says 0) is read whole by
// every reader: the buffer grows and a full read is followed by another.
func TestReadLongerThanStat(t *testing.T) {
	want, err := os.ReadFile("/proc/self/cmdline")
	if err != nil || len(want) < 16 {
		t.Skipf("no /proc/self/cmdline to read: %v", err)
	}
	if got, err := ReadFile("/proc/self/cmdline"); err != nil || string(got) != string(want) {
		t.Errorf("ReadFile: %q %v, want %q", got, err, want)
	}
	o, err := OpenIn("/proc/self", ".")
	if err != nil {
		t.Fatal(err)
	}
	defer o.Close()
	if got, err := o.ReadFile("cmdline"); err != nil || string(got) != string(want) {
		t.Errorf("Opened.ReadFile: %q %v, want %q", got, err, want)
	}
}

// A name with a component that is not plain is refused by a transaction's
// walk, first or later, and the transaction's own directory and the
// sub-directories the walk opened are left as they were: open, and
// closed.
func TestTxWalkRefusesBadComponent(t *testing.T) {
	d := mustDir(t)
	err := d.Update(func(tx *Tx) error {
		if err := tx.Write("sub/a.json", []byte("1")); err != nil {
			return err
		}
		before := openFDs(t)
		for _, name := range []string{"a\\b/x", "sub/a\\b/x"} {
			if _, err := tx.Read(name); err == nil || !strings.Contains(err.Error(), "not a plain name") {
				t.Errorf("Read(%q): %v", name, err)
			}
			if _, err := tx.Open(filepath.Dir(name)); err == nil {
				t.Errorf("Open(%q) accepted", filepath.Dir(name))
			}
		}
		if n := openFDs(t); n != before {
			t.Errorf("%d descriptors open after the refusals, %d before", n, before)
		}
		return tx.Write("a.json", []byte("2"))
	})
	if err != nil {
		t.Fatalf("the transaction's directory did not survive the refusals: %v", err)
	}
}
