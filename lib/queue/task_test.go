package queue

import (
	"errors"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/impyard/impyard/lib/event"
	"github.com/impyard/impyard/lib/id"
	"github.com/impyard/impyard/lib/state"
	"github.com/impyard/impyard/lib/yard/yardtest"
)

func TestAddStoresEveryOption(t *testing.T) {
	y := newYard(t)
	now := yardtest.FixedNow(t)
	parent := id.New(id.Task)
	nb := time.Date(2026, 12, 1, 9, 0, 0, 0, time.FixedZone("CET", 3600))
	taskID, existed, err := Add(y, AddOptions{Imp: "yuko", Text: "fix the build", Kind: Code, Proactive: true, Labels: []string{"ci", "urgent"},
		Repo: "/srv/git/app", Base: "main", Continues: parent, Unique: "ci", Source: "github", Continue: true, NotBefore: nb, By: "alice", Actor: "impq"})
	if err != nil || existed {
		t.Fatal(existed, err)
	}
	got, err := Get(y, taskID)
	if err != nil {
		t.Fatal(err)
	}
	if got.Schema != "impyard.task/1" || got.ID != taskID || got.Imp != "yuko" || got.State != state.Waiting || got.Kind != Code || got.Text != "fix the build" ||
		!got.Proactive || strings.Join(got.Labels, ",") != "ci,urgent" || got.Repo != "/srv/git/app" || got.Base != "main" || got.Continues != parent ||
		got.Unique != "ci" || got.Source != "github" || !got.Continue || got.NotBefore == nil || !got.NotBefore.Equal(nb) || got.NotBefore.Location() != time.UTC ||
		got.Attempt != 1 || !got.Created.Equal(now) || !got.Updated.Equal(now) {
		t.Errorf("stored %+v", got)
	}
	if len(got.History) != 1 || got.History[0] != (state.Transition{To: state.Waiting, By: "alice", Actor: "impq", At: now, Why: "added by impq"}) {
		t.Errorf("history %+v", got.History)
	}
	// No not-before: none stored; no kind: research.
	other := mustAdd(t, y, AddOptions{})
	if got, _ := Get(y, other); got.NotBefore != nil || got.Kind != Research || got.Proactive || got.Continue {
		t.Errorf("defaults %+v", got)
	}
}

func TestJournalSummary(t *testing.T) {
	y := newYard(t)
	for _, c := range []struct{ text, want string }{
		{"  fix\n the \t build ", "fix the build"},
		{strings.Repeat("a", 120), strings.Repeat("a", 120)},
		{strings.Repeat("a", 121), strings.Repeat("a", 117) + "..."},
	} {
		taskID := mustAdd(t, y, AddOptions{Text: c.text})
		evs := events(t, y.Path("journal", "yuko", "events.jsonl"))
		e := evs[len(evs)-1]
		if e["event"] != "task-added" || e["id"] != taskID || e["why"] != c.want || e["seq"] != float64(1) {
			t.Errorf("text %q: journal %v, want why %q", c.text, e, c.want)
		}
	}
}

func TestAddRefusesEachOption(t *testing.T) {
	y := newYard(t)
	for _, c := range []struct {
		name string
		o    AddOptions
		want string
	}{
		{"imp", AddOptions{Imp: "Yuko", Text: "x"}, ""},
		{"blank text", AddOptions{Imp: "yuko", Text: " \n"}, "task text is empty"},
		{"long text", AddOptions{Imp: "yuko", Text: strings.Repeat("a", MaxText+1)}, "over the 262144 limit"},
		{"kind", AddOptions{Imp: "yuko", Text: "x", Kind: "chore"}, `unknown task kind "chore"`},
		{"continues", AddOptions{Imp: "yuko", Text: "x", Continues: "g-0000000000000001"}, ""},
		{"empty label", AddOptions{Imp: "yuko", Text: "x", Labels: []string{""}}, `invalid label ""`},
		{"long label", AddOptions{Imp: "yuko", Text: "x", Labels: []string{strings.Repeat("l", 65)}}, "invalid label"},
		{"label with a newline", AddOptions{Imp: "yuko", Text: "x", Labels: []string{"a\nb"}}, "invalid label"},
		{"label with a tab", AddOptions{Imp: "yuko", Text: "x", Labels: []string{"a\tb"}}, "invalid label"},
		{"label with a NUL", AddOptions{Imp: "yuko", Text: "x", Labels: []string{"a\x00"}}, "invalid label"},
		{"label with a CR", AddOptions{Imp: "yuko", Text: "x", Labels: []string{"a\r"}}, "invalid label"},
		{"unique", AddOptions{Imp: "yuko", Text: "x", Unique: strings.Repeat("u", 1025)}, "unique key is over 1024 bytes"},
		{"source", AddOptions{Imp: "yuko", Text: "x", Source: "../github"}, `source: invalid imp name "../github"`},
	} {
		if taskID, _, err := Add(y, c.o); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %q %v, want an error with %q", c.name, taskID, err, c.want)
		}
	}
	if tasks, bad := List(y, Filter{}); len(tasks) != 0 || len(bad) != 0 {
		t.Errorf("refused adds left %d tasks %v", len(tasks), bad)
	}
	// Each limit itself is allowed.
	for _, o := range []AddOptions{
		{Imp: "yuko", Text: strings.Repeat("a", MaxText)},
		{Imp: "yuko", Text: "x", Labels: []string{strings.Repeat("l", 64), "with space"}},
		{Imp: "yuko", Text: "x", Unique: strings.Repeat("u", 1024)},
		{Imp: "yuko", Text: "x", Kind: Research},
	} {
		if _, _, err := Add(y, o); err != nil {
			t.Errorf("at the limit: %v", err)
		}
	}
}

// A once key adds at most one task ever, whatever became of it.
func TestOnce(t *testing.T) {
	y := newYard(t)
	first, existed, err := Add(y, AddOptions{Imp: "yuko", Text: "continue", Once: "gate g-1", By: "impsup", Actor: "impsup"})
	if err != nil || existed {
		t.Fatal(existed, err)
	}
	Move(y, first, Change{To: state.Cancelled, By: "alice"})
	again, existed, err := Add(y, AddOptions{Imp: "yuko", Text: "continue", Once: "gate g-1"})
	if err != nil || !existed || again != first {
		t.Errorf("second add = %s %v %v, want %s existing", again, existed, err, first)
	}
	other, existed, err := Add(y, AddOptions{Imp: "yuko", Text: "continue", Once: "gate g-2"})
	if err != nil || existed || other == first {
		t.Errorf("another key = %s %v %v, want a new task", other, existed, err)
	}
	if tasks, _ := List(y, Filter{}); len(tasks) != 2 {
		t.Errorf("%d tasks, want 2", len(tasks))
	}
	// The once and unique markers are separate: a unique key equal to a
	// once key does not find the once task.
	u, existed, err := Add(y, AddOptions{Imp: "yuko", Text: "x", Unique: "gate g-1"})
	if err != nil || existed || u == first {
		t.Errorf("unique with the once key's text = %s %v %v", u, existed, err)
	}
}

// A unique marker naming something that is not a live task of this queue
// does not stop an add.
func TestUniqueMarkerDamaged(t *testing.T) {
	y := newYard(t)
	a := mustAdd(t, y, AddOptions{Unique: "k"})
	os.WriteFile(y.Path("queue", "yuko", uniqueName("k")), []byte("not-an-id\n"), 0o640)
	b, existed, err := Add(y, AddOptions{Imp: "yuko", Text: "x", Unique: "k"})
	if err != nil || existed || b == a {
		t.Errorf("damaged marker: %s %v %v, want a new task", b, existed, err)
	}
	os.WriteFile(y.Path("queue", "yuko", uniqueName("k")), []byte(id.New(id.Task)+"\n"), 0o640)
	c, existed, err := Add(y, AddOptions{Imp: "yuko", Text: "x", Unique: "k"})
	if err != nil || existed || c == b {
		t.Errorf("marker naming no task: %s %v %v, want a new task", c, existed, err)
	}
	if b, _ := os.ReadFile(y.Path("queue", "yuko", uniqueName("k"))); string(b) != c+"\n" {
		t.Errorf("marker %q, want %s", b, c)
	}
}

func TestMoveRecordsReasonAndEdit(t *testing.T) {
	y := newYard(t)
	taskID := mustAdd(t, y, AddOptions{})
	now := yardtest.FixedNow(t)
	run := id.New(id.Run)
	var sawState string
	got, err := Move(y, taskID, Change{To: state.Running, By: "impsup", Actor: "impsup", Why: "started",
		Edit: func(t *Task) error { sawState = t.State; t.Runs = append(t.Runs, run); return nil }})
	if err != nil {
		t.Fatal(err)
	}
	if sawState != state.Waiting {
		t.Errorf("Edit saw %q, want the state before the move", sawState)
	}
	stored, _ := Get(y, taskID)
	if stored.State != state.Running || stored.Reason != "started" || len(stored.Runs) != 1 || stored.Runs[0] != run || !stored.Updated.Equal(now) ||
		stored.History[1] != (state.Transition{From: state.Waiting, To: state.Running, By: "impsup", Actor: "impsup", At: now, Why: "started"}) {
		t.Errorf("stored %+v", stored)
	}
	if got.State != stored.State || len(got.History) != 2 {
		t.Errorf("returned %+v", got)
	}
	// A move without a reason keeps the last one.
	if _, err := Move(y, taskID, Change{To: state.Done, By: "impsup"}); err != nil {
		t.Fatal(err)
	}
	if stored, _ := Get(y, taskID); stored.Reason != "started" {
		t.Errorf("reason %q, want the last one kept", stored.Reason)
	}
	evs := events(t, y.Path("journal", "yuko", "events.jsonl"))
	if e := evs[len(evs)-1]; e["event"] != "task-done" || e["seq"] != float64(3) || e["from"] != state.Running || e["to"] != state.Done || e["id"] != taskID {
		t.Errorf("journal %v", e)
	}
}

func TestMoveRefusals(t *testing.T) {
	y := newYard(t)
	taskID := mustAdd(t, y, AddOptions{})
	for _, c := range []struct {
		name string
		id   string
		c    Change
		is   error
		want string
	}{
		{"bad id", "t-../x", Change{To: state.Running}, nil, ""},
		{"no task", "t-0000000000000009", Change{To: state.Running}, nil, "task t-0000000000000009: no such task in"},
		{"illegal", taskID, Change{To: state.Done}, state.ErrIllegal, "waiting; it cannot become done"},
		{"edit fails", taskID, Change{To: state.Running, Edit: func(*Task) error { return os.ErrPermission }}, os.ErrPermission, ""},
	} {
		if _, err := Move(y, c.id, c.c); err == nil || (c.is != nil && !errors.Is(err, c.is)) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want %v %q", c.name, err, c.is, c.want)
		}
	}
	if got, _ := Get(y, taskID); got.State != state.Waiting || len(got.History) != 1 {
		t.Errorf("refused moves changed the task: %+v", got)
	}
	if evs := events(t, y.Path("journal", "yuko", "events.jsonl")); len(evs) != 1 {
		t.Errorf("refused moves were recorded: %v", evs)
	}
}

func TestReadTaskRefusesMisplacedFiles(t *testing.T) {
	y := newYard(t)
	taskID := mustAdd(t, y, AddOptions{})
	b, _ := os.ReadFile(y.Path("queue", "yuko", taskID+".json"))
	other := id.New(id.Task)
	for _, c := range []struct {
		name, imp, file, body, want string
	}{
		{"copied under another id", "yuko", other, string(b), "does not match the file name"},
		{"in another imp's queue", "rex", taskID, string(b), `imp "yuko" does not match its directory "rex"`},
		{"unknown state", "yuko", taskID, strings.Replace(string(b), `"state": "waiting"`, `"state": "paused"`, 1), `unknown state "paused"`},
	} {
		y := newYard(t)
		os.MkdirAll(y.Path("queue", c.imp), 0o750)
		os.WriteFile(y.Path("queue", c.imp, c.file+".json"), []byte(c.body), 0o640)
		if got, err := Get(y, c.file); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: Get = %+v %v, want %q", c.name, got, err, c.want)
		}
		tasks, bad := List(y, Filter{})
		if len(tasks) != 0 || len(bad) != 1 || !strings.Contains(bad[0].Error(), c.want) {
			t.Errorf("%s: List = %d tasks, bad %v", c.name, len(tasks), bad)
		}
	}
}

func TestListFilters(t *testing.T) {
	y := newYard(t)
	a := mustAdd(t, y, AddOptions{Imp: "yuko"})
	b := mustAdd(t, y, AddOptions{Imp: "rex"})
	c := mustAdd(t, y, AddOptions{Imp: "yuko"})
	Move(y, c, Change{To: state.Running})
	ids := func(ts []*Task) string {
		var s []string
		for _, t := range ts {
			s = append(s, t.ID)
		}
		return strings.Join(s, ",")
	}
	for _, f := range []struct {
		filter Filter
		want   string
	}{
		{Filter{}, a + "," + b + "," + c},
		{Filter{Imp: "yuko"}, a + "," + c},
		{Filter{State: state.Running}, c},
		{Filter{Imp: "rex", State: state.Waiting}, b},
		{Filter{Imp: "rex", State: state.Running}, ""},
		{Filter{Imp: "nobody"}, ""},
	} {
		tasks, bad := List(y, f.filter)
		if got := ids(tasks); got != f.want || len(bad) != 0 {
			t.Errorf("List(%+v) = %s %v, want %s", f.filter, got, bad, f.want)
		}
	}
	if tasks, bad := List(y, Filter{Imp: "../x"}); tasks != nil || len(bad) != 1 {
		t.Errorf("invalid imp: %v %v", tasks, bad)
	}
	// Dot files are the store's own; other names are reported.
	os.WriteFile(y.Path("queue", "yuko", "notes.txt"), nil, 0o640)
	if tasks, bad := List(y, Filter{Imp: "yuko"}); ids(tasks) != a+","+c || len(bad) != 1 || !strings.Contains(bad[0].Error(), "not a task file name") {
		t.Errorf("with a foreign file: %s %v", ids(tasks), bad)
	}
	// A queue that is not a directory is reported, the others still listed.
	os.Remove(y.Path("queue", "rex", b+".json"))
	os.RemoveAll(y.Path("queue", "rex"))
	os.WriteFile(y.Path("queue", "rex"), nil, 0o640)
	if tasks, bad := List(y, Filter{Imp: "rex"}); len(tasks) != 0 || len(bad) != 1 {
		t.Errorf("queue/rex is a file: %v %v", tasks, bad)
	}
}

func TestLocate(t *testing.T) {
	y := newYard(t)
	taskID := mustAdd(t, y, AddOptions{Imp: "rex"})
	mustAdd(t, y, AddOptions{Imp: "yuko"})
	if imp, err := Locate(y, taskID); err != nil || imp != "rex" {
		t.Errorf("Locate = %q %v, want rex", imp, err)
	}
	if _, err := Locate(y, "t-../../x"); err == nil {
		t.Error("located an invalid id")
	}
}

// A writer that died between writing a task and recording it is repaired
// by the next writer of that queue, before its own record.
func TestInterruptedTransitionRecordedByNextWriter(t *testing.T) {
	y := newYard(t)
	a := mustAdd(t, y, AddOptions{})
	if _, err := Move(y, a, Change{To: state.Running, By: "impsup"}); err != nil {
		t.Fatal(err)
	}
	os.Remove(y.Path("journal", "yuko", "events.jsonl"))
	os.Remove(y.Path("runs", "decisions.jsonl"))
	event.Begin(y.Path("queue", "yuko"), a)
	b := mustAdd(t, y, AddOptions{})
	evs := events(t, y.Path("journal", "yuko", "events.jsonl"))
	if len(evs) != 2 || evs[0]["id"] != a || evs[0]["event"] != "task-running" || evs[0]["seq"] != float64(2) || evs[1]["id"] != b {
		t.Errorf("journal %v, want a's running then b's add", evs)
	}
	// Markers naming no task of this queue are cleared without a record.
	for _, marked := range []string{id.New(id.Task), "g-0000000000000001"} {
		event.Begin(y.Path("queue", "yuko"), marked)
		if _, err := Move(y, b, Change{To: state.Running}); err != nil {
			t.Fatal(err)
		}
		Move(y, b, Change{To: state.Failed})
		Retry(y, b, "bob", "test")
		if id, ok := event.Interrupted(y.Path("queue", "yuko")); ok {
			t.Errorf("marker %q left naming %s", marked, id)
		}
	}
	if evs := events(t, y.Path("journal", "yuko", "events.jsonl")); len(evs) != 8 {
		t.Errorf("%d records, want 8: %v", len(evs), evs)
	}
	// A marker naming a task that cannot be read stops the next writer.
	os.WriteFile(y.Path("queue", "yuko", a+".json"), []byte("{"), 0o640)
	event.Begin(y.Path("queue", "yuko"), a)
	if _, _, err := Add(y, AddOptions{Imp: "yuko", Text: "x"}); err == nil {
		t.Error("add over an unreadable interrupted task succeeded")
	}
}

// Every Add and Move finishes its record: the recording marker, which
// tells the next writer a transition may be unrecorded, names nothing
// after each.
func TestNoMarkerLeft(t *testing.T) {
	y := newYard(t)
	check := func(step string) {
		t.Helper()
		if id, ok := event.Interrupted(y.Path("queue", "yuko")); ok {
			t.Errorf("after %s the recording marker names %s", step, id)
		}
	}
	taskID := mustAdd(t, y, AddOptions{})
	check("add")
	if _, err := Move(y, taskID, Change{To: state.Running, By: "impsup"}); err != nil {
		t.Fatal(err)
	}
	check("move")
	if evs := events(t, y.Path("journal", "yuko", "events.jsonl")); len(evs) != 2 {
		t.Errorf("%d records, want 2", len(evs))
	}
}
