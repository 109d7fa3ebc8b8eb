package supervisor

import (
	"strings"
	"testing"
	"time"

	"github.com/impyard/impyard/lib/gate"
	"github.com/impyard/impyard/lib/queue"
	"github.com/impyard/impyard/lib/state"
	"github.com/impyard/impyard/lib/yard/yardtest"
)

// A task whose gate expired undecided stays in review: nobody decided
// what it proposed, which is neither done nor a denial. Beside it, a
// task whose gate was denied settles done, as before.
func TestExpiredGateKeepsTaskInReview(t *testing.T) {
	s, _ := newSup(t)
	t0 := yardtest.FixedNow(t)
	review := func(text string) string {
		id, _, err := queue.Add(s.Yard, queue.AddOptions{Imp: "yuko", Text: text, By: "alice", Actor: "test"})
		if err != nil {
			t.Fatal(err)
		}
		queue.Move(s.Yard, id, queue.Change{To: state.Running})
		queue.Move(s.Yard, id, queue.Change{To: state.NeedsReview, Why: "box exited 0; waiting on gates"})
		return id
	}
	expiring, denying := review("meeting tomorrow"), review("other")
	ge, err := gate.File(s.Yard, gate.FileOptions{Imp: "yuko", Intent: "email-send", Task: expiring, Payload: []byte(`{"n":1}`), By: "yuko", Actor: "test", Expires: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	gd, _ := gate.File(s.Yard, gate.FileOptions{Imp: "yuko", Intent: "email-send", Task: denying, Payload: []byte(`{"n":2}`), By: "yuko", Actor: "test"})
	if g, err := gate.Expire(s.Yard, ge.ID, nil, t0.Add(time.Hour), "test"); err != nil || g.State != state.Expired {
		t.Fatalf("expire: %v %v", g, err)
	}
	gate.Move(s.Yard, gd.ID, gate.Change{To: state.Denied, By: "alice", Why: "not now"})
	for range 2 {
		s.reviews()
	}
	if task, _ := queue.Get(s.Yard, expiring); task.State != state.NeedsReview {
		t.Errorf("the expired gate's task is %s, want it left in review", task.State)
	}
	if task, _ := queue.Get(s.Yard, denying); task.State != state.Done {
		t.Errorf("the denied gate's task is %s, want done", task.State)
	}
}

// A box that exits 0 while its task's only gate has expired leaves the
// task in review, saying which gate expired; not done.
func TestFinishWithExpiredGate(t *testing.T) {
	s, _ := newSup(t)
	t0 := yardtest.FixedNow(t)
	id, _, _ := queue.Add(s.Yard, queue.AddOptions{Imp: "yuko", Text: "digest", By: "alice", Actor: "test"})
	g, _ := gate.File(s.Yard, gate.FileOptions{Imp: "yuko", Intent: "email-send", Task: id, Payload: []byte(`{"n":1}`), By: "yuko", Actor: "test", Expires: time.Minute})
	gate.Expire(s.Yard, g.ID, nil, t0.Add(time.Minute), "test")
	open, expired := openGates(s, id)
	if len(open) != 0 || len(expired) != 1 || expired[0] != g.ID {
		t.Fatalf("open %v, expired %v", open, expired)
	}
	if why := expiredWhy(expired); !strings.Contains(why, g.ID+" expired undecided") {
		t.Errorf("why %q", why)
	}
}
