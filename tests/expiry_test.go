package tests

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/impyard/impyard/lib/gate"
	"github.com/impyard/impyard/lib/queue"
	"github.com/impyard/impyard/lib/state"
)

// clockEnv is the variable the test builds of the binaries (crashBin)
// start their clock at (lib/state).
const clockEnv = "IMPYARD_TEST_CLOCK"

// TestGateExpires runs the Friday-to-Monday story with the real binaries,
// each started at its own day: a gate filed on Friday is too old to
// approve from a script on Saturday without --old; on Sunday impexec
// reminds the owner, once; on Monday a restarted impexec finds it past
// its deadline and marks it expired, recorded like any transition; its
// task stays in review, and an approval then, --old or not, is refused
// and the mail API sees nothing.
func TestGateExpires(t *testing.T) {
	s := newSpine(t, true, bin)
	dir := t.TempDir()
	received := filepath.Join(dir, "received")
	receiver := filepath.Join(dir, "receive")
	os.WriteFile(receiver, []byte("#!/bin/sh\ncat >> '"+received+"'; echo >> '"+received+"'\n"), 0o755)
	org, _ := os.ReadFile(s.y.Path("org.toml"))
	conf := strings.Replace(string(org), "cost = 0.01\n", "cost = 0.01\nexpires = \"48h\"\nconfirm_after = \"12h\"\n", 1) +
		"[notify]\ncommand = [\"" + receiver + "\"]\non = [\"gate-expiring\"]\nremind = \"6h\"\n"
	os.WriteFile(s.y.Path("org.toml"), []byte(conf), 0o640)

	friday := time.Date(2026, 11, 27, 17, 0, 0, 0, time.UTC)
	at := func(d time.Time) []string { return append([]string{clockEnv + "=" + d.Format(time.RFC3339)}, s.env...) }
	run := func(d time.Time, stdin string, args ...string) (int, string) {
		t.Helper()
		cmd := exec.Command(filepath.Join(crashBin, args[0]), args[1:]...)
		cmd.Env = append(os.Environ(), at(d)...)
		cmd.Stdin = strings.NewReader(stdin)
		out, err := cmd.CombinedOutput()
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			return ee.ExitCode(), string(out)
		}
		if err != nil {
			t.Fatal(err)
		}
		return 0, string(out)
	}
	sent := func() int {
		s.mail.mu.Lock()
		defer s.mail.mu.Unlock()
		return len(s.mail.bodies)
	}

	task, _, err := queue.Add(s.y, queue.AddOptions{Imp: "yuko", Text: "tell the boss about tomorrow's meeting", By: "alice", Actor: "test"})
	if err != nil {
		t.Fatal(err)
	}
	queue.Move(s.y, task, queue.Change{To: state.Running, By: "impsup"})
	queue.Move(s.y, task, queue.Change{To: state.NeedsReview, By: "impsup", Why: "box exited 0; waiting on gates"})
	code, out := run(friday, `{"to":["boss@elsewhere.com"],"subject":"meeting tomorrow","body":"see you at 10"}`,
		"impgate", "file", "--imp", "yuko", "--intent", "email-send", "--payload-file", "-", "--task", task)
	if code != 0 {
		t.Fatalf("file: %d %s", code, out)
	}
	gid := strings.TrimSpace(out)

	saturday := friday.Add(17 * time.Hour)
	if code, out := run(saturday, "", "impgate", "show", gid); code != 0 || !strings.Contains(out, "age        17h") || !strings.Contains(out, "left 30h") || !strings.Contains(out, "older than its executor's confirm_after") {
		t.Errorf("show on Saturday: %d %s", code, out)
	}
	if code, out := run(saturday, "", "impgate", "approve", gid); code != 1 || !strings.Contains(out, "--old") || !strings.Contains(out, "was filed 17h ago") {
		t.Errorf("approve from a script on Saturday without --old: %d %s; want exit 1 naming --old", code, out)
	}
	if g, _ := gate.Get(s.y, gid); g.State != state.Filed || g.Approval != nil {
		t.Fatalf("after the refused approval: %s", g.State)
	}

	// Sunday, 5 hours before the deadline: the reminder is due.
	sunday := friday.Add(43 * time.Hour)
	stop := s.impexecAt(t, at(sunday))
	waitFor(t, "the gate-expiring notification", func() bool {
		b, _ := os.ReadFile(received)
		return strings.Contains(string(b), `"event":"gate-expiring"`)
	})
	stop()
	if g, _ := gate.Get(s.y, gid); g.State != state.Filed || g.Reminded == nil {
		t.Fatalf("on Sunday: %s, reminded %v", g.State, g.Reminded)
	}

	// Monday: everything was down over the deadline.
	monday := friday.Add(64 * time.Hour)
	stop = s.impexecAt(t, at(monday))
	waitFor(t, "the gate to expire", func() bool {
		g, err := gate.Get(s.y, gid)
		return err == nil && g.State == state.Expired
	})
	stop()
	g, _ := gate.Get(s.y, gid)
	if h := g.History[len(g.History)-1]; h.By != gate.ExpiredBy || h.Actor != "impexec" || !h.At.After(friday.Add(48*time.Hour)) {
		t.Errorf("expiry recorded as %+v", h)
	}
	journal, _ := os.ReadFile(s.y.Path("journal", "yuko", "events.jsonl"))
	audit, _ := os.ReadFile(s.y.Path("runs", "decisions.jsonl"))
	for name, b := range map[string][]byte{"journal": journal, "audit log": audit} {
		if n := bytes.Count(b, []byte(`"event":"gate-expired"`)); n != 1 {
			t.Errorf("%s holds gate-expired %d times, want once", name, n)
		}
	}
	b, _ := os.ReadFile(received)
	if n := strings.Count(string(b), `"event":"gate-expiring"`); n != 1 {
		t.Errorf("the owner was reminded %d times, want once: %s", n, b)
	}
	if tk, _ := queue.Get(s.y, task); tk.State != state.NeedsReview {
		t.Errorf("the task is %s, want in review", tk.State)
	}
	for _, args := range [][]string{{"impgate", "approve", gid}, {"impgate", "approve", "--old", gid}} {
		if code, out := run(monday, "", args...); code != 1 || !strings.Contains(out, "expired undecided") {
			t.Errorf("%v on Monday: %d %s; want exit 1 saying it expired", args, code, out)
		}
	}
	if code, out := run(monday, "", "impexec", "once", gid); sent() != 0 {
		t.Errorf("impexec once: %d %s; the mail API saw %d requests", code, out, sent())
	}
	if g, _ := gate.Get(s.y, gid); g.State != state.Expired || g.Approval != nil {
		t.Errorf("after the approvals on Monday: %s", g.State)
	}
	if code, out := run(monday, "", "impgate", "ls", "--all"); code != 0 || !strings.Contains(out, gid) || !strings.Contains(out, "expired") {
		t.Errorf("ls --all: %d %s", code, out)
	}
	// The owner, having reviewed it, closes the task.
	if code, out := run(monday, "", "impq", "cancel", "--reason", "reviewed: the mail is stale", task); code != 0 || !strings.Contains(out, "cancelled") {
		t.Errorf("impq cancel of the task in review: %d %s", code, out)
	}
	if tk, _ := queue.Get(s.y, task); tk.State != state.Cancelled || tk.Reason != "reviewed: the mail is stale" {
		t.Errorf("after impq cancel the task is %s (%s)", tk.State, tk.Reason)
	}
}

// impexecAt starts impexec run from crashBin with env and returns what
// stops it (and waits for it), as the test's end also does.
func (s *spine) impexecAt(t *testing.T, env []string) (stop func()) {
	t.Helper()
	cmd := exec.Command(filepath.Join(crashBin, "impexec"), "run", "--rescan", "1h")
	cmd.Env = append(os.Environ(), env...)
	var errOut bytes.Buffer
	cmd.Stderr = &errOut
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { cmd.Wait(); close(done) }()
	stopped := false
	stop = func() {
		if stopped {
			return
		}
		stopped = true
		cmd.Process.Signal(os.Interrupt)
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			cmd.Process.Kill()
			<-done
		}
		if t.Failed() {
			t.Logf("impexec stderr:\n%s", errOut.String())
		}
	}
	t.Cleanup(stop)
	return stop
}
