package store

import (
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

func inode(t *testing.T, path string) uint64 {
	t.Helper()
	fi, err := os.Lstat(path)
	if err != nil {
		t.Fatal(err)
	}
	return fi.Sys().(*syscall.Stat_t).Ino
}

// blockedOn reports whether the kernel shows a flock request waiting on
// inode ino (a "->" line of /proc/locks).
func blockedOn(t *testing.T, ino uint64) bool {
	t.Helper()
	b, err := os.ReadFile("/proc/locks")
	if err != nil {
		t.Skipf("no /proc/locks: %v", err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) < 7 || f[1] != "->" || f[2] != "FLOCK" {
			continue
		}
		dev := strings.Split(f[6], ":")
		if n, err := strconv.ParseUint(dev[len(dev)-1], 10, 64); err == nil && n == ino {
			return true
		}
	}
	return false
}

// TestLockReplacedWhileHeld: A holds the lock and B waits on the same
// file, each with its own descriptor. The lock file is then replaced and C
// locks the new one, which is free. When A lets go, B must not get in
// beside C: it must notice the path names another inode and queue behind
// C on the new file.
func TestLockReplacedWhileHeld(t *testing.T) {
	d := mustDir(t)
	p := filepath.Join(d.Path(), lockName)
	unlockA, err := Lock(p)
	if err != nil {
		t.Fatal(err)
	}
	old := inode(t, p)
	got := make(chan func(), 1)
	go func() {
		unlock, err := Lock(p)
		if err != nil {
			t.Error(err)
			unlock = func() {}
		}
		got <- unlock
	}()
	deadline := time.Now().Add(10 * time.Second)
	for !blockedOn(t, old) {
		if time.Now().After(deadline) {
			t.Fatal("B never waited on the lock")
		}
		time.Sleep(time.Millisecond)
	}

	if err := os.WriteFile(p+".new", nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(p+".new", p); err != nil {
		t.Fatal(err)
	}
	replaced := inode(t, p)
	unlockC, ok, err := TryLock(p)
	if err != nil || !ok {
		t.Fatalf("C could not lock the new file: %v %v", ok, err)
	}
	unlockA()

	for !blockedOn(t, replaced) {
		select {
		case unlock := <-got:
			unlock()
			unlockC()
			t.Fatal("B got the lock while C held the file the path names now: two writers")
		default:
		}
		if time.Now().After(deadline) {
			t.Fatal("B neither got in nor waited on the new lock file")
		}
		time.Sleep(time.Millisecond)
	}
	unlockC()
	unlockB := <-got
	if _, ok, _ := TryLock(p); ok {
		t.Fatal("B holds a lock the path does not name: a new locker got in beside it")
	}
	unlockB()
}

// TestUpdateRefusesSymlinkedStore: a store directory replaced by a symlink
// after it was opened is refused by the next transaction, and no lock
// file is created through the link.
func TestUpdateRefusesSymlinkedStore(t *testing.T) {
	root := t.TempDir()
	elsewhere := t.TempDir()
	d, err := OpenDir(root, "gates")
	if err != nil {
		t.Fatal(err)
	}
	os.RemoveAll(d.Path())
	if err := os.Symlink(elsewhere, d.Path()); err != nil {
		t.Fatal(err)
	}
	ran := false
	err = d.Update(func(*Tx) error { ran = true; return nil })
	if err == nil || ran || !strings.Contains(err.Error(), "symlink") || !strings.Contains(err.Error(), d.Path()) {
		t.Fatalf("got %v (ran %v), want a refusal naming %s", err, ran, d.Path())
	}
	if entries, _ := os.ReadDir(elsewhere); len(entries) != 0 {
		t.Errorf("created through the symlink: %v", entries)
	}
}

// TestLogLockReplaced: a Log keeps its lock file open between writes; once
// that file is replaced, a flock on it excludes no one, so the Log must
// wait for whoever holds the file the path names now.
func TestLogLockReplaced(t *testing.T) {
	dir := t.TempDir()
	a := NewLog(filepath.Join(dir, "decisions.jsonl"), nil)
	if err := a.Append([]byte("{\"n\":1}\n"), true); err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(dir, lockName)
	if err := os.WriteFile(p+".new", nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(p+".new", p); err != nil {
		t.Fatal(err)
	}
	unlock, err := Lock(p)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- a.Append([]byte("{\"n\":2}\n"), true) }()
	deadline := time.Now().Add(10 * time.Second)
	for !blockedOn(t, inode(t, p)) {
		select {
		case err := <-done:
			unlock()
			t.Fatalf("the log wrote (%v) while another writer held its directory's lock", err)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatal("the log neither wrote nor waited")
		}
		time.Sleep(time.Millisecond)
	}
	unlock()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

// TryLock follows a lock file replaced under it, but not forever: when
// the file keeps being replaced it gives up after tryLockAttempts, as
// busy, and holds nothing.
func TestTryLockGivesUpOnAChurningFile(t *testing.T) {
	p := filepath.Join(t.TempDir(), "g.lock")
	opens := 0
	open := func() (*os.File, error) {
		opens++
		if opens > 2*tryLockAttempts {
			return nil, errors.New("still trying")
		}
		f, err := openLock(unix.AT_FDCWD, p, p, unix.O_CREAT)
		if err != nil {
			return nil, err
		}
		// Someone replaces the lock file right after it is opened.
		if err := os.WriteFile(p+".new", nil, 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(p+".new", p); err != nil {
			t.Fatal(err)
		}
		return f, nil
	}
	unlock, ok, err := acquire(p, p, open, false)
	if err != nil || ok || unlock != nil {
		t.Fatalf("acquire on a churning lock file: %v %v, want not ok and no error", ok, err)
	}
	if opens != tryLockAttempts {
		t.Errorf("opened the lock file %d times, want %d", opens, tryLockAttempts)
	}
	// Nothing is held: the file the path names now is free.
	u, ok, err := TryLock(p)
	if err != nil || !ok {
		t.Fatalf("TryLock after giving up: %v %v", ok, err)
	}
	u()
}

// TestHeld sees an exclusive and a shared holder, creates no file, and
// lets go at once so the lock can be taken after.
func TestHeld(t *testing.T) {
	p := filepath.Join(t.TempDir(), ".d.lock")
	if held, err := Held(p); held || err != nil {
		t.Fatalf("missing file: %v %v", held, err)
	}
	if _, err := os.Lstat(p); !os.IsNotExist(err) {
		t.Fatalf("Held created %s: %v", p, err)
	}
	unlock, ok, err := TryLock(p)
	if !ok || err != nil {
		t.Fatal(ok, err)
	}
	if held, err := Held(p); !held || err != nil {
		t.Fatalf("exclusive holder: %v %v", held, err)
	}
	unlock()
	if held, err := Held(p); held || err != nil {
		t.Fatalf("released: %v %v", held, err)
	}
	u1, err := Share(p)
	if err != nil {
		t.Fatal(err)
	}
	u2, err := Share(p)
	if err != nil {
		t.Fatal(err)
	}
	if held, err := Held(p); !held || err != nil {
		t.Fatalf("shared holders: %v %v", held, err)
	}
	u1()
	if held, _ := Held(p); !held {
		t.Fatal("one shared holder left, not seen")
	}
	u2()
	if _, ok, err := TryLock(p); !ok || err != nil {
		t.Fatalf("after Held, TryLock: %v %v", ok, err)
	}
	link := p + ".link"
	if err := os.Symlink(p, link); err != nil {
		t.Fatal(err)
	}
	if _, err := Held(link); err == nil {
		t.Fatal("Held followed a symlink")
	}
}

// openFDs counts the process's open descriptors.
func openFDs(t *testing.T) int {
	t.Helper()
	entries, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Skipf("no /proc/self/fd: %v", err)
	}
	return len(entries)
}

// A transaction and an append whose lock file is replaced while they wait
// on it lock the new one and finish, and every descriptor they opened on
// the way, the directories walked for each attempt included, is closed
// once they return.
func TestLockRetryClosesWhatItOpened(t *testing.T) {
	d := mustDir(t)
	for name, op := range map[string]func() error{
		"Update":       func() error { return d.Update(func(tx *Tx) error { return tx.Write("a.json", []byte("1")) }) },
		"AppendLineIn": func() error { return AppendLineIn(d.root, d.rel, "log.jsonl", []byte("{}\n"), "mid-append") },
	} {
		p := filepath.Join(d.Path(), lockName)
		if err := op(); err != nil {
			t.Fatal(err)
		}
		before := openFDs(t)
		if err := op(); err != nil {
			t.Fatal(err)
		}
		if n := openFDs(t); n != before {
			t.Errorf("%s: %d descriptors open after it returned, %d before", name, n, before)
		}
		unlock, err := Lock(p)
		if err != nil {
			t.Fatal(err)
		}
		old := inode(t, p)
		done := make(chan error, 1)
		go func() { done <- op() }()
		deadline := time.Now().Add(10 * time.Second)
		for !blockedOn(t, old) {
			if time.Now().After(deadline) {
				t.Fatalf("%s never waited on the lock", name)
			}
			time.Sleep(time.Millisecond)
		}
		if err := os.WriteFile(p+".new", nil, 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(p+".new", p); err != nil {
			t.Fatal(err)
		}
		unlock()
		if err := <-done; err != nil {
			t.Fatalf("%s after the lock file was replaced: %v", name, err)
		}
		if n := openFDs(t); n != before {
			t.Errorf("%s: %d descriptors open after a retry, %d before", name, n, before)
		}
	}
}

// TestShareReplacedWhileWaiting: a Share that waited on a lock file that
// was replaced meanwhile ends up holding the file the path names now, the
// one Held looks at, not the replaced one.
func TestShareReplacedWhileWaiting(t *testing.T) {
	d := mustDir(t)
	p := filepath.Join(d.Path(), ".impexec.lock")
	unlockX, err := Lock(p)
	if err != nil {
		t.Fatal(err)
	}
	old := inode(t, p)
	// Share polls without blocking, so /proc/locks never shows it waiting:
	// its notice that it still waits, after WaitNotice, is the event that
	// it holds the old file open and found it taken. A sleep stood for it
	// and, on a loaded machine, let the file be replaced before Share
	// opened it, testing nothing.
	waiting := make(chan struct{})
	var once sync.Once
	OnWait = func(w Wait) {
		if w.Lock == p {
			once.Do(func() { close(waiting) })
		}
	}
	defer func() { OnWait = nil }()
	got := make(chan func(), 1)
	go func() {
		unlock, err := Share(p)
		if err != nil {
			t.Error(err)
			unlock = func() {}
		}
		got <- unlock
	}()
	select {
	case <-waiting:
	case <-time.After(10 * time.Second):
		t.Fatal("Share never waited on the lock")
	}
	if err := os.WriteFile(p+".new", nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(p+".new", p); err != nil {
		t.Fatal(err)
	}
	if inode(t, p) == old {
		t.Fatal("the lock file was not replaced")
	}
	unlockX()
	var unlock func()
	select {
	case unlock = <-got:
	case <-time.After(10 * time.Second):
		t.Fatal("Share never got the lock")
	}
	defer unlock()
	if held, err := Held(p); err != nil || !held {
		t.Errorf("Held(%s) = %v, %v after Share returned: it holds the replaced file", p, held, err)
	}
}
