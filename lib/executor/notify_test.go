package executor

import (
	"context"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/impyard/impyard/lib/config"
	"github.com/impyard/impyard/lib/event"
	"github.com/impyard/impyard/lib/gate"
	"github.com/impyard/impyard/lib/notify"
	"github.com/impyard/impyard/lib/queue"
	"github.com/impyard/impyard/lib/state"
	"github.com/impyard/impyard/lib/token"
)

const notifySecret = "re_live_notify_5ecret"

// notifyRunner is a runner whose org.toml has [notify] as given (with
// the rest of org), a secret in IMPYARD_HOME/secrets, and a command
// receiver script: each run appends its standard input as one line to
// received, and fails while the file fail holds a number above 0,
// counting it down.
func notifyRunner(t *testing.T, notifyTOML string) (r *Runner, received, fail string, logs *[]string) {
	t.Helper()
	dir := t.TempDir()
	received, fail = filepath.Join(dir, "received"), filepath.Join(dir, "fail")
	script := filepath.Join(dir, "receive")
	os.WriteFile(script, []byte(`#!/bin/sh
n=$(cat "`+fail+`" 2>/dev/null || echo 0)
if [ "$n" -gt 0 ]; then echo $((n-1)) > "`+fail+`"; echo "receiver down" >&2; exit 3; fi
cat >> "`+received+`"; echo >> "`+received+`"
`), 0o755)
	notifyTOML = strings.ReplaceAll(notifyTOML, "RECEIVE", script)
	r = setup(t, notifyTOML)
	logs = &[]string{}
	r.Logf = func(format string, a ...any) { *logs = append(*logs, fmt.Sprintf(format, a...)) }
	os.MkdirAll(filepath.Join(r.Home, "secrets"), 0o700)
	os.WriteFile(filepath.Join(r.Home, "secrets", "resend"), []byte(notifySecret+"\n"), 0o600)
	return r, received, fail, logs
}

func receivedMessages(t *testing.T, path string) []notify.Message {
	t.Helper()
	b, err := os.ReadFile(path)
	if os.IsNotExist(err) {
		return nil
	}
	var out []notify.Message
	for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		var m notify.Message
		if err := json.Unmarshal([]byte(line), &m); err != nil {
			t.Fatalf("the command got %q: %v", line, err)
		}
		out = append(out, m)
	}
	return out
}

func fileGate(t *testing.T, r *Runner, payload string) *gate.Gate {
	t.Helper()
	return fileGateWhy(t, r, payload, "weekly digest")
}

func fileGateWhy(t *testing.T, r *Runner, payload, rationale string) *gate.Gate {
	t.Helper()
	g, err := gate.File(r.Yard, gate.FileOptions{Imp: "yuko", Intent: "email-send", Payload: []byte(payload), Rationale: rationale, By: "yuko", Actor: "test"})
	if err != nil {
		t.Fatal(err)
	}
	return g
}

func TestNotifyCommandOncePerGate(t *testing.T) {
	r, received, _, _ := notifyRunner(t, "[notify]\ncommand = [\"RECEIVE\"]\n")
	g := fileGateWhy(t, r, `{"to":["team@ourco.com"],"subject":"Weekly digest","body":"key `+notifySecret+`"}`, "weekly digest, sent with "+notifySecret)
	for range 3 {
		if err := r.NotifyOnce(context.Background(), time.Now()); err != nil {
			t.Fatal(err)
		}
	}
	got := receivedMessages(t, received)
	if len(got) != 1 {
		t.Fatalf("the command ran %d times, want once: %+v", len(got), got)
	}
	m := got[0]
	if m.ID != g.ID+".1" || m.Event != notify.GateFiled || m.Gate != g.ID || m.Imp != "yuko" || m.Intent != "email-send" ||
		m.SHA256 != g.SHA256[:16] || m.Rationale != "weekly digest, sent with [redacted]" || m.Approve != "impgate approve --sha "+g.SHA256[:16]+" "+g.ID ||
		m.Summary != "body=key [redacted]; subject=Weekly digest; to=team@ourco.com" || m.Schema != "impyard.notification/1" {
		t.Errorf("message %+v", m)
	}
	b, _ := os.ReadFile(received)
	if strings.Contains(string(b), notifySecret) {
		t.Errorf("the notification carries the secret: %s", b)
	}
	if p, bad := notify.Pending(r.Yard); len(p) != 0 || len(bad) != 0 {
		t.Errorf("still pending: %v %v", p, bad)
	}
	if s, _ := notify.Sent(r.Yard); len(s) != 1 || strings.Join(s[0].Done, ",") != ByCommand {
		t.Errorf("sent %+v", s)
	}
}

func TestNotifyRetriesWithBackoff(t *testing.T) {
	r, received, fail, logs := notifyRunner(t, "[notify]\ncommand = [\"RECEIVE\"]\nbackoff = \"10s\"\n")
	os.WriteFile(fail, []byte("2"), 0o600)
	g := fileGate(t, r, `{"to":["team@ourco.com"]}`)
	now := time.Now().Truncate(time.Second)
	for i, at := range []time.Duration{0, 5 * time.Second, 10 * time.Second, 29 * time.Second, 30 * time.Second} {
		if err := r.NotifyOnce(context.Background(), now.Add(at)); err != nil {
			t.Fatal(err)
		}
		p, _ := notify.Pending(r.Yard)
		sent := len(receivedMessages(t, received))
		switch i {
		case 0, 1: // failed once; not yet due again
			if len(p) != 1 || p[0].Attempts != 1 || !strings.Contains(p[0].LastError, "receiver down") || p[0].Next.Before(now.Add(9*time.Second)) || sent != 0 {
				t.Fatalf("at +%v: %+v, %d sent", at, p, sent)
			}
		case 2, 3: // failed twice; the wait doubled
			if len(p) != 1 || p[0].Attempts != 2 || p[0].Next.Before(now.Add(29*time.Second)) || sent != 0 {
				t.Fatalf("at +%v: %+v, %d sent", at, p, sent)
			}
		case 4:
			if len(p) != 0 || sent != 1 {
				t.Fatalf("at +%v: %+v, %d sent", at, p, sent)
			}
		}
	}
	all := strings.Join(*logs, "\n")
	if !strings.Contains(all, "notification "+g.ID+".1: attempt 2 failed (command ") || !strings.Contains(all, "receiver down") || !strings.Contains(all, "notification "+g.ID+".1: gate-filed "+g.ID+" delivered (command)") {
		t.Errorf("logs:\n%s", all)
	}
}

// The owner hears only of what [notify] asks for, and never of a gate a
// trust rule approved as it was filed. An event [notify] did not ask for
// when it happened gets no entry; one it no longer asks for when the
// entry is delivered is dropped unsent.
// TestNotifyLinksToDesk: with [desk] url, a filed gate's notification
// carries the gate's page on the desk, in its link and its text; without
// it, none.
func TestNotifyLinksToDesk(t *testing.T) {
	for _, tc := range []struct{ toml, want string }{
		{"[desk]\nurl = \"https://desk.example.com/\"\n", "https://desk.example.com/g/"},
		{"", ""},
	} {
		r, received, _, _ := notifyRunner(t, "[notify]\ncommand = [\"RECEIVE\"]\n"+tc.toml)
		g := fileGate(t, r, `{"to":["team@ourco.com"],"subject":"Weekly digest","body":"hi"}`)
		if err := r.NotifyOnce(context.Background(), time.Now()); err != nil {
			t.Fatal(err)
		}
		got := receivedMessages(t, received)
		if len(got) != 1 {
			t.Fatalf("%d messages", len(got))
		}
		want := ""
		if tc.want != "" {
			want = tc.want + g.ID
		}
		if got[0].Link != want || want != "" && !strings.Contains(got[0].Text, "\nopen: "+want+"\n") || want == "" && strings.Contains(got[0].Text, "open:") {
			t.Errorf("with %q: link %q, text %q; want %q", tc.toml, got[0].Link, got[0].Text, want)
		}
	}
}

func TestNotifyDropsWhatIsNotAsked(t *testing.T) {
	r, received, _, _ := notifyRunner(t, "[notify]\ncommand = [\"RECEIVE\"]\n")
	fileGate(t, r, `{"to":["a@ourco.com"]}`)
	if p, _ := notify.Pending(r.Yard); len(p) != 1 {
		t.Fatalf("gate-filed asked for: pending %+v", p)
	}
	b, _ := os.ReadFile(r.Yard.Path("org.toml"))
	os.WriteFile(r.Yard.Path("org.toml"), []byte(strings.Replace(string(b), "[notify]\n", "[notify]\non = [\"task-failed\"]\n", 1)), 0o640)
	fileGate(t, r, `{"to":["b@ourco.com"]}`)
	if p, _ := notify.Pending(r.Yard); len(p) != 1 {
		t.Fatalf("an entry written for a gate-filed no longer asked for: pending %+v", p)
	}
	tid, _, err := queue.Add(r.Yard, queue.AddOptions{Imp: "yuko", Text: "draft the\n weekly digest"})
	if err != nil {
		t.Fatal(err)
	}
	for _, to := range []string{state.Running, state.Failed} {
		if _, err := queue.Move(r.Yard, tid, queue.Change{To: to, By: "impsup", Actor: "impsup", Why: "box exited 1: out of memory"}); err != nil {
			t.Fatal(err)
		}
	}
	if err := r.NotifyOnce(context.Background(), time.Now()); err != nil {
		t.Fatal(err)
	}
	got := receivedMessages(t, received)
	if len(got) != 1 || got[0].Event != notify.TaskFailed || got[0].Task != tid || got[0].ID != tid+".3" ||
		got[0].Reason != "box exited 1: out of memory" || got[0].Summary != "draft the weekly digest" || got[0].Gate != "" || got[0].Approve != "" {
		t.Fatalf("got %+v", got)
	}
	if p, _ := notify.Pending(r.Yard); len(p) != 0 {
		t.Fatalf("the gate-filed entry is still pending: %+v", p)
	}
	if s, _ := notify.Sent(r.Yard); len(s) != 1 {
		t.Fatalf("a dropped entry counts as sent: %+v", s)
	}
}

func TestNotifyAutoApprovedIsNotTold(t *testing.T) {
	r, received, _, _ := notifyRunner(t, "[notify]\ncommand = [\"RECEIVE\"]\n")
	g, err := gate.File(r.Yard, gate.FileOptions{Imp: "yuko", Intent: "email-send", Payload: []byte(`{}`), By: "yuko", Actor: "test",
		Trust: &gate.Trust{Level: "auto", Entry: "org.toml [[trust]] #1", Why: "matched"}})
	if err != nil {
		t.Fatal(err)
	}
	if err := r.NotifyOnce(context.Background(), time.Now()); err != nil {
		t.Fatal(err)
	}
	if got := receivedMessages(t, received); len(got) != 0 {
		t.Fatalf("told of auto-approved %s: %+v", g.ID, got)
	}
	if p, _ := notify.Pending(r.Yard); len(p) != 0 {
		t.Fatalf("pending %+v", p)
	}
}

// With org.toml broken nothing is sent and nothing is dropped.
func TestNotifyBrokenConfigWaits(t *testing.T) {
	r, received, _, _ := notifyRunner(t, "[notify]\ncommand = [\"RECEIVE\"]\n")
	fileGate(t, r, `{}`)
	os.WriteFile(r.Yard.Path("org.toml"), []byte("[notify]\nformat = \"teams\"\n"), 0o640)
	err := r.NotifyOnce(context.Background(), time.Now())
	if err == nil || !strings.Contains(err.Error(), `notifications wait: `) || !strings.Contains(err.Error(), `unknown format "teams"`) {
		t.Fatalf("err %v", err)
	}
	if p, _ := notify.Pending(r.Yard); len(p) != 1 || p[0].Attempts != 0 {
		t.Fatalf("pending %+v", p)
	}
	if got := receivedMessages(t, received); len(got) != 0 {
		t.Fatalf("sent %+v", got)
	}
}

// A broken org.toml is logged once per change, not once a poll: three
// passes under one error say it once, a different error is said again,
// and the fix is said once; the entry waits through it all and then goes.
func TestNotifyBrokenConfigLoggedOnce(t *testing.T) {
	r, received, _, logs := notifyRunner(t, "[notify]\ncommand = [\"RECEIVE\"]\n")
	good, err := os.ReadFile(r.Yard.Path("org.toml"))
	if err != nil {
		t.Fatal(err)
	}
	fileGate(t, r, `{}`)
	ctx := context.Background()
	os.WriteFile(r.Yard.Path("org.toml"), []byte("[notify]\nformat = \"teams\"\n"), 0o640)
	told := ""
	for range 3 {
		told = r.notifyPass(ctx, told)
	}
	os.WriteFile(r.Yard.Path("org.toml"), []byte("[notify]\nformat = \"matrix\"\n"), 0o640)
	for range 2 {
		told = r.notifyPass(ctx, told)
	}
	os.WriteFile(r.Yard.Path("org.toml"), good, 0o640)
	for range 2 {
		told = r.notifyPass(ctx, told)
	}
	var said []string
	for _, l := range *logs {
		if strings.HasPrefix(l, "notify: ") {
			said = append(said, l)
		}
	}
	if len(said) != 3 || !strings.Contains(said[0], `unknown format "teams"`) || !strings.Contains(said[1], `unknown format "matrix"`) ||
		said[2] != "notify: notifications go on" {
		t.Fatalf("logged %d lines, want 3 (teams, matrix, go on):\n%s", len(said), strings.Join(*logs, "\n"))
	}
	if told != "" {
		t.Errorf("told %q after the fix", told)
	}
	if got := receivedMessages(t, received); len(got) != 1 {
		t.Fatalf("after the fix %d messages were sent, want 1", len(got))
	}
}

// A secret that cannot be read to be kept out holds the notification.
func TestNotifyUnreadableSecretHolds(t *testing.T) {
	r, received, _, _ := notifyRunner(t, "[notify]\ncommand = [\"RECEIVE\"]\n")
	fileGate(t, r, `{}`)
	os.Mkdir(filepath.Join(r.Home, "secrets", "a-directory"), 0o700)
	if err := r.NotifyOnce(context.Background(), time.Now()); err != nil {
		t.Fatal(err)
	}
	p, _ := notify.Pending(r.Yard)
	if len(p) != 1 || !strings.Contains(p[0].LastError, "its secrets could not all be read") || !strings.Contains(p[0].LastError, "a-directory") {
		t.Fatalf("pending %+v", p)
	}
	if got := receivedMessages(t, received); len(got) != 0 {
		t.Fatalf("sent %+v", got)
	}
}

// The webhook goes through the gateway as org, in the configured format,
// with the notification id in a header; a failing webhook is retried
// alone once the command has it.
func TestNotifyWebhookThroughGateway(t *testing.T) {
	u := newUpstream(t, statuses(http.StatusBadGateway, http.StatusNoContent))
	gw := newGateway(t, false)
	hook := u.srv.URL + "/hook/T0KEN-in-the-url"
	r, received, _, _ := notifyRunner(t, fmt.Sprintf("[gateway]\nlisten = %q\n[notify]\ncommand = [\"RECEIVE\"]\nwebhook = %q\nformat = \"slack\"\nbackoff = \"1s\"\n", gw.listen(), hook))
	writeCA(t, r.Home, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: u.srv.Certificate().Raw}))
	g := fileGate(t, r, `{"to":["a@ourco.com"],"body":"see `+hook+`"}`)
	now := time.Now()
	for _, at := range []time.Duration{0, 2 * time.Second, 4 * time.Second} {
		if err := r.NotifyOnce(context.Background(), now.Add(at)); err != nil {
			t.Fatal(err)
		}
	}
	reqs := u.requests()
	if len(reqs) != 2 {
		t.Fatalf("%d webhook requests, want 2 (a 502, then delivered)", len(reqs))
	}
	if got := receivedMessages(t, received); len(got) != 1 {
		t.Fatalf("the command ran %d times, want once", len(got))
	}
	for _, q := range reqs {
		var body struct {
			Text   string `json:"text"`
			Mrkdwn bool   `json:"mrkdwn"`
		}
		if err := json.Unmarshal([]byte(q.body), &body); err != nil || q.path != "/hook/T0KEN-in-the-url" || q.method != http.MethodPost {
			t.Fatalf("request %+v: %v", q, err)
		}
		if !strings.HasPrefix(body.Text, "yuko wants email-send: gate "+g.ID+" waits\n") || !strings.HasSuffix(body.Text, "\nid: "+g.ID+".1") ||
			strings.Contains(body.Text, "T0KEN") || q.header.Get(notify.Header) != g.ID+".1" || q.header.Get(IdempotencyKey) != g.ID+".1" {
			t.Fatalf("request %+v", q)
		}
	}
	tok, _ := token.OrgToken(r.Home)
	for _, a := range gw.credentials() {
		if a == "" || !strings.HasPrefix(a, "Basic ") {
			t.Fatalf("proxy credentials %q, want the org token (%d chars)", a, len(tok))
		}
	}
	s, _ := notify.Sent(r.Yard)
	if len(s) != 1 || strings.Join(s[0].Done, ",") != "command,webhook" || s[0].Attempts != 1 {
		t.Fatalf("sent %+v", s)
	}
}

// A gateway that refuses the webhook is a failure the owner sees, naming
// the decision, and never the webhook's address.
func TestNotifyWebhookRefused(t *testing.T) {
	u := newUpstream(t, statuses(http.StatusOK))
	gw := newGateway(t, true)
	hook := u.srv.URL + "/hook/T0KEN"
	r, _, _, _ := notifyRunner(t, fmt.Sprintf("[gateway]\nlisten = %q\n[notify]\nwebhook = %q\n", gw.listen(), hook))
	fileGate(t, r, `{}`)
	if err := r.NotifyOnce(context.Background(), time.Now()); err != nil {
		t.Fatal(err)
	}
	p, _ := notify.Pending(r.Yard)
	if len(p) != 1 || !strings.Contains(p[0].LastError, "webhook: the gateway refused to connect to 127.0.0.1") || !strings.Contains(p[0].LastError, "decision d-test") ||
		strings.Contains(p[0].LastError, "T0KEN") {
		t.Fatalf("pending %+v", p)
	}
	if len(u.requests()) != 0 {
		t.Fatal("the upstream was reached")
	}
}

func TestNotifyTaskNeedsReview(t *testing.T) {
	r, received, _, _ := notifyRunner(t, "[notify]\non = [\"task-needs-review\"]\ncommand = [\"RECEIVE\"]\n")
	tid, _, err := queue.Add(r.Yard, queue.AddOptions{Imp: "rex", Text: "fix the build"})
	if err != nil {
		t.Fatal(err)
	}
	for _, to := range []string{state.Running, state.NeedsReview, state.Failed} {
		if _, err := queue.Move(r.Yard, tid, queue.Change{To: to, By: "impsup", Actor: "impsup", Why: "to " + to}); err != nil {
			t.Fatal(err)
		}
	}
	if err := r.NotifyOnce(context.Background(), time.Now()); err != nil {
		t.Fatal(err)
	}
	got := receivedMessages(t, received)
	if len(got) != 1 || got[0].Event != notify.TaskNeedsReview || got[0].ID != tid+".3" || got[0].Imp != "rex" || got[0].Reason != "to needs-review" ||
		!strings.HasPrefix(got[0].Text, "task "+tid+" of rex needs review\nreason: to needs-review\ntask: fix the build\n") {
		t.Fatalf("got %+v", got)
	}
}

// Of two deliverers one sends: while another holds an entry's send lock
// it is left alone.
func TestNotifyClaimedElsewhereIsLeft(t *testing.T) {
	r, received, _, _ := notifyRunner(t, "[notify]\ncommand = [\"RECEIVE\"]\n")
	g := fileGate(t, r, `{}`)
	release, ok, err := notify.Claim(r.Yard, g.ID+".1")
	if err != nil || !ok {
		t.Fatal(ok, err)
	}
	if err := r.NotifyOnce(context.Background(), time.Now()); err != nil {
		t.Fatal(err)
	}
	if got := receivedMessages(t, received); len(got) != 0 {
		t.Fatalf("sent while claimed: %+v", got)
	}
	release()
	if err := r.NotifyOnce(context.Background(), time.Now()); err != nil {
		t.Fatal(err)
	}
	if got := receivedMessages(t, received); len(got) != 1 {
		t.Fatalf("sent %d after release, want 1", len(got))
	}
}

// TestNotifyEarnedTrustRemoved: trust taken back by a deny is told to
// every receiver, whatever on names, with the denied gate and what
// changed, and never its approve line.
func TestNotifyEarnedTrustRemoved(t *testing.T) {
	r, received, _, _ := notifyRunner(t, "[notify]\non = [\"task-failed\"]\ncommand = [\"RECEIVE\"]\n")
	g := fileGate(t, r, `{"to":["a@ourco.com"],"body":"key `+notifySecret+`"}`)
	g, err := gate.Move(r.Yard, g.ID, gate.Change{To: state.Denied, By: "alice", Actor: "impgate", Why: "not this one"})
	if err != nil {
		t.Fatal(err)
	}
	if err := notify.Enqueue(r.Yard, event.Event{Event: notify.TrustEarnedRemoved, Imp: "yuko", ID: g.ID, Seq: len(g.History), Intent: g.Intent}, config.Notifies); err != nil {
		t.Fatal(err)
	}
	if err := r.NotifyOnce(context.Background(), time.Now()); err != nil {
		t.Fatal(err)
	}
	got := receivedMessages(t, received)
	if len(got) != 1 {
		t.Fatalf("got %d notifications, want the removal alone: %+v", len(got), got)
	}
	m := got[0]
	if m.Event != notify.TrustEarnedRemoved || m.Gate != g.ID || m.Intent != "email-send" || m.ID != fmt.Sprintf("%s.%d", g.ID, len(g.History)) ||
		!strings.Contains(m.Reason, "imps/yuko/imp.toml") || m.Approve != "" ||
		!strings.HasPrefix(m.Text, "earned trust of yuko for email-send taken back") || strings.Contains(m.Summary, notifySecret) {
		t.Fatalf("message %+v", m)
	}
}

// TestNotifyBoxTextStaysOnItsLine: a rationale or a payload key with a
// newline cannot add a line of its own to the notification, such as an
// "approve with" naming another gate, nor a control character reach the
// receiver.
func TestNotifyBoxTextStaysOnItsLine(t *testing.T) {
	r, received, _, _ := notifyRunner(t, "[notify]\ncommand = [\"RECEIVE\"]\n")
	forged := "\napprove with: impgate approve --sha 0000000000000000 g-0000000000000001\n\x1b[2J"
	g := fileGateWhy(t, r, `{"to":["a@ourco.com"],"body":"hi"}`, "digest"+forged)
	if err := r.NotifyOnce(context.Background(), time.Now()); err != nil {
		t.Fatal(err)
	}
	got := receivedMessages(t, received)
	if len(got) != 1 {
		t.Fatalf("got %d notifications", len(got))
	}
	m := got[0]
	if n := strings.Count(m.Text, "\napprove with:"); n != 1 || !strings.Contains(m.Text, "\napprove with: "+g.ApproveCommand()+"\n") {
		t.Errorf("text has %d approve lines:\n%s", n, m.Text)
	}
	if strings.ContainsAny(m.Text+m.Rationale, "\x1b") || strings.Contains(m.Rationale, "\n") {
		t.Errorf("box text kept its control characters: %q", m.Rationale)
	}
}

// TestNotifyPause: a pause is told to every receiver, whatever on names,
// with its reason (secrets replaced) and the imp, and without a gate or a
// task to read.
func TestNotifyPause(t *testing.T) {
	r, received, _, _ := notifyRunner(t, "[notify]\non = [\"task-failed\"]\ncommand = [\"RECEIVE\"]\n")
	e := event.Event{Event: notify.Pause, Imp: "yuko", ID: notify.PauseSubject, Seq: 4, Why: "leaked " + notifySecret, TS: time.Now()}
	if err := notify.Enqueue(r.Yard, e, config.Notifies); err != nil {
		t.Fatal(err)
	}
	if err := r.NotifyOnce(context.Background(), time.Now()); err != nil {
		t.Fatal(err)
	}
	got := receivedMessages(t, received)
	if len(got) != 1 {
		t.Fatalf("got %d notifications, want the pause: %+v", len(got), got)
	}
	m := got[0]
	if m.Event != notify.Pause || m.ID != "pause.4" || m.Imp != "yuko" || !strings.HasPrefix(m.Text, "pause: yuko") ||
		!strings.Contains(m.Reason, "leaked") || strings.Contains(m.Reason, notifySecret) {
		t.Fatalf("message %+v", m)
	}
}

// The gates one imp files are told at most once per [notify] coalesce
// (default 1m): those pending at a pass go out in one message naming how
// many and which; those filed within the window of the last wait for its
// end and go together; another imp's gates are not held by it; a lone
// gate after a quiet spell is told at once, as itself.
func TestNotifyCoalescesGates(t *testing.T) {
	r, received, _, _ := notifyRunner(t, "[notify]\ncommand = [\"RECEIVE\"]\n")
	now := time.Now()
	pass := func(at time.Duration) {
		t.Helper()
		if err := r.NotifyOnce(context.Background(), now.Add(at)); err != nil {
			t.Fatal(err)
		}
	}
	file := func(n int) (ids []string) {
		for i := range n {
			ids = append(ids, fileGate(t, r, fmt.Sprintf(`{"to":["x@elsewhere.com"],"subject":"s%d"}`, i)).ID)
		}
		return ids
	}
	first := file(3)
	pass(0)
	got := receivedMessages(t, received)
	if len(got) != 1 || got[0].Count != 3 || strings.Join(got[0].Gates, " ") != strings.Join(first, " ") || got[0].ID != first[0]+".1+2" ||
		!strings.HasPrefix(got[0].Text, "yuko filed 3 gates that wait: "+strings.Join(first, ", ")) || !strings.Contains(got[0].Summary, first[2]+" email-send (subject=s2; to=x@elsewhere.com)") {
		t.Fatalf("three gates at once: %+v", got)
	}
	second := file(2)
	rex, err := gate.File(r.Yard, gate.FileOptions{Imp: "rex", Intent: "email-send", Payload: []byte(`{"to":["x@elsewhere.com"]}`), By: "rex", Actor: "test"})
	if err != nil {
		t.Fatal(err)
	}
	pass(10 * time.Second)
	if got = receivedMessages(t, received); len(got) != 2 || got[1].Gate != rex.ID {
		t.Fatalf("10s later: %+v, want rex's gate told and yuko's held", got)
	}
	pass(61 * time.Second)
	if got = receivedMessages(t, received); len(got) != 3 || got[2].Count != 2 || strings.Join(got[2].Gates, " ") != strings.Join(second, " ") {
		t.Fatalf("after the window: %+v", got)
	}
	lone := file(1)
	pass(62 * time.Second)
	if got = receivedMessages(t, received); len(got) != 3 {
		t.Fatalf("a gate within the window was told at once: %+v", got)
	}
	pass(125 * time.Second)
	if got = receivedMessages(t, received); len(got) != 4 || got[3].Gate != lone[0] || got[3].Count != 0 || got[3].ID != lone[0]+".1" {
		t.Fatalf("a lone gate: %+v", got)
	}
	if p, _ := notify.Pending(r.Yard); len(p) != 0 {
		t.Errorf("still pending: %+v", p)
	}
}
