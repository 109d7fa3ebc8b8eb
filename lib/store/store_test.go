package store

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

func mustDir(t *testing.T) *Dir {
	t.Helper()
	d, err := OpenDir(t.TempDir(), "queue/yuko")
	if err != nil {
		t.Fatal(err)
	}
	return d
}

func TestWriteReadRoundTrip(t *testing.T) {
	d := mustDir(t)
	for _, want := range []string{"one\n", "two, longer than one\n", ""} {
		err := d.Update(func(tx *Tx) error { return tx.Write("a.json", []byte(want)) })
		if err != nil {
			t.Fatal(err)
		}
		got, err := ReadFile(filepath.Join(d.Path(), "a.json"))
		if err != nil {
			t.Fatal(err)
		}
		if string(got) != want {
			t.Errorf("got %q, want %q", got, want)
		}
	}
	fi, err := os.Stat(filepath.Join(d.Path(), "a.json"))
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != FilePerm {
		t.Errorf("mode %v, want %v", fi.Mode().Perm(), os.FileMode(FilePerm))
	}
}

// TestWriteModeIgnoresUmask: a yard file is FilePerm whatever the
// writer's umask, so a reader of the yard's group (impgw reading a gate
// impgate wrote, say) is never locked out by one operator's shell.
func TestWriteModeIgnoresUmask(t *testing.T) {
	d := mustDir(t)
	old := syscall.Umask(0o077)
	defer syscall.Umask(old)
	if err := d.Update(func(tx *Tx) error { return tx.Write("a.json", []byte("{}\n")) }); err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(filepath.Join(d.Path(), "a.json"))
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != FilePerm {
		t.Errorf("mode %v under umask 077, want %v", fi.Mode().Perm(), os.FileMode(FilePerm))
	}
}

func TestReadFileRefusesNonRegular(t *testing.T) {
	dir := t.TempDir()
	outside := filepath.Join(t.TempDir(), "secret")
	if err := os.WriteFile(outside, []byte("ca key"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(outside, filepath.Join(dir, "link.json")); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mkfifo(filepath.Join(dir, "fifo.json"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(filepath.Join(dir, "dir.json"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Link(outside, filepath.Join(dir, "hard.json")); err != nil {
		t.Fatal(err)
	}
	for name, want := range map[string]string{
		"link.json": "is a symlink",
		"fifo.json": "not a regular file",
		"dir.json":  "not a regular file",
		"hard.json": "hard links",
	} {
		done := make(chan struct{})
		var got []byte
		var err error
		go func() {
			got, err = ReadFile(filepath.Join(dir, name))
			close(done)
		}()
		select {
		case <-done:
		case <-time.After(5 * time.Second):
			t.Fatalf("%s: ReadFile blocked", name)
		}
		if err == nil || !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), name) {
			t.Errorf("%s: got %q, %v; want an error naming the file and saying %q", name, got, err, want)
		}
		// A listing reads through the directory it opened, with the same
		// refusals.
		d, err := OpenIn(filepath.Dir(dir), filepath.Base(dir))
		if err != nil {
			t.Fatal(err)
		}
		read := make(chan struct{})
		go func() {
			got, err = d.ReadFile(name)
			close(read)
		}()
		select {
		case <-read:
		case <-time.After(5 * time.Second):
			t.Fatalf("%s: Opened.ReadFile blocked", name)
		}
		d.Close()
		if err == nil || !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), filepath.Join(dir, name)) {
			t.Errorf("%s: Opened.ReadFile got %q, %v; want an error naming the file and saying %q", name, got, err, want)
		}
	}
}

func TestMkdirAllRefusesSymlinkAndTraversal(t *testing.T) {
	root := t.TempDir()
	elsewhere := t.TempDir()
	if err := os.Mkdir(filepath.Join(root, "queue"), 0o750); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(elsewhere, filepath.Join(root, "queue", "yuko")); err != nil {
		t.Fatal(err)
	}
	if _, err := OpenDir(root, "queue/yuko"); err == nil || !strings.Contains(err.Error(), "symlink") {
		t.Errorf("symlinked store directory: got %v, want a symlink error", err)
	}
	if _, err := OpenDir(root, "../escape"); err == nil {
		t.Errorf("OpenDir(../escape) succeeded")
	}
	if entries, _ := os.ReadDir(elsewhere); len(entries) != 0 {
		t.Errorf("something was written through the symlink: %v", entries)
	}
}

func TestTxRefusesBadNames(t *testing.T) {
	d := mustDir(t)
	for _, name := range []string{"../x.json", "..", ".", "a/../../b", ""} {
		err := d.Update(func(tx *Tx) error { return tx.Write(name, []byte("x")) })
		if err == nil {
			t.Errorf("Write(%q) succeeded", name)
		}
	}
}

func TestUpdateSweepsOrphans(t *testing.T) {
	d := mustDir(t)
	tmp, err := MkdirAll(d.Path(), tmpName)
	if err != nil {
		t.Fatal(err)
	}
	orphan := filepath.Join(tmp, ".a.json12345")
	if err := os.WriteFile(orphan, []byte("half"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := d.Update(func(tx *Tx) error { return tx.Write("b.json", []byte("{}")) }); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(orphan); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("orphaned temp file survived the next write: %v", err)
	}
}

func TestLockBusy(t *testing.T) {
	d := mustDir(t)
	old := LockTimeout
	LockTimeout = 100 * time.Millisecond
	defer func() { LockTimeout = old }()
	release := make(chan struct{})
	held := make(chan struct{})
	go func() {
		_ = d.Update(func(*Tx) error { close(held); <-release; return nil })
	}()
	<-held
	err := d.Update(func(*Tx) error { return nil })
	close(release)
	if !errors.Is(err, ErrBusy) || !strings.Contains(err.Error(), ".lock") {
		t.Fatalf("got %v, want ErrBusy naming the lock file", err)
	}
	// The abandoned waiter must give the lock back once it gets it.
	LockTimeout = 5 * time.Second
	if err := d.Update(func(*Tx) error { return nil }); err != nil {
		t.Fatalf("lock not released after a timed-out wait: %v", err)
	}
}

func TestLockInodeStable(t *testing.T) {
	d := mustDir(t)
	ino := func() uint64 {
		fi, err := os.Stat(filepath.Join(d.Path(), lockName))
		if err != nil {
			t.Fatal(err)
		}
		return fi.Sys().(*syscall.Stat_t).Ino
	}
	if err := d.Update(func(tx *Tx) error { return tx.Write("a.json", []byte("1")) }); err != nil {
		t.Fatal(err)
	}
	first := ino()
	for i := 0; i < 5; i++ {
		if err := d.Update(func(tx *Tx) error { return tx.Write("a.json", []byte("2")) }); err != nil {
			t.Fatal(err)
		}
	}
	if ino() != first {
		t.Errorf("lock file inode changed")
	}
}

func TestSchema(t *testing.T) {
	for _, tc := range []struct {
		data, want string
	}{
		{`{"schema":"impyard.task/1"}`, ""},
		{`{"schema":"impyard.task/9"}`, `schema "impyard.task/9" is not supported`},
		{`{"schema":"impyard.gate/1"}`, "is not a task file"},
		{`{"id":"x"}`, `no "schema" member`},
		{`{"schema":"impyard.task/1"`, "not valid JSON"},
		{``, "not valid JSON"},
	} {
		err := CheckSchema("queue/yuko/t-x.json", []byte(tc.data), "task", 1)
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("%s: got %v, want nil", tc.data, err)
		case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), "queue/yuko/t-x.json")):
			t.Errorf("%s: got %v, want an error naming the file and saying %q", tc.data, err, tc.want)
		}
	}
}

func TestAppendAndTornLine(t *testing.T) {
	p := filepath.Join(t.TempDir(), "events.jsonl")
	if err := AppendJSONL(p, map[string]int{"n": 1}); err != nil {
		t.Fatal(err)
	}
	// A writer that died halfway through a record.
	f, err := os.OpenFile(p, os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Fatal(err)
	}
	f.WriteString(`{"n":2,"hal`)
	f.Close()
	if err := AppendJSONL(p, map[string]int{"n": 3}); err != nil {
		t.Fatal(err)
	}
	var got []string
	bad, err := ReadJSONL(p, func(line []byte) error { got = append(got, string(line)); return nil })
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{`{"n":1}`, `{"n":3}`}; strings.Join(got, "|") != strings.Join(want, "|") {
		t.Errorf("got %q, want %q", got, want)
	}
	if len(bad) != 1 || bad[0].Line != 2 || !strings.Contains(bad[0].Error(), "events.jsonl:2") {
		t.Errorf("bad lines %v, want line 2 reported", bad)
	}
	if err := AppendLine(p, []byte("{}\n{}\n")); err == nil {
		t.Errorf("two-line record accepted")
	}
	if err := AppendLine(p, []byte("{}")); err == nil {
		t.Errorf("record without newline accepted")
	}
}

func TestReadJSONLLongLine(t *testing.T) {
	p := filepath.Join(t.TempDir(), "big.jsonl")
	long := `{"x":"` + strings.Repeat("a", MaxLine+10) + `"}` + "\n"
	if err := os.WriteFile(p, []byte(`{"n":1}`+"\n"+long+`{"n":2}`+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	var n int
	bad, err := ReadJSONL(p, func([]byte) error { n++; return nil })
	if err != nil || n != 2 || len(bad) != 1 {
		t.Fatalf("got %d good, %v bad, err %v; want 2 good and the long line reported", n, bad, err)
	}
}

// TestNoSpace fills a tiny tmpfs: the write must fail loudly, the old
// contents must stay whole, and no temp file may be left behind.
func TestNoSpace(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to mount a tmpfs")
	}
	mnt := t.TempDir()
	if out, err := exec.Command("mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", mnt).CombinedOutput(); err != nil {
		t.Skipf("cannot mount tmpfs: %v %s", err, out)
	}
	defer exec.Command("umount", mnt).Run()
	d, err := OpenDir(mnt, "queue/yuko")
	if err != nil {
		t.Fatal(err)
	}
	if err := d.Update(func(tx *Tx) error { return tx.Write("a.json", []byte("old")) }); err != nil {
		t.Fatal(err)
	}
	err = d.Update(func(tx *Tx) error { return tx.Write("a.json", bytes.Repeat([]byte("x"), 256<<10)) })
	if !errors.Is(err, syscall.ENOSPC) || !strings.Contains(err.Error(), "a.json") {
		t.Fatalf("got %v, want ENOSPC naming the file", err)
	}
	if got, err := ReadFile(filepath.Join(d.Path(), "a.json")); err != nil || string(got) != "old" {
		t.Errorf("after a failed write got %q, %v; want the old contents", got, err)
	}
	if entries, _ := os.ReadDir(filepath.Join(d.Path(), tmpName)); len(entries) != 0 {
		t.Errorf("temp files left behind: %v", entries)
	}
	err = AppendLine(filepath.Join(d.Path(), "events.jsonl"), append(bytes.Repeat([]byte("y"), 200<<10), '\n'))
	if !errors.Is(err, syscall.ENOSPC) {
		t.Errorf("append on a full disk: got %v, want ENOSPC", err)
	}
}

func TestScanBack(t *testing.T) {
	p := filepath.Join(t.TempDir(), "log.jsonl")
	var want []string
	var all strings.Builder
	for i := 0; i < 5000; i++ {
		line := `{"n":` + strings.Repeat("1", i%50) + `0}`
		want = append(want, line)
		all.WriteString(line + "\n")
	}
	all.WriteString(`{"torn":`)
	os.WriteFile(p, []byte(all.String()), 0o600)
	var got []string
	if err := ScanBack(p, func(line []byte) bool { got = append(got, string(line)); return false }); err != nil {
		t.Fatal(err)
	}
	if len(got) != len(want)+1 || got[0] != `{"torn":` {
		t.Fatalf("got %d lines (first %q), want %d and the torn one first", len(got), got[0], len(want)+1)
	}
	for i, w := range want {
		if got[len(got)-1-i] != w {
			t.Fatalf("line %d: got %q, want %q", i, got[len(got)-1-i], w)
		}
	}
	n := 0
	ScanBack(p, func([]byte) bool { n++; return n == 3 })
	if n != 3 {
		t.Errorf("did not stop: %d", n)
	}
	if err := ScanBack(filepath.Join(t.TempDir(), "none"), func([]byte) bool { t.Error("line in a missing file"); return true }); err != nil {
		t.Error(err)
	}
}

func TestLog(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "decisions.jsonl")
	var reported []error
	var mu sync.Mutex
	a := NewLog(path, func(err error) { mu.Lock(); reported = append(reported, err); mu.Unlock() })
	line := func(n int) []byte { return []byte(`{"n":` + strings.Repeat("1", n%7+1) + "}\n") }

	// A torn last line left by a crashed writer stays one bad line.
	os.WriteFile(path, []byte(`{"torn":`), 0o640)
	if err := a.Append(line(1), true); err != nil {
		t.Fatal(err)
	}
	// Many writers at once: every line whole, one write each batch, and
	// the yard's own appender interleaves under the same lock.
	var wg sync.WaitGroup
	for i := range 200 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if i%10 == 0 {
				if err := AppendLine(path, []byte("{\"store\":true}\n")); err != nil {
					t.Error(err)
				}
				return
			}
			a.Append(line(i), i%2 == 0)
		}()
	}
	wg.Wait()
	a.Sync()
	var good int
	bad, err := ReadJSONL(path, func([]byte) error { good++; return nil })
	if err != nil || len(bad) != 1 || bad[0].Line != 1 || good != 201 {
		t.Fatalf("%d good lines, bad %v, err %v; want 201 and the torn first line", good, bad, err)
	}

	// A log moved away (rotated) is followed to the new file at the path.
	os.Rename(path, path+".1")
	a.Append(line(3), true)
	if b, _ := os.ReadFile(path); string(b) != string(line(3)) {
		t.Fatalf("after rotation the log holds %q", b)
	}
	// A symlink planted at the path is refused, and reported.
	os.Remove(path)
	os.Symlink(filepath.Join(dir, "elsewhere"), path)
	if err := a.Append(line(4), true); err == nil || !strings.Contains(err.Error(), "symlink") {
		t.Fatalf("append through a symlink: %v", err)
	}
	if _, err := os.Stat(filepath.Join(dir, "elsewhere")); err == nil {
		t.Fatal("the symlink was followed")
	}
	mu.Lock()
	defer mu.Unlock()
	if reported[len(reported)-1] == nil {
		t.Fatal("the failure was not reported")
	}
}

// TestWriteMode: the file gets exactly the mode asked for, under any
// umask, and replaces what was there.
func TestWriteMode(t *testing.T) {
	old := syscall.Umask(0o077)
	defer syscall.Umask(old)
	p := filepath.Join(t.TempDir(), "ca.crt")
	os.WriteFile(p, []byte("old"), 0o600)
	if err := WriteMode(p, []byte("new"), 0o644); err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(p)
	b, _ := os.ReadFile(p)
	if err != nil || fi.Mode().Perm() != 0o644 || string(b) != "new" {
		t.Errorf("%v %v %q, want 0644 with the new bytes", fi.Mode(), err, b)
	}
}

// A writer's descriptor is in blocking mode: O_NONBLOCK, there only so a
// planted FIFO cannot block the open, is undone once the file is known
// to be regular.
func TestOpenRegularWritersBlock(t *testing.T) {
	p := filepath.Join(t.TempDir(), "a.jsonl")
	os.WriteFile(p, nil, 0o640)
	f, err := openRegular(p, os.O_RDWR|os.O_APPEND)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	rc, err := f.SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	var fl int
	var flErr error
	if err := rc.Control(func(fd uintptr) { fl, flErr = unix.FcntlInt(fd, unix.F_GETFL, 0) }); err != nil {
		t.Fatal(err)
	}
	if flErr != nil || fl&unix.O_NONBLOCK != 0 {
		t.Errorf("writer's descriptor flags %#x %v: still non-blocking", fl, flErr)
	}
}

// syncDir fsyncs a directory, and a directory that is not there is
// reported as missing.
func TestSyncDir(t *testing.T) {
	dir := t.TempDir()
	if err := syncDir(dir); err != nil {
		t.Fatal(err)
	}
	if err := syncDir(filepath.Join(dir, "gone")); !IsNotExist(err) {
		t.Errorf("syncDir of a missing directory: %v, want not-exist", err)
	}
}

// TestCreateNeverReplaces: Create writes a missing file once, and leaves
// a file, a symlink or a directory already there exactly as it was.
func TestCreateNeverReplaces(t *testing.T) {
	d := mustDir(t)
	created, err := d.Create("a.toml", []byte("default\n"))
	if err != nil || !created {
		t.Fatalf("first Create: created %v, %v; want true, nil", created, err)
	}
	if err := os.WriteFile(filepath.Join(d.Path(), "a.toml"), []byte("owner's\n"), 0o640); err != nil {
		t.Fatal(err)
	}
	created, err = d.Create("a.toml", []byte("default\n"))
	if err != nil || created {
		t.Fatalf("second Create: created %v, %v; want false, nil", created, err)
	}
	if b, _ := os.ReadFile(filepath.Join(d.Path(), "a.toml")); string(b) != "owner's\n" {
		t.Errorf("a.toml is %q after Create; want the owner's file kept", b)
	}
	elsewhere := filepath.Join(t.TempDir(), "target")
	os.Symlink(elsewhere, filepath.Join(d.Path(), "link.toml"))
	os.Mkdir(filepath.Join(d.Path(), "dir.toml"), 0o750)
	for _, name := range []string{"link.toml", "dir.toml"} {
		if created, err := d.Create(name, []byte("default\n")); err != nil || created {
			t.Errorf("Create(%s) over what is there: created %v, %v; want false, nil", name, created, err)
		}
	}
	if _, err := os.Lstat(elsewhere); !os.IsNotExist(err) {
		t.Errorf("Create wrote through a symlink: %v", err)
	}
}

// Backup takes the first free number, never replacing an earlier backup.
func TestTxBackup(t *testing.T) {
	d := mustDir(t)
	for i, want := range []string{"imp.toml.1", "imp.toml.2"} {
		var got string
		err := d.Update(func(tx *Tx) (err error) {
			got, err = tx.Backup("imp.toml", []byte{byte('a' + i)})
			return err
		})
		if err != nil || got != filepath.Join(d.Path(), want) {
			t.Fatalf("backup %d: %q %v", i, got, err)
		}
	}
	if b, _ := ReadFile(filepath.Join(d.Path(), "imp.toml.1")); string(b) != "a" {
		t.Errorf("imp.toml.1 holds %q", b)
	}
	if err := d.Update(func(tx *Tx) error { _, err := tx.Backup("../x", nil); return err }); err == nil {
		t.Errorf("a backup outside the directory")
	}
}
