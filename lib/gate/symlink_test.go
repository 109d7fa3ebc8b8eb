package gate

import (
	"errors"
	"os"
	"strings"
	"testing"

	"github.com/impyard/impyard/lib/state"
	"github.com/impyard/impyard/lib/store"
	"github.com/impyard/impyard/lib/yard/yardtest"
)

// TestSymlinkedGatesDirRefused: gates/pending or gates/resolved replaced
// by a symlink to gates elsewhere is refused by List and Get too, naming
// the directory, and a move through it leaves nothing half done: no
// resolved copy, no .recording marker, nothing written elsewhere.
func TestSymlinkedGatesDirRefused(t *testing.T) {
	for _, where := range []string{pending, resolved} {
		t.Run(where, func(t *testing.T) {
			other := newYard(t)
			g := file(t, other, `{"to":"team@ourco.com"}`)
			if where == resolved {
				if _, err := Move(other, g.ID, Change{To: state.Approved, Signer: testKey, By: "alice"}); err != nil {
					t.Fatal(err)
				}
			}
			y := newYard(t)
			file(t, y, `{"n":1}`)
			link := y.Path("gates", where)
			os.RemoveAll(link)
			if err := os.Symlink(other.Path("gates", where), link); err != nil {
				t.Fatal(err)
			}
			before, beforeOther := tree(t, y.Root), tree(t, other.Root)

			gates, bad := List(y, Filter{All: true})
			for _, l := range gates {
				if l.ID == g.ID {
					t.Errorf("listed %s through the symlink", l.ID)
				}
			}
			if len(bad) == 0 || !strings.Contains(bad[0].Error(), link) || !strings.Contains(bad[0].Error(), "symlink") {
				t.Errorf("List: bad %v, want a refusal naming %s", bad, link)
			}
			if _, err := Get(y, g.ID); err == nil || !strings.Contains(err.Error(), link) {
				t.Errorf("Get: %v, want a refusal naming %s", err, link)
			}
			to := state.Approved
			if where == resolved {
				to = state.Executing
			}
			if _, err := Move(y, g.ID, Change{To: to, Signer: testKey, By: "alice"}); err == nil || !strings.Contains(err.Error(), link) {
				t.Errorf("Move: %v, want a refusal naming %s", err, link)
			}
			if _, err := File(y, FileOptions{Imp: "yuko", Intent: "email-send", Payload: []byte(`{"n":2}`), By: "yuko", Actor: "test"}); err == nil || !strings.Contains(err.Error(), link) {
				t.Errorf("File: %v, want a refusal naming %s", err, link)
			}
			yardtest.Unchanged(t, y.Root, before, "the yard changed")
			yardtest.Unchanged(t, other.Root, beforeOther, "written through the symlink")
		})
	}
}

// TestUnknownMajorWritesNothing: a gate written by a newer impyard is
// refused by Move without writing anything, not even the lock file.
func TestUnknownMajorWritesNothing(t *testing.T) {
	y := newYard(t)
	g := file(t, y, `{"n":1}`)
	p := y.Path("gates", pending, g.ID+".json")
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(strings.Replace(string(b), "impyard.gate/1", "impyard.gate/2", 1)), 0o640); err != nil {
		t.Fatal(err)
	}
	os.Remove(y.Path("gates", ".lock"))
	os.RemoveAll(y.Path("gates", ".tmp"))
	before := tree(t, y.Root)
	if _, err := Move(y, g.ID, Change{To: state.Denied, By: "alice"}); !errors.Is(err, store.ErrUnknownMajor) || !strings.Contains(err.Error(), p) {
		t.Errorf("Move: %v, want a refusal naming %s", err, p)
	}
	yardtest.Unchanged(t, y.Root, before, "a refusal wrote")
}
