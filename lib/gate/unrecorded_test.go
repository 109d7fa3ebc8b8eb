package gate

import (
	"errors"
	"os"
	"strings"
	"testing"

	"github.com/impyard/impyard/lib/state"
	"github.com/impyard/impyard/lib/transition"
	"github.com/impyard/impyard/lib/yard/yardtest"
)

// A move written whose audit record cannot follow is made: Move returns
// the gate as moved with an error wrapping transition.ErrUnrecorded, so
// callers can tell it from a move refused, and the next change records it.
func TestMoveUnrecordedReturnsTheGate(t *testing.T) {
	y := yardtest.New(t)
	g := file(t, y, `{"to":["a@b.example"]}`)
	audit := y.Path("runs", "decisions.jsonl")
	os.Remove(audit)
	if err := os.Mkdir(audit, 0o750); err != nil {
		t.Fatal(err)
	}
	out, err := Move(y, g.ID, Change{To: state.Denied, By: "alice", Actor: "test"})
	if !errors.Is(err, transition.ErrUnrecorded) || out == nil || out.State != state.Denied {
		t.Fatalf("Move: %v, %v; want the denied gate and ErrUnrecorded", out, err)
	}
	if got, err := Get(y, g.ID); err != nil || got.State != state.Denied {
		t.Fatalf("on disk: %v %v; want denied", got, err)
	}
	os.Remove(audit)
	if err := Repair(y); err != nil {
		t.Fatal(err)
	}
	b, _ := os.ReadFile(audit)
	if n := strings.Count(string(b), `"event":"gate-denied"`); n != 1 {
		t.Errorf("%d gate-denied records after the repair, want 1", n)
	}
}
