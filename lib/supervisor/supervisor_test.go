package supervisor

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/impyard/impyard/internal/approvaltest"
	"github.com/impyard/impyard/lib/config"
	"github.com/impyard/impyard/lib/gate"
	"github.com/impyard/impyard/lib/mailbox"
	"github.com/impyard/impyard/lib/queue"
	"github.com/impyard/impyard/lib/state"
	"github.com/impyard/impyard/lib/yard"
	"github.com/impyard/impyard/lib/yard/yardtest"
)

func newSup(t *testing.T) (*Supervisor, *time.Time) {
	t.Helper()
	y := yardtest.New(t)
	now := time.Date(2026, 11, 30, 8, 0, 30, 0, time.UTC)
	s := &Supervisor{Yard: y, Home: t.TempDir(), Now: func() time.Time { return now }, Logf: t.Logf}
	s.init()
	return s, &now
}

func writeImp(t *testing.T, y *yard.Yard, name, conf string) {
	t.Helper()
	os.MkdirAll(y.Path("imps", name), 0o750)
	if err := os.WriteFile(y.Path("imps", name, "imp.toml"), []byte(conf), 0o640); err != nil {
		t.Fatal(err)
	}
}

func tasks(t *testing.T, y *yard.Yard, imp string) []*queue.Task {
	t.Helper()
	ts, bad := queue.List(y, queue.Filter{Imp: imp})
	if len(bad) > 0 {
		t.Fatal(bad)
	}
	return ts
}

// TestSchedules: a schedule fires on time, never stacks a task on one
// still waiting or running, and after downtime fires once, not once per
// missed slot.
func TestSchedules(t *testing.T) {
	s, now := newSup(t)
	writeImp(t, s.Yard, "yuko", "command = [\"x\"]\nschedule = \"*/10 * * * *\"\nschedule_task = \"weekly digest\"\n")
	s.schedules()
	if n := len(tasks(t, s.Yard, "yuko")); n != 0 {
		t.Fatalf("fired on first sight: %d tasks", n)
	}
	*now = now.Add(5 * time.Minute) // 08:05:30: not due
	s.schedules()
	if n := len(tasks(t, s.Yard, "yuko")); n != 0 {
		t.Fatalf("fired early")
	}
	*now = now.Add(5 * time.Minute) // 08:10:30: due
	s.schedules()
	ts := tasks(t, s.Yard, "yuko")
	if len(ts) != 1 || !ts[0].Proactive || ts[0].Text != "weekly digest" || ts[0].Labels[0] != "schedule" {
		t.Fatalf("after 08:10: %+v", ts)
	}
	*now = now.Add(10 * time.Minute) // due again, but the first still waits
	s.schedules()
	if n := len(tasks(t, s.Yard, "yuko")); n != 1 {
		t.Fatalf("stacked: %d tasks", n)
	}
	queue.Move(s.Yard, ts[0].ID, queue.Change{To: state.Running})
	queue.Move(s.Yard, ts[0].ID, queue.Change{To: state.Done})
	*now = now.Add(10 * time.Hour) // downtime: 60 slots missed
	s.schedules()
	s.schedules()
	if n := len(tasks(t, s.Yard, "yuko")); n != 2 {
		t.Fatalf("after downtime %d tasks, want exactly one catch-up", n-1)
	}
}

func TestScheduleRefused(t *testing.T) {
	s, _ := newSup(t)
	writeImp(t, s.Yard, "yuko", "command = [\"x\"]\nschedule = \"every tuesday\"\n")
	s.schedules()
	if n := len(tasks(t, s.Yard, "yuko")); n != 0 {
		t.Errorf("an invalid schedule fired")
	}
}

// TestSettleAndContinue: a needs-review task ends when its gates finish,
// failed if one failed; a task that asked for continuations gets one per
// finished gate, once.
func TestSettleAndContinue(t *testing.T) {
	s, _ := newSup(t)
	id, _, _ := queue.Add(s.Yard, queue.AddOptions{Imp: "yuko", Text: "digest", Continue: true, By: "alice", Actor: "test"})
	queue.Move(s.Yard, id, queue.Change{To: state.Running})
	queue.Move(s.Yard, id, queue.Change{To: state.NeedsReview})
	g1, _ := gate.File(s.Yard, gate.FileOptions{Imp: "yuko", Intent: "email-send", Task: id, Payload: []byte(`{"n":1}`), By: "yuko", Actor: "test"})
	g2, _ := gate.File(s.Yard, gate.FileOptions{Imp: "yuko", Intent: "email-send", Task: id, Payload: []byte(`{"n":2}`), By: "yuko", Actor: "test"})
	gate.Move(s.Yard, g1.ID, gate.Change{To: state.Denied, By: "alice", Why: "not now"})
	s.reviews()
	if task, _ := queue.Get(s.Yard, id); task.State != state.NeedsReview {
		t.Fatalf("settled with a gate still open: %s", task.State)
	}
	s.reviews()
	cont := 0
	for _, task := range tasks(t, s.Yard, "yuko") {
		if task.Continues == id {
			cont++
			if !strings.Contains(task.Text, g1.ID) || !strings.Contains(task.Text, "denied") || !strings.Contains(task.Text, "not now") {
				t.Errorf("continuation text: %s", task.Text)
			}
		}
	}
	if cont != 1 {
		t.Fatalf("%d continuations for one finished gate", cont)
	}
	approvaltest.Approve(t, s.Yard, s.Home, g2.ID)
	gate.Move(s.Yard, g2.ID, gate.Change{To: state.Executing, By: "impexec"})
	gate.Move(s.Yard, g2.ID, gate.Change{To: state.Failed, By: "impexec", Why: "upstream said 500"})
	s.reviews()
	task, _ := queue.Get(s.Yard, id)
	if task.State != state.Failed || !strings.Contains(task.Reason, "upstream said 500") {
		t.Errorf("after a failed gate: %s %q", task.State, task.Reason)
	}
	s.reviews()
	if n := len(tasks(t, s.Yard, "yuko")); n != 3 {
		t.Errorf("%d tasks, want the original and two continuations", n)
	}
}

// TestBrief: the brief carries the task, open gates, gates decided that no
// box was told of (in a yard from before .told, those decided after the
// last run ended), undelivered messages (delivered, once, when the box
// runs) and the journal's tail.
func TestBrief(t *testing.T) {
	s, _ := newSup(t)
	// A clock that moves a second at every reading orders the resolutions
	// and the last run, whatever the resolution of the host's clock, in
	// the whole seconds the yard records.
	clock := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	defer func(now func() time.Time) { state.Now = now }(state.Now)
	state.Now = func() time.Time { clock = clock.Add(time.Second); return clock }
	old, _ := gate.File(s.Yard, gate.FileOptions{Imp: "yuko", Intent: "email-send", Payload: []byte(`{"old":1}`), By: "yuko", Actor: "test"})
	gate.Move(s.Yard, old.ID, gate.Change{To: state.Denied, By: "alice"})
	if err := s.writeMark("yuko", lastRunMark, state.Now()); err != nil {
		t.Fatal(err)
	}
	open, _ := gate.File(s.Yard, gate.FileOptions{Imp: "yuko", Intent: "email-send", Payload: []byte(`{"n":1}`), By: "yuko", Actor: "test"})
	fresh, _ := gate.File(s.Yard, gate.FileOptions{Imp: "yuko", Intent: "email-send", Payload: []byte(`{"n":2}`), By: "yuko", Actor: "test"})
	gate.Move(s.Yard, fresh.ID, gate.Change{To: state.Denied, By: "alice"})
	gate.File(s.Yard, gate.FileOptions{Imp: "rex", Intent: "email-send", Payload: []byte(`{}`), By: "rex", Actor: "test"})
	mailbox.Send(s.Yard, "yuko", "alice", "skip sports")
	id, _, _ := queue.Add(s.Yard, queue.AddOptions{Imp: "yuko", Text: "digest", By: "alice", Actor: "test"})
	task, _ := queue.Get(s.Yard, id)
	os.MkdirAll(s.Yard.Path("runs", "r-0000000000000001"), 0o750)
	p, err := s.writeBrief(task, "r-0000000000000001")
	if err != nil {
		t.Fatal(err)
	}
	var b Brief
	raw, _ := os.ReadFile(p)
	if err := json.Unmarshal(raw, &b); err != nil {
		t.Fatal(err)
	}
	if b.Task.ID != id || len(b.Open) != 1 || b.Open[0].ID != open.ID || len(b.Resolved) != 1 || b.Resolved[0].ID != fresh.ID {
		t.Errorf("brief gates: open %d resolved %d", len(b.Open), len(b.Resolved))
	}
	if len(b.Mailbox) != 1 || b.Mailbox[0].Text != "skip sports" || len(b.Journal) == 0 {
		t.Errorf("brief mailbox %+v, journal %d lines", b.Mailbox, len(b.Journal))
	}
	if fi, _ := os.Stat(p); fi.Mode().Perm() != 0o644 {
		t.Errorf("brief mode %v: the box's user must read it", fi.Mode().Perm())
	}
	if err := s.delivered("yuko", "r-0000000000000001"); err != nil {
		t.Fatal(err)
	}
	if again, err := mailbox.Undelivered(s.Yard, "yuko"); err != nil || len(again) != 0 {
		t.Errorf("after the box ran, still undelivered: %+v %v", again, err)
	}
	raw, _ = os.ReadFile(filepath.Join(s.Yard.Path("mailbox", "yuko"), b.Mailbox[0].ID+".json"))
	if !strings.Contains(string(raw), `"delivered_to": "r-0000000000000001"`) {
		t.Errorf("message file after delivery:\n%s", raw)
	}
	raw, _ = os.ReadFile(s.Yard.Path("queue", "yuko", toldMark))
	if !strings.Contains(string(raw), `"`+fresh.ID+`": "r-0000000000000001"`) || strings.Contains(string(raw), open.ID) {
		t.Errorf(".told after the box ran:\n%s", raw)
	}
}

func TestCheckBox(t *testing.T) {
	y := yardtest.New(t)
	for conf, want := range map[string]string{
		"command = [\"x\"]":                                       "names no box",
		"rootfs = \"/nonexistent\"\ncommand = [\"x\"]":            "no such file",
		"rootfs = \"/\"":                                          "no command",
		"rootfs = \"/\"\ncommand = [\"x\"]\nuser = \"root\"":      "not numeric",
		"rootfs = \"/\"\ncommand = [\"x\"]\nuser = \"0:0\"":       "never runs as root",
		"rootfs = \"/\"\ncommand = [\"x\"]\nmemory = \"lots\"":    "memory",
		"rootfs = \"/\"\ncommand = [\"x\"]\nmemory = \"256M\"":    "",
		"rootfs = \"/\"\ncommand = [\"x\"]\nuser = \"1000:1000\"": "",
	} {
		writeImp(t, y, "yuko", conf)
		cfg, err := config.LoadImp(y, "yuko")
		if err != nil {
			t.Fatal(err)
		}
		got := checkBox(cfg)
		if (want == "") != (got == "") || !strings.Contains(got, want) {
			t.Errorf("%q: got %q, want %q", conf, got, want)
		}
	}
}

// TestSeveralSchedules: each [[schedule]] entry fires on its own time with
// its own task, kind and flags, keeps its own marker, and never stacks on
// its own waiting task though another entry's task waits too.
func TestSeveralSchedules(t *testing.T) {
	s, now := newSup(t)
	var logs []string
	s.Logf = func(format string, a ...any) { logs = append(logs, fmt.Sprintf(format, a...)) }
	writeImp(t, s.Yard, "yuko", `command = ["x"]
[[schedule]]
cron = "*/10 * * * *"
task = "weekly digest"
continue = true
[[schedule]]
cron = "0 9 * * *"
task = "morning check"
proactive = false
`)
	s.schedules() // first sight, 08:00:30
	*now = now.Add(10 * time.Minute)
	s.schedules() // 08:10:30: the first is due
	ts := tasks(t, s.Yard, "yuko")
	if len(ts) != 1 || ts[0].Text != "weekly digest" || !ts[0].Continue || !ts[0].Proactive || ts[0].Labels[0] != "schedule" {
		t.Fatalf("after 08:10: %+v", ts)
	}
	*now = now.Add(50 * time.Minute)
	s.schedules() // 09:00:30: both are due; the first's task still waits
	ts = tasks(t, s.Yard, "yuko")
	if len(ts) != 2 || ts[1].Text != "morning check" || ts[1].Proactive || ts[1].Continue {
		t.Fatalf("after 09:00: %+v", ts)
	}
	marks, _ := filepath.Glob(s.Yard.Path("queue", "yuko", ".schedule-*"))
	if len(marks) != 2 {
		t.Errorf("markers %v, want one per entry", marks)
	}
	if !strings.Contains(strings.Join(logs, "\n"), "[[schedule]] #1 due but task "+ts[0].ID+" is still waiting") {
		t.Errorf("logs:\n%s", strings.Join(logs, "\n"))
	}

	// A bad entry stops the imp's schedules, logged once, naming it.
	logs = nil
	writeImp(t, s.Yard, "yuko", "command = [\"x\"]\n[[schedule]]\ncron = \"@hourly\"\n[[schedule]]\ncron = \"every tuesday\"\n")
	*now = now.Add(24 * time.Hour)
	s.schedules()
	s.schedules()
	if n := len(tasks(t, s.Yard, "yuko")); n != 2 {
		t.Errorf("a broken imp.toml fired: %d tasks", n)
	}
	if len(logs) != 1 || !strings.Contains(logs[0], `imp.toml:5: key "cron": [[schedule]] #2: invalid cron expression "every tuesday"`) {
		t.Errorf("logs of a bad entry, want one naming it:\n%s", strings.Join(logs, "\n"))
	}
}
