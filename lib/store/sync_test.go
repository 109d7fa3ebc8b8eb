package store

import (
	"errors"
	"os"
	"path/filepath"
	"sync"
	"testing"

	"golang.org/x/sys/unix"
)

// Every sync the trace reports is a system call made: the trace is what
// the durability tests read, so a sync reported and not made would pass
// them all.
func TestTracedSyncsAreMade(t *testing.T) {
	var mu sync.Mutex
	made := map[string]int{}
	count := func(kind string, call func(int) error) func(int) error {
		return func(fd int) error {
			mu.Lock()
			made[kind]++
			mu.Unlock()
			return call(fd)
		}
	}
	oldFsync, oldFdatasync := sysFsync, sysFdatasync
	sysFsync, sysFdatasync = count("fsync", unix.Fsync), count("fdatasync", unix.Fdatasync)
	t.Cleanup(func() { sysFsync, sysFdatasync = oldFsync, oldFdatasync })
	traced := map[string]int{}
	t.Cleanup(SetTrace(func(op Op) {
		mu.Lock()
		defer mu.Unlock()
		switch op.Kind {
		case OpFsync, OpDirSync:
			traced["fsync"]++
		case OpFdatasync:
			traced["fdatasync"]++
		}
	}))

	root := t.TempDir()
	d, err := OpenDir(root, filepath.Join("queue", "yuko"))
	if err != nil {
		t.Fatal(err)
	}
	err = d.Update(func(tx *Tx) error {
		if err := tx.Overwrite(".recording", []byte("t-1"), true); err != nil {
			return err
		}
		return tx.Write("t-1.json", []byte("{}"))
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := AppendLineIn(root, "journal", "events.jsonl", []byte("{}\n"), "mid-append"); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	if made["fsync"] == 0 || made["fdatasync"] == 0 || made["fsync"] != traced["fsync"] || made["fdatasync"] != traced["fdatasync"] {
		t.Errorf("syncs made %v, reported %v", made, traced)
	}
}

// A mark whose sync, left running by OverwriteAhead, fails stops the
// transaction before the file written next is renamed into place: what
// would outlive the mark in a power cut is never made current, and the
// caller hears the sync's error, also when nothing follows the mark.
func TestOverwriteAheadSyncFails(t *testing.T) {
	old := sysFdatasync
	sysFdatasync = func(int) error { return unix.EIO }
	t.Cleanup(func() { sysFdatasync = old })
	d, err := OpenDir(t.TempDir(), "queue")
	if err != nil {
		t.Fatal(err)
	}
	err = d.Update(func(tx *Tx) error {
		if err := tx.OverwriteAhead(".recording", []byte("t-1 ")); err != nil {
			return err
		}
		return tx.Write("t-1.json", []byte("{}"))
	})
	if !errors.Is(err, unix.EIO) {
		t.Fatalf("write after a failed mark sync: %v, want EIO", err)
	}
	if _, err := os.Lstat(filepath.Join(d.Path(), "t-1.json")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the file was renamed into place after its mark's sync failed: %v", err)
	}
	err = d.Update(func(tx *Tx) error { return tx.OverwriteAhead(".recording", []byte("t-2 ")) })
	if !errors.Is(err, unix.EIO) {
		t.Errorf("a transaction ending on a failed mark sync: %v, want EIO", err)
	}
}
