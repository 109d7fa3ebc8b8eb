package tests

import (
	"encoding/json"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/impyard/impyard/lib/gate"
	runrec "github.com/impyard/impyard/lib/run"
	"github.com/impyard/impyard/lib/state"
)

// teller prints its brief between BRIEF and END, then, for the task
// "wait", waits until the test leaves /work/go.
const teller = `echo BRIEF; cat /etc/impyard/brief.json; echo END; if [ "$1" = wait ]; then while [ ! -e /work/go ]; do sleep 0.05; done; fi`

// briefOf is the brief the box of task's last run printed.
func (b *boxYard) briefOf(t *testing.T, taskID string) (brief struct {
	Open     []struct{ ID string } `json:"open_gates"`
	Resolved []struct{ ID string } `json:"resolved_since_last_run"`
	Mailbox  []struct{ ID string } `json:"mailbox"`
}, log string) {
	t.Helper()
	log = b.printedBrief(t, taskID, &brief)
	return brief, log
}

// printedBrief decodes into v the brief the box of task's last run printed
// between BRIEF and END, and returns the box's log.
func (b *boxYard) printedBrief(t *testing.T, taskID string, v any) string {
	t.Helper()
	log := b.boxLog(t, b.task(t, taskID))
	_, rest, ok := strings.Cut(log, "BRIEF\n")
	body, _, ok2 := strings.Cut(rest, "END\n")
	if !ok || !ok2 {
		t.Fatalf("task %s printed no brief:\n%s", taskID, log)
	}
	if err := json.Unmarshal([]byte(body), v); err != nil {
		t.Fatalf("task %s: %v\n%s", taskID, err, body)
	}
	return log
}

func ids(list []struct{ ID string }) string {
	var out []string
	for _, x := range list {
		out = append(out, x.ID)
	}
	return strings.Join(out, " ")
}

// TestBriefTellsOnce: a message whose box failed to start reaches the next
// box that runs, and no later one; a gate decided while a box runs, after
// its brief was written, reaches the next box's brief, and no later one.
func TestBriefTellsOnce(t *testing.T) {
	b := newBoxYard(t)
	b.imp(t, "teller", map[string]string{"command": `["/nonexistent/imp"]`})
	out, err := b.run(t, "impq", "tell", "--imp", "teller", "skip the sports section")
	if err != nil {
		t.Fatalf("impq tell: %v %s", err, out)
	}
	msg := strings.TrimSpace(out)
	msgFile := b.y.Path("mailbox", "teller", msg+".json")
	broken := b.add(t, "teller", "never starts")
	b.once(t)
	if task := b.task(t, broken); task.State != state.Failed || !strings.Contains(task.Reason, "box did not start") {
		t.Fatalf("a box that cannot start: %s %q", task.State, task.Reason)
	}
	if m, _ := os.ReadFile(msgFile); strings.Contains(string(m), "delivered") {
		t.Fatalf("the message went to a box that never started:\n%s", m)
	}

	b.imp(t, "teller", map[string]string{"command": `["/bin/sh", "-c", ` + jsonString(teller) + `, "sh"]`})
	g, err := gate.File(b.y, gate.FileOptions{Imp: "teller", Intent: "email-send", Payload: []byte(`{"to":["x@ourco.com"]}`), By: "teller", Actor: "test"})
	if err != nil {
		t.Fatal(err)
	}
	first := b.add(t, "teller", "wait")
	done := make(chan string, 1)
	go func() { out, _ := b.run(t, "impsup", "once"); done <- out }()
	// Decide the gate once the box has printed its brief, while it runs.
	deadline := time.Now().Add(30 * time.Second)
	var runID string
	for {
		if task := b.task(t, first); len(task.Runs) > 0 {
			runID = task.Runs[0]
			if log, _ := os.ReadFile(runrec.Path(b.y, runID, "box.log")); strings.Contains(string(log), "END\n") {
				break
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("the first box did not print its brief")
		}
		time.Sleep(20 * time.Millisecond)
	}
	if out, err := b.run(t, "impgate", "deny", "--reason", "not now", g.ID); err != nil {
		t.Fatalf("deny: %v %s", err, out)
	}
	if err := os.WriteFile(runrec.Path(b.y, runID, "work", "go"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	out = <-done
	if task := b.task(t, first); task.State != state.Done {
		t.Fatalf("first task %s (%s)\n%s", task.State, task.Reason, out)
	}
	brief, _ := b.briefOf(t, first)
	if ids(brief.Mailbox) != msg || ids(brief.Open) != g.ID || len(brief.Resolved) != 0 {
		t.Errorf("first brief: mailbox %q, open %q, resolved %q; want the message and the gate open", ids(brief.Mailbox), ids(brief.Open), ids(brief.Resolved))
	}
	if m, _ := os.ReadFile(msgFile); !strings.Contains(string(m), `"delivered_to": "`+runID+`"`) {
		t.Errorf("message after the first box ran:\n%s", m)
	}

	second := b.add(t, "teller", "look")
	b.once(t)
	brief, log := b.briefOf(t, second)
	if ids(brief.Resolved) != g.ID || len(brief.Open) != 0 || len(brief.Mailbox) != 0 {
		t.Errorf("second brief: resolved %q, open %q, mailbox %q; want only the gate decided during the first run\n%s", ids(brief.Resolved), ids(brief.Open), ids(brief.Mailbox), log)
	}
	third := b.add(t, "teller", "look again")
	b.once(t)
	brief, log = b.briefOf(t, third)
	if len(brief.Resolved) != 0 || len(brief.Mailbox) != 0 {
		t.Errorf("third brief told again: resolved %q, mailbox %q\n%s", ids(brief.Resolved), ids(brief.Mailbox), log)
	}
}

func jsonString(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}
