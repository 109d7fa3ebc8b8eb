package store

import (
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
