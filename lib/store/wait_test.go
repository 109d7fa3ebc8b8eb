package store

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
	"time"
)

func TestLockHolder(t *testing.T) {
	locks := []byte(`1: FLOCK  ADVISORY  WRITE 7782 fe:00:9986455 0 EOF
1: -> FLOCK  ADVISORY  WRITE 7790 fe:00:9986455 0 EOF
2: POSIX  ADVISORY  WRITE 512 08:01:42 0 EOF
3: FLOCK  ADVISORY  WRITE 612 08:01:42 0 EOF
`)
	dev := uint64(0xfe << 8) // major 0xfe, minor 0, as unix.Mkdev makes it
	for _, tc := range []struct {
		dev, ino uint64
		want     int
	}{
		{dev, 9986455, 7782},   // the holder, not the waiter after it
		{8<<8 | 1, 42, 612},    // a POSIX lock on the same file is not a flock
		{dev, 42, 0},           // another device
		{dev, 998645, 0},       // an inode that is a prefix of another
		{8<<8 | 1, 9986455, 0}, // nothing held
	} {
		if got := lockHolder(locks, tc.dev, tc.ino); got != tc.want {
			t.Errorf("lockHolder(%x, %d) = %d, want %d", tc.dev, tc.ino, got, tc.want)
		}
	}
}

// A lock held by another process for longer than WaitNotice is told to
// OnWait once, with its name below the root and its holder; then the
// waiter gets it when it is let go.
func TestOnWait(t *testing.T) {
	if _, err := exec.LookPath("flock"); err != nil {
		t.Skip("no flock(1)")
	}
	root := t.TempDir()
	d, err := OpenDir(root, "gates")
	if err != nil {
		t.Fatal(err)
	}
	holder := exec.Command("flock", filepath.Join(d.Path(), lockName), "sleep", "1.6")
	if err := holder.Start(); err != nil {
		t.Fatal(err)
	}
	defer holder.Wait()
	for deadline := time.Now().Add(5 * time.Second); ; {
		if held, _ := Held(filepath.Join(d.Path(), lockName)); held {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("flock(1) never took the lock")
		}
		time.Sleep(10 * time.Millisecond)
	}
	var mu sync.Mutex
	var got []Wait
	OnWait = func(w Wait) { mu.Lock(); got = append(got, w); mu.Unlock() }
	defer func() { OnWait = nil }()
	if err := d.Update(func(tx *Tx) error { return tx.Write("x", []byte("1")) }); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(got) != 1 || got[0].Lock != "gates/.lock" || got[0].PID != holder.Process.Pid || got[0].Command != "flock" {
		t.Errorf("OnWait got %+v; want one call for gates/.lock held by pid %d, flock", got, holder.Process.Pid)
	}
}

// A lock taken at once, or given up on before WaitNotice, tells nothing;
// the timeout is still ErrBusy naming the lock.
func TestOnWaitQuiet(t *testing.T) {
	root := t.TempDir()
	d, err := OpenDir(root, "gates")
	if err != nil {
		t.Fatal(err)
	}
	calls := 0
	OnWait = func(Wait) { calls++ }
	defer func() { OnWait = nil }()
	if err := d.Update(func(*Tx) error { return nil }); err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(d.Path(), lockName)
	unlock, err := Lock(p)
	if err != nil {
		t.Fatal(err)
	}
	defer unlock()
	defer func(old time.Duration) { LockTimeout = old }(LockTimeout)
	LockTimeout = 300 * time.Millisecond
	err = d.Update(func(*Tx) error { return nil })
	var pe *os.PathError
	if !errors.Is(err, ErrBusy) || !errors.As(err, &pe) || pe.Path != p {
		t.Errorf("held lock: %v; want ErrBusy naming %s", err, p)
	}
	if calls != 0 {
		t.Errorf("OnWait called %d times; want none", calls)
	}
}
