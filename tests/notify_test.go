package tests

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/impyard/impyard/lib/notify"
)

const webhookSecret = "ntfy_tk_hook_5ecret_injected"

// hookAPI is a chat webhook on loopback HTTPS: it answers 503 while fail
// is above 0, counting it down, and records every request.
type hookAPI struct {
	srv  *httptest.Server
	mu   sync.Mutex
	fail int
	reqs []hookRequest
}

type hookRequest struct {
	at     time.Time
	status int
	body   string
	header http.Header
}

func newHookAPI(t testing.TB) *hookAPI {
	h := &hookAPI{}
	h.srv = httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		h.mu.Lock()
		defer h.mu.Unlock()
		status := http.StatusOK
		if h.fail > 0 {
			h.fail--
			status = http.StatusServiceUnavailable
		}
		h.reqs = append(h.reqs, hookRequest{time.Now(), status, string(b), r.Header.Clone()})
		w.WriteHeader(status)
		fmt.Fprintf(w, "answer %d", status)
	}))
	t.Cleanup(h.srv.Close)
	return h
}

// delivered are the bodies the webhook took, by notification id.
func (h *hookAPI) delivered() map[string][]hookRequest {
	h.mu.Lock()
	defer h.mu.Unlock()
	out := map[string][]hookRequest{}
	for _, r := range h.reqs {
		if r.status == http.StatusOK {
			id := r.header.Get(notify.Header)
			out[id] = append(out[id], r)
		}
	}
	return out
}

func (h *hookAPI) requests() []hookRequest {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]hookRequest(nil), h.reqs...)
}

// notifySpine is a spine whose org.toml asks for notifications of filed
// gates by a command, which appends each to a file, and by a webhook on
// loopback that the gateway reaches as org, injecting a secret of its own.
func notifySpine(t *testing.T) (s *spine, hook *hookAPI, received string) {
	s = newSpine(t, true, bin)
	hook = newHookAPI(t)
	os.WriteFile(filepath.Join(s.home, "secrets", "hook"), []byte(webhookSecret+"\n"), 0o600)
	policy, err := os.ReadFile(s.y.PolicyPath())
	if err != nil {
		t.Fatal(err)
	}
	rule := `{"name":"notify","match":{"protocol":"https","host":"127.0.0.1","method":"POST","pathPrefix":"/hook","subject":"org","network":"127.0.0.0/8"},
	  "verdict":"allow","inject":{"header":"authorization","secret":"hook","format":"Bearer %s"}},`
	os.WriteFile(s.y.PolicyPath(), []byte(strings.Replace(string(policy), `"rules":[`, `"rules":[`+rule, 1)), 0o640)
	dir := t.TempDir()
	received = filepath.Join(dir, "received")
	script := filepath.Join(dir, "receive")
	os.WriteFile(script, []byte("#!/bin/sh\n{ cat; echo; } >> "+received+"\n"), 0o755)
	f, err := os.OpenFile(s.y.Path("org.toml"), os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	fmt.Fprintf(f, "[notify]\ncommand = [%q]\nwebhook = %q\nformat = \"json\"\nbackoff = \"1s\"\n# Each gate told as it is filed: the test follows one at a time.\ncoalesce = \"1ms\"\n", script, hook.srv.URL+"/hook/yard")
	f.Close()
	return s, hook, received
}

// commandGot are the notifications the command received, by id.
func commandGot(t *testing.T, path string) map[string]int {
	t.Helper()
	out := map[string]int{}
	b, err := os.ReadFile(path)
	if os.IsNotExist(err) {
		return out
	}
	for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		var m notify.Message
		if err := json.Unmarshal([]byte(line), &m); err != nil {
			t.Fatalf("the command got %q: %v", line, err)
		}
		out[m.ID]++
	}
	return out
}

func waitFor(t *testing.T, what string, ok func() bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !ok() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func (s *spine) fileForNotice(t *testing.T, tok, subject string) string {
	t.Helper()
	code, out, _ := s.propose(t, tok, `{"intent":"email-send","payload":{"to":["boss@elsewhere.com"],"subject":`+jsonString(subject)+`,"body":"the key is `+secret+`"},"rationale":"asked for `+webhookSecret+`","run_id":"r-0000000000000001"}`)
	if code != http.StatusAccepted || out["status"] != "pending" {
		t.Fatalf("gated envelope: %d %v", code, out)
	}
	return out["gate_id"].(string)
}

// TestNotifyNoReceiver: in a yard whose org.toml names no receiver, a
// gate filed through the gateway writes no outbox entry; once the owner
// adds one, the same gateway process sees the changed file and the next
// gate's entry is written.
func TestNotifyNoReceiver(t *testing.T) {
	s := newSpine(t, true, bin)
	tok := s.token(t, "yuko", "--run", "r-0000000000000001")
	s.fileForNotice(t, tok, "unheard")
	if _, err := os.Lstat(s.y.Path("outbox")); !os.IsNotExist(err) {
		t.Fatalf("an outbox without a receiver: %v", err)
	}
	f, err := os.OpenFile(s.y.Path("org.toml"), os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	fmt.Fprintf(f, "[notify]\ncommand = [\"true\"]\n")
	f.Close()
	heard := s.fileForNotice(t, tok, "heard")
	if owed, bad := notify.Pending(s.y); len(owed) != 1 || owed[0].ID != heard+".1" || len(bad) != 0 {
		t.Fatalf("after a receiver was added the outbox owes %+v (%v)", owed, bad)
	}
}

// TestNotifyOwner: a gate filed while impexec dies between the event and
// the send reaches the command and the webhook exactly once after the
// restart; a webhook that fails is retried with backoff, its failure shown
// by impsup status, and it then gets the notification once; no
// notification carries the email API's key or the webhook's injected
// credential.
func TestNotifyOwner(t *testing.T) {
	s, hook, received := notifySpine(t)
	tok := s.token(t, "yuko", "--run", "r-0000000000000001")
	first := s.fileForNotice(t, tok, "first")
	firstID := first + ".1"

	// impexec dies after the gate-filed event is recorded and before it
	// sends anything.
	cmd := exec.Command(filepath.Join(crashBin, "impexec"), "run")
	cmd.Env = append(os.Environ(), append(s.env, "IMPYARD_CRASH=before-notify")...)
	if out, err := cmd.CombinedOutput(); !signalled(err) {
		t.Fatalf("impexec was not killed before the send: %v %s", err, out)
	}
	if owed, _ := notify.Pending(s.y); len(owed) != 1 || owed[0].ID != firstID || owed[0].Attempts != 0 {
		t.Fatalf("after the kill the outbox owes %+v", owed)
	}
	if len(hook.requests()) != 0 || len(commandGot(t, received)) != 0 {
		t.Fatal("a notification went out before the kill")
	}

	s.daemon(t, bin, "impexec", "run", "--rescan", "2s")
	waitFor(t, "the first notification", func() bool { return len(hook.delivered()[firstID]) == 1 && commandGot(t, received)[firstID] == 1 })

	// The webhook now fails twice; the command does not.
	hook.mu.Lock()
	hook.fail = 2
	hook.mu.Unlock()
	second := s.fileForNotice(t, tok, "second")
	secondID := second + ".1"
	waitFor(t, "a failed delivery", func() bool {
		owed, _ := notify.Pending(s.y)
		return len(owed) == 1 && owed[0].Attempts >= 1
	})
	text, err := s.run(t, "impsup", "status")
	if err != nil || !regexp.MustCompile(`(?m)^  `+secondID+` +gate-filed +yuko +failed [12] time\(s\), next at \S+Z +webhook: 127\.0\.0\.1:\d+ answered 503: answer 503$`).MatchString(text) {
		t.Fatalf("impsup status: %v\n%s", err, text)
	}
	js, err := s.run(t, "impsup", "status", "--json")
	if err != nil || !regexp.MustCompile(`"notifications":\{"pending":1,"failing":\[\{"id":"`+regexp.QuoteMeta(secondID)+`","event":"gate-filed","imp":"yuko","attempts":[12],"next":"[^"]+Z","last_error":"webhook: 127\.0\.0\.1:\d+ answered 503: answer 503"\}\]\}`).MatchString(js) {
		t.Fatalf("impsup status --json: %v\n%s", err, js)
	}
	waitFor(t, "the second notification", func() bool { return len(hook.delivered()[secondID]) == 1 })
	// A last pass of impexec finds nothing more to send.
	time.Sleep(1500 * time.Millisecond)

	if got := commandGot(t, received); len(got) != 2 || got[firstID] != 1 || got[secondID] != 1 {
		t.Fatalf("the command got %v, want each notification once", got)
	}
	reqs := hook.requests()
	if len(reqs) != 4 {
		t.Fatalf("%d webhook requests, want 4 (one, two refused, one)", len(reqs))
	}
	for i, r := range reqs[1:] {
		if r.header.Get(notify.Header) != secondID {
			t.Fatalf("retry of %q, want %s", r.header.Get(notify.Header), secondID)
		}
		// The backoff: 1s after the first failure, 2s after the second.
		if wait := time.Duration(i) * time.Second; i > 0 && r.at.Sub(reqs[i].at) < wait {
			t.Errorf("attempt %d came %v after the one before, want at least %v", i+1, r.at.Sub(reqs[i].at), wait)
		}
	}
	for _, d := range hook.delivered() {
		for _, r := range d {
			var m notify.Message
			if err := json.Unmarshal([]byte(r.body), &m); err != nil {
				t.Fatal(err)
			}
			g := first
			if m.ID == secondID {
				g = second
			}
			if m.Gate != g || m.Intent != "email-send" || m.Imp != "yuko" || len(m.SHA256) != 16 || m.Approve != "impgate approve --sha "+m.SHA256+" "+g ||
				!strings.Contains(m.Summary, "to=boss@elsewhere.com") || m.Rationale != "asked for [redacted]" {
				t.Errorf("notification %+v", m)
			}
			// The gateway injected the webhook's credential as the rule says.
			if r.header.Get("Authorization") != "Bearer "+webhookSecret {
				t.Errorf("webhook request without the injected credential: %q", r.header.Get("Authorization"))
			}
		}
	}
	// Neither secret is in any notification the receivers got.
	b, _ := os.ReadFile(received)
	for _, sec := range []string{secret, webhookSecret} {
		for _, r := range reqs {
			if strings.Contains(r.body, sec) {
				t.Errorf("a webhook body carries %q: %s", sec, r.body)
			}
		}
		if strings.Contains(string(b), sec) {
			t.Errorf("the command got %q: %s", sec, b)
		}
	}
	if owed, _ := notify.Pending(s.y); len(owed) != 0 {
		t.Fatalf("still owed: %+v", owed)
	}

	// Each chat format, through the same gateway, read from org.toml as
	// it is at delivery.
	for _, format := range []string{"discord", "slack", "ntfy"} {
		org, _ := os.ReadFile(s.y.Path("org.toml"))
		os.WriteFile(s.y.Path("org.toml"), regexp.MustCompile(`format = "\w+"`).ReplaceAll(org, []byte(`format = "`+format+`"`)), 0o640)
		g := s.fileForNotice(t, tok, format)
		waitFor(t, format+" notification", func() bool { return len(hook.delivered()[g+".1"]) == 1 })
		r := hook.delivered()[g+".1"][0]
		var text string
		switch format {
		case "discord":
			var v struct{ Content, Username string }
			json.Unmarshal([]byte(r.body), &v)
			text = v.Content
		case "slack":
			var v struct{ Text string }
			json.Unmarshal([]byte(r.body), &v)
			text = v.Text
		case "ntfy":
			text = r.body
			if r.header.Get("Title") != "yuko wants email-send: gate "+g+" waits" || r.header.Get("Content-Type") != "text/plain; charset=utf-8" {
				t.Errorf("ntfy headers %v", r.header)
			}
		}
		if !strings.HasPrefix(text, "yuko wants email-send: gate "+g+" waits\n") || !strings.Contains(text, "\napprove with: impgate approve --sha ") ||
			!strings.HasSuffix(text, "\nid: "+g+".1") || strings.Contains(r.body, secret) || strings.Contains(r.body, webhookSecret) {
			t.Errorf("%s body %s", format, r.body)
		}
	}
}
