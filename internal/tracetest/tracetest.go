// Package tracetest records what lib/store does to the disk (through its
// trace hook, store.SetTrace) and tells a test whether a file would
// survive a power cut at a given point, by ext4's rules: a file's contents
// are durable once it is fsynced (or fdatasynced) after its last change,
// and a new name (a file created or renamed into place, a directory made)
// once its directory is synced after the change. A renamed file's
// contents are those of its source, which must have been synced before
// the rename. It checks what one operation sequence promises, not every
// state a cut can leave; the crash-state harness does that.
package tracetest

import (
	"fmt"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/impyard/impyard/lib/store"
)

// Recorder keeps every operation the store performs while it is set.
type Recorder struct {
	mu  sync.Mutex
	ops []store.Op
}

// Record starts recording for the rest of the test.
func Record(t testing.TB) *Recorder {
	r := &Recorder{}
	t.Cleanup(store.SetTrace(r.hear))
	return r
}

func (r *Recorder) hear(op store.Op) {
	op.Data = append([]byte(nil), op.Data...)
	r.mu.Lock()
	r.ops = append(r.ops, op)
	r.mu.Unlock()
}

// Len is how many operations are recorded so far: a point in the trace
// to check durability at later.
func (r *Recorder) Len() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.ops)
}

// Ops returns the operations recorded so far.
func (r *Recorder) Ops() []store.Op {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]store.Op(nil), r.ops...)
}

// String lists the operations, one a line, for a failure message.
func (r *Recorder) String() string {
	var b strings.Builder
	for i, op := range r.Ops() {
		fmt.Fprintf(&b, "%3d %-9s %s", i, op.Kind, op.Path)
		if op.To != "" {
			fmt.Fprintf(&b, " -> %s", op.To)
		}
		b.WriteByte('\n')
	}
	return b.String()
}

// Durable returns nil if path, as the first n operations left it, would
// survive a power cut after them, else what would be lost. Every
// directory between root and path that the trace made must be synced into
// its parent. A path the trace never wrote is an error: the test meant to
// check something it did.
func (r *Recorder) Durable(n int, root, path string) error {
	ops := r.Ops()[:n]
	last := -1
	for i, op := range ops {
		if changes(op, path) {
			last = i
		}
	}
	if last < 0 {
		return fmt.Errorf("%s: not written by the operations recorded", path)
	}
	op := ops[last]
	switch op.Kind {
	case store.OpRename:
		if i := lastChange(ops[:last], op.Path); i >= 0 && !synced(ops[i+1:last], op.Path) {
			return fmt.Errorf("%s: renamed from %s, which was not synced after its %s (op %d)", path, op.Path, ops[i].Kind, i)
		}
		if !dirSynced(ops[last+1:], filepath.Dir(path)) {
			return fmt.Errorf("%s: renamed into place (op %d) and its directory not synced after", path, last)
		}
	default:
		if !synced(ops[last+1:], path) {
			return fmt.Errorf("%s: %s (op %d) not synced after", path, op.Kind, last)
		}
		if i := find(ops, store.OpCreate, path); i >= 0 && !dirSynced(ops[i+1:], filepath.Dir(path)) {
			return fmt.Errorf("%s: created (op %d) and its directory not synced after", path, i)
		}
	}
	rel, err := filepath.Rel(root, filepath.Dir(path))
	if err != nil || rel == ".." || strings.HasPrefix(rel, "../") {
		return fmt.Errorf("%s: not below %s", path, root)
	}
	for d := filepath.Dir(path); rel != "." && d != filepath.Clean(root); d = filepath.Dir(d) {
		if i := find(ops, store.OpMkdir, d); i >= 0 && !dirSynced(ops[i+1:], filepath.Dir(d)) {
			return fmt.Errorf("%s: its directory %s was made (op %d) and %s not synced after", path, d, i, filepath.Dir(d))
		}
	}
	return nil
}

// changes reports whether op changes what path holds.
func changes(op store.Op, path string) bool {
	switch op.Kind {
	case store.OpWrite, store.OpAppend, store.OpTruncate, store.OpCreate:
		return op.Path == path
	case store.OpRename:
		return op.To == path
	}
	return false
}

func lastChange(ops []store.Op, path string) int {
	last := -1
	for i, op := range ops {
		if changes(op, path) {
			last = i
		}
	}
	return last
}

func synced(ops []store.Op, path string) bool {
	return find(ops, store.OpFsync, path) >= 0 || find(ops, store.OpFdatasync, path) >= 0
}

func dirSynced(ops []store.Op, dir string) bool { return find(ops, store.OpDirSync, dir) >= 0 }

func find(ops []store.Op, kind store.OpKind, path string) int {
	for i, op := range ops {
		if op.Kind == kind && op.Path == path {
			return i
		}
	}
	return -1
}
