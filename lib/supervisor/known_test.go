package supervisor

import (
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/impyard/impyard/lib/gate"
	"github.com/impyard/impyard/lib/queue"
	"github.com/impyard/impyard/lib/state"
)

func ids(ts []*queue.Task) (out []string) {
	for _, t := range ts {
		out = append(out, t.ID)
	}
	return out
}

// TestPassesRemember: what a pass passed over because it was done with
// it comes back as soon as its file changes: a failed task retried is
// startable again, and a task that failed with a gate denied, retried and
// sent to review again is settled over both its gates, the first one,
// finished passes ago, included.
func TestPassesRemember(t *testing.T) {
	s, _ := newSup(t)
	add := func(text string) string {
		id, _, err := queue.Add(s.Yard, queue.AddOptions{Imp: "yuko", Text: text, By: "alice", Actor: "test"})
		if err != nil {
			t.Fatal(err)
		}
		return id
	}
	move := func(id string, to ...string) {
		t.Helper()
		for _, st := range to {
			if _, err := queue.Move(s.Yard, id, queue.Change{To: st, By: "test", Actor: "test"}); err != nil {
				t.Fatal(err)
			}
		}
	}
	done, failed, twice := add("done"), add("failed"), add("twice")
	move(done, state.Running, state.Done)
	move(failed, state.Running, state.Failed)
	move(twice, state.Running, state.NeedsReview)
	first, err := gate.File(s.Yard, gate.FileOptions{Imp: "yuko", Intent: "email-send", Task: twice, Payload: []byte(`{"n":1}`), By: "yuko", Actor: "test"})
	if err != nil {
		t.Fatal(err)
	}
	gate.Move(s.Yard, first.ID, gate.Change{To: state.Denied, By: "alice", Why: "no"})

	for range 2 { // the second pass from what the first remembered
		s.reviews()
		if w, r := s.startable(); len(w)+len(r) != 0 {
			t.Fatalf("startable: waiting %v running %v, want none", ids(w), ids(r))
		}
	}
	if got, _ := queue.Get(s.Yard, twice); got.State != state.Done {
		t.Fatalf("task %s: %s, want done once its one gate was denied", twice, got.State)
	}

	move(failed, state.Waiting) // impq retry
	for range 2 {
		if w, _ := s.startable(); !slices.Equal(ids(w), []string{failed}) {
			t.Errorf("after the retry, waiting %v, want %s", ids(w), failed)
		}
	}

	// A task whose first gate finished passes ago, retried through review
	// again: the old gate counts when it settles.
	again := add("again")
	move(again, state.Running, state.Failed)
	old, _ := gate.File(s.Yard, gate.FileOptions{Imp: "yuko", Intent: "email-send", Task: again, Payload: []byte(`{"n":2}`), By: "yuko", Actor: "test"})
	gate.Move(s.Yard, old.ID, gate.Change{To: state.Denied, By: "alice", Why: "no"})
	s.reviews()
	s.reviews()
	move(again, state.Waiting, state.Running, state.NeedsReview)
	fresh, _ := gate.File(s.Yard, gate.FileOptions{Imp: "yuko", Intent: "email-send", Task: again, Payload: []byte(`{"n":3}`), By: "yuko", Actor: "test"})
	s.reviews()
	if got, _ := queue.Get(s.Yard, again); got.State != state.NeedsReview {
		t.Fatalf("task %s settled with gate %s open: %s", again, fresh.ID, got.State)
	}
	gate.Move(s.Yard, fresh.ID, gate.Change{To: state.Denied, By: "alice", Why: "no"})
	s.reviews()
	got, _ := queue.Get(s.Yard, again)
	why := got.History[len(got.History)-1].Why
	if got.State != state.Done || !strings.Contains(why, old.ID) || !strings.Contains(why, fresh.ID) {
		t.Errorf("task %s: %s %q, want done over both gates %s and %s", again, got.State, why, old.ID, fresh.ID)
	}
}

// TestHandEditedTaskSeesItsGatesAgain: a finished task edited by hand to
// ask for a continuation is no longer one impsup is done with, and nor
// are its gates, which passes had passed over: its finished gate gets its
// continuation.
func TestHandEditedTaskSeesItsGatesAgain(t *testing.T) {
	s, _ := newSup(t)
	id, _, _ := queue.Add(s.Yard, queue.AddOptions{Imp: "yuko", Text: "digest", By: "alice", Actor: "test"})
	for _, to := range []string{state.Running, state.NeedsReview} {
		queue.Move(s.Yard, id, queue.Change{To: to, By: "test", Actor: "test"})
	}
	g, _ := gate.File(s.Yard, gate.FileOptions{Imp: "yuko", Intent: "email-send", Task: id, Payload: []byte(`{"n":1}`), By: "yuko", Actor: "test"})
	gate.Move(s.Yard, g.ID, gate.Change{To: state.Denied, By: "alice", Why: "no"})
	for range 3 {
		s.reviews()
	}
	p := s.Yard.Path("queue", "yuko", id+".json")
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	edited := strings.Replace(string(b), `"state": "done",`, `"state": "done",`+"\n  \"continue\": true,", 1)
	if edited == string(b) {
		t.Fatalf("no state line to edit in %s", b)
	}
	if err := os.WriteFile(p, []byte(edited), 0o640); err != nil {
		t.Fatal(err)
	}
	s.reviews()
	n := 0
	for _, task := range tasks(t, s.Yard, "yuko") {
		if task.Continues == id {
			n++
		}
	}
	if n != 1 {
		t.Errorf("%d continuations of %s after the edit, want 1 for gate %s", n, id, g.ID)
	}
}
