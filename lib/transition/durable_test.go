package transition_test

import (
	"bytes"
	"os"
	"testing"

	"github.com/impyard/impyard/internal/tracetest"
	"github.com/impyard/impyard/lib/state"
	"github.com/impyard/impyard/lib/store"
	"github.com/impyard/impyard/lib/transition"
	"github.com/impyard/impyard/lib/yard/yardtest"
)

// A transition is recorded exactly once after a power cut only if the
// syncs come in order: the .recording mark durable before the state file
// is renamed into place (else a cut can keep the new state and a blank
// mark, and recovery never records it), and the journal and audit lines
// durable before the mark is cleared (else a cut can keep the cleared
// mark and lose the lines). The trace of one Create and one Move shows
// the order.
func TestTransitionSyncOrder(t *testing.T) {
	y := yardtest.New(t)
	s := notes(t, y)
	rec := tracetest.Record(t)
	n := add(t, s)
	created := rec.Ops()
	n, err := transition.Move(s, n.ID, transition.Change[*note]{To: state.Running, By: "alice", Actor: "test"})
	if err != nil {
		t.Fatal(err)
	}
	mark := y.Path("notes", ".recording")
	file := y.Path("notes", n.ID+".json")
	audit := y.Path("runs", "decisions.jsonl")
	journal := y.Path("journal", "yuko", "events.jsonl")
	ops := rec.Ops()
	for _, c := range []struct {
		name  string
		start int
	}{{"create", 0}, {"move", len(created)}} {
		begin := find(ops, c.start, func(op store.Op) bool {
			return op.Kind == store.OpWrite && op.Path == mark && string(bytes.TrimSpace(op.Data)) == n.ID
		})
		rename := find(ops, begin, func(op store.Op) bool { return op.Kind == store.OpRename && op.To == file })
		end := find(ops, rename, func(op store.Op) bool {
			return op.Kind == store.OpWrite && op.Path == mark && len(bytes.TrimSpace(op.Data)) == 0
		})
		if begin < 0 || rename < 0 || end < 0 {
			t.Fatalf("%s: no mark, state write and unmark in order (%d, %d, %d):\n%s", c.name, begin, rename, end, rec)
		}
		if err := rec.Durable(rename, y.Root, mark); err != nil {
			t.Errorf("%s: the mark is not durable before the state file is renamed into place: %v\n%s", c.name, err, rec)
		}
		for _, p := range []string{audit, journal} {
			if err := rec.Durable(end, y.Root, p); err != nil {
				t.Errorf("%s: a record is not durable before the mark is cleared: %v\n%s", c.name, err, rec)
			}
		}
		if err := rec.Durable(end, y.Root, file); err != nil {
			t.Errorf("%s: %v\n%s", c.name, err, rec)
		}
	}
}

// find returns the index of the first op from start on that match
// accepts, or -1.
func find(ops []store.Op, start int, match func(store.Op) bool) int {
	if start < 0 {
		return -1
	}
	for i := start; i < len(ops); i++ {
		if match(ops[i]) {
			return i
		}
	}
	return -1
}

// A power cut after the state write and before the records, with the mark
// durable, leaves the records to recovery: the next transaction on the
// store writes each exactly once, even when the lines were half written.
func TestPowerCutBeforeRecords(t *testing.T) {
	y := yardtest.New(t)
	s := notes(t, y)
	n := add(t, s)
	audit := y.Path("runs", "decisions.jsonl")
	journal := y.Path("journal", "yuko", "events.jsonl")
	before := map[string][]byte{}
	for _, p := range []string{audit, journal} {
		b, err := y.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		before[p] = b
	}
	if _, err := transition.Move(s, n.ID, transition.Change[*note]{To: state.Running, By: "alice", Actor: "test"}); err != nil {
		t.Fatal(err)
	}
	// What the cut leaves: the mark naming the note, the logs as they
	// were before the move with half a line torn onto the journal.
	if err := s.Dir.Update(func(tx *store.Tx) error {
		return tx.Overwrite(".recording", []byte(n.ID+"              "), true)
	}); err != nil {
		t.Fatal(err)
	}
	for p, b := range before {
		if p == journal {
			b = append(b, `{"schema":"impyard.ev`...)
		}
		if err := os.WriteFile(p, b, store.FilePerm); err != nil {
			t.Fatal(err)
		}
	}
	if err := transition.Repair(s); err != nil {
		t.Fatal(err)
	}
	if err := transition.Repair(s); err != nil {
		t.Fatal(err)
	}
	exactlyOnce(t, y, n.ID, 2)
}
