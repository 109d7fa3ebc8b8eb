package supervisor

import (
	"encoding/json"
	"os"
	"strings"
	"testing"

	"github.com/impyard/impyard/lib/gate"
	"github.com/impyard/impyard/lib/mailbox"
	"github.com/impyard/impyard/lib/queue"
	"github.com/impyard/impyard/lib/state"
)

// readBrief writes the brief of a run of task and reads it back from disk.
func readBrief(t *testing.T, s *Supervisor, task *queue.Task, runID string) Brief {
	t.Helper()
	os.MkdirAll(s.Yard.Path("runs", runID), 0o750)
	p, err := s.writeBrief(task, runID)
	if err != nil {
		t.Fatal(err)
	}
	raw, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	var b Brief
	if err := json.Unmarshal(raw, &b); err != nil {
		t.Fatal(err)
	}
	return b
}

// ran is what start does once the box of runID runs.
func ran(t *testing.T, s *Supervisor, runID string) {
	t.Helper()
	if err := s.delivered("yuko", runID); err != nil {
		t.Fatal(err)
	}
}

func resolvedIDs(b Brief) map[string]bool {
	ids := map[string]bool{}
	for _, g := range b.Resolved {
		ids[g.ID] = true
	}
	return ids
}

// TestBriefTellsEachDecisionOnce: a gate decided while a run is going,
// after its brief was written, is news to the next run's brief and to no
// later one. It was missed: the brief told only gates decided after the
// previous run ended.
func TestBriefTellsEachDecisionOnce(t *testing.T) {
	s, _ := newSup(t)
	g, _ := gate.File(s.Yard, gate.FileOptions{Imp: "yuko", Intent: "email-send", Payload: []byte(`{"n":1}`), By: "yuko", Actor: "test"})
	id, _, _ := queue.Add(s.Yard, queue.AddOptions{Imp: "yuko", Text: "digest", By: "alice", Actor: "test"})
	task, _ := queue.Get(s.Yard, id)

	b1 := readBrief(t, s, task, "r-0000000000000001")
	ran(t, s, "r-0000000000000001")
	if len(b1.Open) != 1 || len(b1.Resolved) != 0 {
		t.Fatalf("run 1: open %d, resolved %d; want the gate open", len(b1.Open), len(b1.Resolved))
	}
	if _, err := gate.Move(s.Yard, g.ID, gate.Change{To: state.Denied, By: "alice", Why: "not now"}); err != nil {
		t.Fatal(err)
	}

	b2 := readBrief(t, s, task, "r-0000000000000002")
	ran(t, s, "r-0000000000000002")
	if !resolvedIDs(b2)[g.ID] || len(b2.Open) != 0 {
		t.Fatalf("run 2 was not told gate %s decided during run 1: resolved %v", g.ID, resolvedIDs(b2))
	}
	b3 := readBrief(t, s, task, "r-0000000000000003")
	if len(b3.Resolved) != 0 {
		t.Fatalf("run 3 was told again: %v", resolvedIDs(b3))
	}
}

// TestBriefMessagesWaitForABoxThatRuns: a message carried by the brief of
// a box that failed to start is carried again by the next brief, and once
// a box ran with it, by no later one. It was lost: writing the brief
// marked it delivered before the box started.
func TestBriefMessagesWaitForABoxThatRuns(t *testing.T) {
	s, _ := newSup(t)
	msg, err := mailbox.Send(s.Yard, "yuko", "alice", "skip sports")
	if err != nil {
		t.Fatal(err)
	}
	id, _, _ := queue.Add(s.Yard, queue.AddOptions{Imp: "yuko", Text: "digest", By: "alice", Actor: "test"})
	task, _ := queue.Get(s.Yard, id)

	// Run 1's box does not start: nothing records its brief as told.
	if b := readBrief(t, s, task, "r-0000000000000001"); len(b.Mailbox) != 1 {
		t.Fatalf("run 1 brief carries %d messages, want 1", len(b.Mailbox))
	}
	b2 := readBrief(t, s, task, "r-0000000000000002")
	if len(b2.Mailbox) != 1 || b2.Mailbox[0].ID != msg {
		t.Fatalf("the message of a box that never started was lost: run 2 brief carries %+v", b2.Mailbox)
	}
	ran(t, s, "r-0000000000000002")
	if b3 := readBrief(t, s, task, "r-0000000000000003"); len(b3.Mailbox) != 0 {
		t.Fatalf("run 3 got the message again: %+v", b3.Mailbox)
	}
	// A late record for run 1's brief (a restart adopting it) does not
	// deliver the message a second time.
	ran(t, s, "r-0000000000000001")
	raw, err := os.ReadFile(s.Yard.Path("mailbox", "yuko", msg+".json"))
	if err != nil || !strings.Contains(string(raw), `"delivered_to": "r-0000000000000002"`) {
		t.Errorf("message file: %v\n%s", err, raw)
	}
}

// TestBriefToldMarkerDamaged: a .told that cannot be read is logged once,
// naming it; the brief then tells every decided gate (again rather than
// never), and the next box's start replaces the marker.
func TestBriefToldMarkerDamaged(t *testing.T) {
	s, _ := newSup(t)
	logs := logTo(s)
	g, _ := gate.File(s.Yard, gate.FileOptions{Imp: "yuko", Intent: "email-send", Payload: []byte(`{"n":1}`), By: "yuko", Actor: "test"})
	gate.Move(s.Yard, g.ID, gate.Change{To: state.Denied, By: "alice"})
	id, _, _ := queue.Add(s.Yard, queue.AddOptions{Imp: "yuko", Text: "digest", By: "alice", Actor: "test"})
	task, _ := queue.Get(s.Yard, id)
	readBrief(t, s, task, "r-0000000000000001")
	ran(t, s, "r-0000000000000001")
	p := s.Yard.Path("queue", "yuko", toldMark)
	os.WriteFile(p, []byte(`{"schema":"impyard.told/1","gates":{"g-`), 0o640)
	b2 := readBrief(t, s, task, "r-0000000000000002")
	readBrief(t, s, task, "r-0000000000000002")
	if !resolvedIDs(b2)[g.ID] {
		t.Errorf("with .told damaged, run 2 was not told gate %s", g.ID)
	}
	if naming(logs(), p) != 1 {
		t.Errorf("want one log line naming %s:\n%s", p, strings.Join(logs(), "\n"))
	}
	ran(t, s, "r-0000000000000002")
	if b3 := readBrief(t, s, task, "r-0000000000000003"); len(b3.Resolved) != 0 {
		t.Errorf("after the marker was replaced, run 3 was told again: %v", resolvedIDs(b3))
	}
}

// A task an inbound delivery filed is briefed with its source, marked
// untrusted; one filed in the yard has no provenance.
func TestBriefProvenance(t *testing.T) {
	s, _ := newSup(t)
	id, _, _ := queue.Add(s.Yard, queue.AddOptions{Imp: "yuko", Text: "a webhook's body", Source: "github", By: "inbound:github", Actor: "impgw"})
	task, _ := queue.Get(s.Yard, id)
	b := readBrief(t, s, task, "r-0000000000000001")
	if p := b.Provenance; p == nil || p.Source != "github" || !p.Untrusted || !strings.Contains(p.Note, `inbound source "github"`) ||
		!strings.Contains(p.Note, "untrusted data") || b.Task.Source != "github" {
		t.Errorf("provenance %+v, task source %q", b.Provenance, b.Task.Source)
	}
	id, _, _ = queue.Add(s.Yard, queue.AddOptions{Imp: "yuko", Text: "digest", By: "alice", Actor: "test"})
	task, _ = queue.Get(s.Yard, id)
	if b := readBrief(t, s, task, "r-0000000000000002"); b.Provenance != nil {
		t.Errorf("an owner's task has provenance %+v", b.Provenance)
	}
}
