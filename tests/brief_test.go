package tests

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
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

// onceUntil runs impsup once in the background and returns, with the
// channel its output will come on, once the box of taskID's first run has
// printed mark: the box is running then.
func (b *boxYard) onceUntil(t *testing.T, taskID, mark string) (done chan string, runID string) {
	t.Helper()
	done = make(chan string, 1)
	go func() { out, _ := b.run(t, "impsup", "once"); done <- out }()
	deadline := time.Now().Add(30 * time.Second)
	for {
		if task := b.task(t, taskID); len(task.Runs) > 0 {
			runID = task.Runs[0]
			if log, _ := os.ReadFile(runrec.Path(b.y, runID, "box.log")); strings.Contains(string(log), mark) {
				return done, runID
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("the box of task %s did not print %q", taskID, mark)
		}
		time.Sleep(20 * time.Millisecond)
	}
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
	// Decide the gate once the box has printed its brief, while it runs.
	done, runID := b.onceUntil(t, first, "END\n")
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

// poller prints its brief, polls its mailbox once with pollCmd, waits
// until the test leaves /work/go, then polls twice more: an agent's turn
// boundaries.
const poller = `echo BRIEF; cat /etc/impyard/brief.json; echo END
poll() { echo "POLL $1"; %s; echo; echo "POLLED $1"; }
poll 1
while [ ! -e /work/go ]; do sleep 0.05; done
poll 2
poll 3`

// manDisplay is the literal display of a man page that holds want, as sh
// reads it.
func manDisplay(t *testing.T, page, want string) string {
	t.Helper()
	b, err := os.ReadFile(page)
	if err != nil {
		t.Fatal(err)
	}
	var block []string
	literal := false
	for _, line := range strings.Split(string(b), "\n") {
		switch {
		case strings.HasPrefix(line, ".Bd -literal"):
			literal, block = true, nil
		case strings.HasPrefix(line, ".Ed"):
			if literal && strings.Contains(strings.Join(block, "\n"), want) {
				return strings.Join(block, "\n")
			}
			literal = false
		case literal:
			block = append(block, unroff(line))
		}
	}
	t.Fatalf("%s has no display with %q", page, want)
	return ""
}

// polled is what poll n of log's box got from /v1/mailbox.
func polled(t *testing.T, log string, n int) string {
	t.Helper()
	_, rest, ok := strings.Cut(log, fmt.Sprintf("POLL %d\n", n))
	body, _, ok2 := strings.Cut(rest, fmt.Sprintf("POLLED %d\n", n))
	var got struct {
		Messages []struct {
			ID          string `json:"id"`
			DeliveredTo string `json:"delivered_to"`
		} `json:"messages"`
	}
	if !ok || !ok2 || json.Unmarshal([]byte(body), &got) != nil {
		t.Fatalf("poll %d printed no answer:\n%s", n, log)
	}
	var out []string
	for _, m := range got.Messages {
		out = append(out, m.ID+"@"+m.DeliveredTo)
	}
	return strings.Join(out, " ")
}

// TestMailboxReachesRunningBox: a message told while a box runs reaches
// its next poll of /v1/mailbox (the command of impgw(8)), marked delivered
// to its run, and no later poll; the brief still carries what waited at
// start, which no poll repeats; another imp's message reaches no poll of
// this box.
func TestMailboxReachesRunningBox(t *testing.T) {
	b := newBoxYard(t)
	// The box polls as impgw(8) shows; its busybox has wget, not curl.
	poll := manDisplay(t, "../man/impgw.8", "wget -Y off")
	b.imp(t, "poller", map[string]string{"command": `["/bin/sh", "-c", ` + jsonString(fmt.Sprintf(poller, poll)) + `, "sh"]`})
	tell := func(imp, text string) (string, string) {
		out, err := b.run(t, "impq", "tell", "--imp", imp, text)
		if err != nil {
			t.Fatalf("impq tell: %v %s", err, out)
		}
		msg := strings.TrimSpace(out)
		return msg, b.y.Path("mailbox", imp, msg+".json")
	}
	early, earlyFile := tell("poller", "read the brief first")
	taskID := b.add(t, "poller", "wait")
	done, runID := b.onceUntil(t, taskID, "POLLED 1\n")
	live, liveFile := tell("poller", "skip the sports section")
	_, otherFile := tell("other", "for another imp")
	if err := os.WriteFile(runrec.Path(b.y, runID, "work", "go"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	out := <-done
	if task := b.task(t, taskID); task.State != state.Done {
		t.Fatalf("task %s (%s)\n%s", task.State, task.Reason, out)
	}
	brief, log := b.briefOf(t, taskID)
	if ids(brief.Mailbox) != early {
		t.Errorf("brief mailbox %q, want the message that waited at start, %s", ids(brief.Mailbox), early)
	}
	if got := polled(t, log, 1); got != "" {
		t.Errorf("first poll got %q; the brief's message is not news", got)
	}
	if got, want := polled(t, log, 2), live+"@"+runID; got != want {
		t.Errorf("poll after impq tell got %q, want %q\n%s", got, want, log)
	}
	if got := polled(t, log, 3); got != "" {
		t.Errorf("a second poll got %q again", got)
	}
	for file, want := range map[string]string{earlyFile: runID, liveFile: runID, otherFile: ""} {
		m, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		if marked := strings.Contains(string(m), `"delivered_to": "`+runID+`"`); marked != (want != "") || (want == "" && strings.Contains(string(m), "delivered")) {
			t.Errorf("%s after the run, want delivered to %q:\n%s", file, want, m)
		}
	}
	// The gateway asks for a token before anything else.
	for _, tok := range []string{"", "not-a-token"} {
		req, _ := http.NewRequest("GET", "http://"+b.listen+"/v1/mailbox", nil)
		if tok != "" {
			req.Header.Set("Authorization", "Bearer "+tok)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusUnauthorized || !strings.Contains(string(body), "token") {
			t.Errorf("GET /v1/mailbox with token %q: %d %s", tok, resp.StatusCode, body)
		}
	}
	if m, _ := os.ReadFile(otherFile); strings.Contains(string(m), "delivered") {
		t.Errorf("another imp's message was delivered:\n%s", m)
	}
}
