package status

import (
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/impyard/impyard/internal/approvaltest"
	"github.com/impyard/impyard/internal/testclock"
	"github.com/impyard/impyard/lib/gate"
	"github.com/impyard/impyard/lib/ledger"
	"github.com/impyard/impyard/lib/notify"
	"github.com/impyard/impyard/lib/queue"
	"github.com/impyard/impyard/lib/run"
	"github.com/impyard/impyard/lib/state"
	"github.com/impyard/impyard/lib/supervisor"
	"github.com/impyard/impyard/lib/yard"
	"github.com/impyard/impyard/lib/yard/yardtest"
)

func down(string) error { return errors.New("connection refused") }

func addTask(t *testing.T, y *yard.Yard, imp string, to ...string) string {
	t.Helper()
	id, _, err := queue.Add(y, queue.AddOptions{Imp: imp, Text: "do " + imp, Kind: queue.Research, By: "alice", Actor: "test"})
	if err != nil {
		t.Fatal(err)
	}
	for _, st := range to {
		if _, err := queue.Move(y, id, queue.Change{To: st, By: "test", Why: "to " + st}); err != nil {
			t.Fatal(err)
		}
	}
	return id
}

func fileGate(t *testing.T, y *yard.Yard, imp string) *gate.Gate {
	t.Helper()
	g, err := gate.File(y, gate.FileOptions{Imp: imp, Intent: "message-user", Payload: []byte(`{"text":"hi"}`), By: imp, Actor: "test"})
	if err != nil {
		t.Fatal(err)
	}
	return g
}

// TestGather assembles every part from a yard with tasks in several
// states, gates pending and failed, a ledger and a budget, and a running
// supervisor.
func TestGather(t *testing.T) {
	y := yardtest.New(t)
	home := t.TempDir()
	// One instant for the whole yard: the pending gate was filed 90
	// minutes before it, the spend is of its day. Gather looking 90
	// minutes ahead instead read the next day's spend after 22:30 UTC.
	now := testclock.Freeze(t, &ledger.Now)
	clock := func(at time.Time) func() time.Time { return func() time.Time { return at.UTC() } }
	was := state.Now
	t.Cleanup(func() { state.Now = was })
	state.Now = clock(now.Add(-2 * time.Hour))
	if err := os.WriteFile(filepath.Join(y.Root, "org.toml"), []byte("[gateway]\nlisten = \"127.0.0.1:9\"\n\n[budget.yuko]\ndaily = 1.0\nbytes = 1000\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	addTask(t, y, "yuko")
	addTask(t, y, "yuko")
	addTask(t, y, "yuko", state.Running, state.Done)
	failed := addTask(t, y, "kenji", state.Running, state.Failed)
	state.Now = clock(now.Add(-90 * time.Minute))
	pending := fileGate(t, y, "yuko")
	bad := fileGate(t, y, "kenji")
	approvaltest.Approve(t, y, home, bad.ID)
	if _, err := gate.Move(y, bad.ID, gate.Change{To: state.Failed, By: "impexec", Why: "no executor for message-user"}); err != nil {
		t.Fatal(err)
	}
	if err := ledger.Debit(y, ledger.Entry{Imp: "yuko", Kind: ledger.Action, Gate: "g-0000000000000003", Cost: 1.5, Class: ledger.Proactive}); err != nil {
		t.Fatal(err)
	}
	unlock, err := supervisor.Lock(y)
	if err != nil {
		t.Fatal(err)
	}
	defer unlock()

	s, err := Gather(y, Options{Now: now, GatewayUp: down})
	if err != nil {
		t.Fatal(err)
	}
	if len(s.Warnings) != 0 {
		t.Errorf("warnings: %v", s.Warnings)
	}
	want := map[string]bool{"impsup": true, "impexec": false, "impgw": false}
	for _, d := range s.Daemons {
		if d.Running != want[d.Name] {
			t.Errorf("daemon %s running = %v, want %v", d.Name, d.Running, want[d.Name])
		}
	}
	if len(s.Daemons) != 3 || s.Daemons[2].Detail != "does not answer at 127.0.0.1:9" {
		t.Errorf("daemons: %+v", s.Daemons)
	}
	if len(s.Tasks) != 2 || s.Tasks[0].Imp != "kenji" || s.Tasks[0].States[state.Failed] != 1 ||
		s.Tasks[1].States[state.Waiting] != 2 || s.Tasks[1].States[state.Done] != 1 || len(s.Tasks[1].States) != len(TaskStates) {
		t.Errorf("tasks: %+v", s.Tasks)
	}
	if len(s.Gates) != 1 || s.Gates[0].ID != pending.ID || s.Gates[0].State != state.Filed || s.Gates[0].AgeSeconds != 90*60 {
		t.Errorf("gates: %+v", s.Gates)
	}
	if len(s.Failures) != 2 || s.Failures[0].ID != bad.ID || s.Failures[0].Kind != "gate" || s.Failures[0].Reason != "no executor for message-user" ||
		s.Failures[1].ID != failed || s.Failures[1].Reason != "to failed" {
		t.Errorf("failures: %+v", s.Failures)
	}
	if len(s.Spend) != 1 || s.Spend[0].Imp != "yuko" || s.Spend[0].Cost != 1.5 || s.Spend[0].Daily != 1 || s.Spend[0].DailyBytes != 1000 || !s.Spend[0].Over {
		t.Errorf("spend: %+v", s.Spend)
	}

	var buf bytes.Buffer
	if err := json.NewEncoder(&buf).Encode(s); err != nil {
		t.Fatal(err)
	}
	stamp := regexp.MustCompile(`"(at|created)":"([^"]*)"`)
	for _, m := range stamp.FindAllStringSubmatch(buf.String(), -1) {
		if _, err := time.Parse(time.RFC3339, m[2]); err != nil || !strings.HasSuffix(m[2], "Z") || strings.Contains(m[2], ".") {
			t.Errorf("%s = %q: not RFC 3339 UTC whole seconds", m[1], m[2])
		}
	}
	for _, part := range []string{`"daemons":[`, `"tasks":[`, `"gates":[`, `"spend":[`, `"share":1.5,"share_of":"daily"`, `"failures":[`, `"warnings":[]`} {
		if !strings.Contains(buf.String(), part) {
			t.Errorf("JSON lacks %s: %s", part, buf.String())
		}
	}

	buf.Reset()
	if err := s.WriteText(&buf, false); err != nil {
		t.Fatal(err)
	}
	for _, re := range []string{
		`(?m)^  impsup +running +\(runs/\.impsup\.lock held\)$`,
		`(?m)^  impexec +not running`,
		`(?m)^  impgw +not running +\(does not answer at 127\.0\.0\.1:9\)$`,
		`(?m)^  yuko +2 +0 +0 +1 +0 +0$`,
		`(?m)^  ` + pending.ID + ` +yuko +message-user +filed +1h$`,
		`(?m)^  yuko +1\.5 +1 +0 +1000 +150% of daily +over budget$`,
		`(?m)^  \S+Z +gate +` + bad.ID + ` +kenji +no executor for message-user$`,
	} {
		if !regexp.MustCompile(re).MatchString(buf.String()) {
			t.Errorf("text lacks %s:\n%s", re, buf.String())
		}
	}
}

// TestGatherEmpty reads a bare yard and creates nothing in it; every part
// is there, empty, and the text says so.
func TestGatherEmpty(t *testing.T) {
	y := yardtest.New(t)
	before := yardtest.Tree(t, y.Root)
	s, err := Gather(y, Options{GatewayUp: down})
	if err != nil {
		t.Fatal(err)
	}
	yardtest.Unchanged(t, y.Root, before, "Gather")
	if len(s.Tasks)+len(s.Gates)+len(s.Spend)+len(s.Failures)+len(s.Warnings) != 0 {
		t.Errorf("%+v", s)
	}
	var buf bytes.Buffer
	if err := s.WriteText(&buf, false); err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(buf.String(), "\n  none\n"); n != 4 {
		t.Errorf("%d parts say none, want 4:\n%s", n, buf.String())
	}
}

// TestGatherImpexec sees an executor from its shared lock, and the
// gateway when it answers.
func TestGatherImpexec(t *testing.T) {
	y := yardtest.New(t)
	release, err := run.Present(y, "impexec")
	if err != nil {
		t.Fatal(err)
	}
	defer release()
	s, err := Gather(y, Options{GatewayUp: func(string) error { return nil }})
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range s.Daemons {
		if d.Running != (d.Name != "impsup") {
			t.Errorf("%+v", d)
		}
	}
}

// TestFailuresLimit keeps the most recent failures only.
func TestFailuresLimit(t *testing.T) {
	y := yardtest.New(t)
	// A second between failures orders them; a sleep only usually did.
	at := testclock.Now(t)
	was := state.Now
	t.Cleanup(func() { state.Now = was })
	var ids []string
	for range 4 {
		state.Now = func() time.Time { return at.UTC() }
		ids = append(ids, addTask(t, y, "yuko", state.Running, state.Failed))
		at = at.Add(time.Second)
	}
	s, err := Gather(y, Options{GatewayUp: down, Failures: 2})
	if err != nil {
		t.Fatal(err)
	}
	if len(s.Failures) != 2 || s.Failures[0].ID != ids[3] || s.Failures[1].ID != ids[2] {
		t.Errorf("failures: %+v, want %s, %s", s.Failures, ids[3], ids[2])
	}
}

// TestGatherNotifications counts what the outbox owes and shows each
// entry whose delivery failed: attempts, next try and the last error.
func TestGatherNotifications(t *testing.T) {
	y := yardtest.New(t)
	// A receiver, so the filed gates are owed.
	os.WriteFile(y.Path("org.toml"), []byte("[notify]\ncommand = [\"true\"]\n"), 0o640)
	one, two := fileGate(t, y, "yuko"), fileGate(t, y, "rex")
	now := time.Date(2026, 12, 1, 3, 0, 0, 0, time.UTC)
	for range 2 {
		if _, err := notify.Failed(y, two.ID+".1", nil, errors.New("webhook: hooks.example answered 503: busy"), now, 5*time.Second); err != nil {
			t.Fatal(err)
		}
	}
	before := yardtest.Tree(t, y.Root)
	s, err := Gather(y, Options{GatewayUp: down, Now: now})
	if err != nil {
		t.Fatal(err)
	}
	yardtest.Unchanged(t, y.Root, before, "Gather")
	n := s.Notifications
	if n.Pending != 2 || len(n.Failing) != 1 {
		t.Fatalf("%+v", n)
	}
	f := n.Failing[0]
	if f.ID != two.ID+".1" || f.Event != "gate-filed" || f.Imp != "rex" || f.Attempts != 2 || !f.Next.Equal(now.Add(10*time.Second)) || f.LastError != "webhook: hooks.example answered 503: busy" {
		t.Fatalf("%+v", f)
	}
	b, _ := json.Marshal(s)
	if want := `"notifications":{"pending":2,"failing":[{"id":"` + two.ID + `.1","event":"gate-filed","imp":"rex","attempts":2,"next":"2026-12-01T03:00:10Z","last_error":"webhook: hooks.example answered 503: busy"}]}`; !strings.Contains(string(b), want) {
		t.Errorf("json %s lacks %s", b, want)
	}
	var buf bytes.Buffer
	if err := s.WriteText(&buf, false); err != nil {
		t.Fatal(err)
	}
	for _, re := range []string{`(?m)^NOTIFICATIONS\n  2 waiting to be delivered\n`, `(?m)^  ` + two.ID + `\.1 +gate-filed +rex +failed 2 time\(s\), next at 2026-12-01T03:00:10Z +webhook: hooks\.example answered 503: busy$`} {
		if !regexp.MustCompile(re).MatchString(buf.String()) {
			t.Errorf("text lacks %s:\n%s", re, buf.String())
		}
	}
	if strings.Contains(buf.String(), one.ID+".1") {
		t.Errorf("an entry not yet tried is listed as failing:\n%s", buf.String())
	}
	// A damaged entry is a warning; the rest is still counted.
	os.WriteFile(y.Path("outbox", "pending", "g-0000000000000001.1.json"), []byte("{"), 0o600)
	s, err = Gather(y, Options{GatewayUp: down, Now: now})
	if err != nil || s.Notifications.Pending != 2 || len(s.Warnings) != 1 || !strings.Contains(s.Warnings[0], "g-0000000000000001.1.json") {
		t.Fatalf("%+v %v", s, err)
	}
}
