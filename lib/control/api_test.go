package control

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/impyard/impyard/lib/event"
	"github.com/impyard/impyard/lib/executor"
	"github.com/impyard/impyard/lib/gate"
	"github.com/impyard/impyard/lib/grant"
	"github.com/impyard/impyard/lib/queue"
	"github.com/impyard/impyard/lib/state"
)

func TestMethodsAndContentType(t *testing.T) {
	f := newFixture(t)
	tok := f.token(t, "yuko", "")
	for _, c := range []struct {
		method, path, want string
	}{
		{"GET", "/v1/actions", "use POST"},
		{"PUT", "/v1/actions", "use POST"},
		{"POST", "/v1/gates", "use GET"},
		{"DELETE", "/v1/gates/g-0000000000000001", "use GET"},
		{"POST", "/v1/queue", "use GET"},
		{"GET", "/v1/journal", "use POST"},
	} {
		if code, out := f.do(t, tok, c.method, c.path, "{}"); code != http.StatusMethodNotAllowed || out["error"] != c.want {
			t.Errorf("%s %s: %d %v, want 405 %q", c.method, c.path, code, out, c.want)
		}
	}
	req := httptest.NewRequest("GET", "/v1/queue", nil)
	req.Header.Set("Authorization", "Bearer "+tok)
	rec := httptest.NewRecorder()
	f.api.ServeHTTP(rec, req)
	if ct := rec.Header().Get("Content-Type"); ct != "application/json" || !strings.HasSuffix(rec.Body.String(), "}\n") {
		t.Errorf("content type %q, body %q", ct, rec.Body.String())
	}
}

func TestAuthentication(t *testing.T) {
	f := newFixture(t)
	tok := f.token(t, "yuko", "") // for run r-0000000000000001
	for _, c := range []struct {
		name, header string
		code         int
		want         string
	}{
		{"no header", "", 401, "no token"},
		{"empty bearer", "Bearer ", 401, "no token"},
		{"basic", "Basic " + tok, 401, "no token"},
		{"lower-case scheme", "bearer " + tok, 401, "no token"},
		{"padded token", "Bearer  " + tok + " ", 200, ""},
	} {
		req := httptest.NewRequest("GET", "/v1/queue", nil)
		if c.header != "" {
			req.Header.Set("Authorization", c.header)
		}
		rec := httptest.NewRecorder()
		f.api.ServeHTTP(rec, req)
		if rec.Code != c.code || !strings.Contains(rec.Body.String(), c.want) {
			t.Errorf("%s: %d %s, want %d %q", c.name, rec.Code, rec.Body, c.code, c.want)
		}
	}
	// On a box's own listener only its run's token is taken.
	for _, c := range []struct {
		run  string
		ok   bool
		code int
	}{
		{"r-0000000000000001", true, 200},
		{"r-0000000000000002", true, 403},
		{"", false, 200},
	} {
		f.api.RunOf = func(*http.Request) (string, bool) { return c.run, c.ok }
		code, out := f.do(t, tok, "GET", "/v1/queue", "")
		if code != c.code || (code == 403 && !strings.Contains(out["error"].(string), "run "+c.run+" may only use its own")) {
			t.Errorf("listener of %q (%v): %d %v, want %d", c.run, c.ok, code, out, c.code)
		}
	}
}

func TestGatesAndQueueListings(t *testing.T) {
	f := newFixture(t)
	tok := f.token(t, "yuko", "")
	filed := make([]string, 2)
	for i := range filed {
		code, out := f.do(t, tok, "POST", "/v1/actions", `{"intent":"email-send","payload":{"to":["x@elsewhere.com"],"subject":"`+string(rune('0'+i))+`"}}`)
		if code != http.StatusAccepted {
			t.Fatalf("%d %v", code, out)
		}
		filed[i] = out["gate_id"].(string)
	}
	if _, err := gate.Move(f.y, filed[0], gate.Change{To: state.Denied, By: "alice"}); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		query string
		want  []string
	}{
		{"", filed},
		{"?state=filed", filed[1:]},
		{"?state=denied", filed[:1]},
		{"?state=executed", nil},
	} {
		code, out := f.do(t, tok, "GET", "/v1/gates"+c.query, "")
		gates, _ := out["gates"].([]any)
		var got []string
		for _, g := range gates {
			got = append(got, g.(map[string]any)["id"].(string))
		}
		if code != 200 || gates == nil || strings.Join(got, ",") != strings.Join(c.want, ",") {
			t.Errorf("gates%s: %d %v, want %v", c.query, code, out, c.want)
		}
	}
	if code, out := f.do(t, tok, "GET", "/v1/gates?state=sent", ""); code != 400 || !strings.Contains(out["error"].(string), `unknown gate state "sent"`) {
		t.Errorf("unknown state: %d %v", code, out)
	}
	if code, _ := f.do(t, tok, "GET", "/v1/gates/g-0000000000000009", ""); code != 404 {
		t.Errorf("missing gate answered %d", code)
	}

	// The queue: [] when empty, filtered by state.
	code, out := f.do(t, tok, "GET", "/v1/queue", "")
	if tasks, ok := out["tasks"].([]any); code != 200 || !ok || len(tasks) != 0 {
		t.Errorf("empty queue: %d %v, want an empty list", code, out)
	}
	a, _, _ := queue.Add(f.y, queue.AddOptions{Imp: "yuko", Text: "a", By: "alice", Actor: "test"})
	b, _, _ := queue.Add(f.y, queue.AddOptions{Imp: "yuko", Text: "b", By: "alice", Actor: "test"})
	queue.Move(f.y, b, queue.Change{To: state.Running})
	for _, c := range []struct{ query, want string }{
		{"", a + "," + b},
		{"?state=waiting", a},
		{"?state=running", b},
	} {
		_, out := f.do(t, tok, "GET", "/v1/queue"+c.query, "")
		var got []string
		for _, t := range out["tasks"].([]any) {
			got = append(got, t.(map[string]any)["id"].(string))
		}
		if strings.Join(got, ",") != c.want {
			t.Errorf("queue%s: %v, want %s", c.query, got, c.want)
		}
	}
}

func TestJournalNoteLimits(t *testing.T) {
	f := newFixture(t)
	tok := f.token(t, "yuko", "t-0000000000000001")
	// The whole body may be MaxNote bytes, not one more.
	fill := func(n int) string {
		return `{"note":"` + strings.Repeat("n", n-len(`{"note":""}`)) + `"}`
	}
	for _, c := range []struct {
		name, body string
		code       int
		want       string
	}{
		{"at the limit", fill(MaxNote), 200, ""},
		{"over the limit", fill(MaxNote + 1), 413, "body over the 16384 byte limit"},
		{"blank", `{"note":" \n "}`, 400, "journal note is empty"},
		{"not JSON", `note`, 400, "journal note: "},
		{"unknown field", `{"note":"x","imp":"rex"}`, 400, "journal note: "},
	} {
		code, out := f.do(t, tok, "POST", "/v1/journal", c.body)
		if code != c.code || (c.want != "" && !strings.Contains(out["error"].(string), c.want)) {
			t.Errorf("%s: %d %v, want %d %q", c.name, code, out, c.code, c.want)
		}
	}
	b, _ := os.ReadFile(f.y.Path("journal", "yuko", "events.jsonl"))
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	var e event.Event
	if len(lines) != 1 || json.Unmarshal([]byte(lines[0]), &e) != nil || e.Event != "note" || e.Imp != "yuko" || e.By != "yuko" ||
		e.Actor != "box" || e.Task != "t-0000000000000001" || len(e.Why) != MaxNote-len(`{"note":""}`) {
		t.Errorf("journal holds %d lines: %.200s", len(lines), b)
	}
}

func TestEnvelopeLimit(t *testing.T) {
	f := newFixture(t)
	tok := f.token(t, "yuko", "")
	pad := func(n int) string {
		head := `{"intent":"email-send","payload":{"to":["x@elsewhere.com"]},"rationale":"`
		return head + strings.Repeat("r", n-len(head)-2) + `"}`
	}
	if code, out := f.do(t, tok, "POST", "/v1/actions", pad(MaxEnvelope)); code != http.StatusAccepted {
		t.Errorf("envelope of MaxEnvelope bytes: %d %v", code, out)
	}
	if code, out := f.do(t, tok, "POST", "/v1/actions", pad(MaxEnvelope+1)); code != http.StatusRequestEntityTooLarge {
		t.Errorf("envelope one byte over: %d %v", code, out)
	}
}

// An egress grant is filed as the rule that would go in, scoped to the
// proposing imp; a rule that cannot be granted is refused.
func TestEgressGrantProposal(t *testing.T) {
	f := newFixture(t)
	tok := f.token(t, "yuko", "")
	code, out := f.do(t, tok, "POST", "/v1/actions", `{"intent":"egress-grant","payload":{"name":"docs","match":{"host":"docs.python.org"},"verdict":"allow"}}`)
	if code != http.StatusAccepted {
		t.Fatalf("%d %v", code, out)
	}
	g, err := gate.Get(f.y, out["gate_id"].(string))
	if err != nil {
		t.Fatal(err)
	}
	want, _ := grant.Rule("yuko", "", []byte(`{"name":"docs","match":{"host":"docs.python.org"},"verdict":"allow"}`))
	if b, _ := g.Frozen(); string(b) != string(want) {
		t.Errorf("filed payload %s, want %s", b, want)
	}
	code, out = f.do(t, tok, "POST", "/v1/actions", `{"intent":"egress-grant","payload":{"name":"all","match":{"host":"*"},"verdict":"tunnel"}}`)
	if code != 400 || !strings.Contains(out["error"].(string), "egress-grant") {
		t.Errorf("ungrantable rule: %d %v", code, out)
	}
}

func TestBrokenImpConfigDeniesItsActions(t *testing.T) {
	f := newFixture(t)
	os.MkdirAll(f.y.Path("imps", "yuko"), 0o750)
	os.WriteFile(f.y.Path("imps", "yuko", "imp.toml"), []byte("bogus = 1\n"), 0o640)
	code, out := f.do(t, f.token(t, "yuko", ""), "POST", "/v1/actions", `{"intent":"email-send","payload":{"to":["x@elsewhere.com"]}}`)
	if code != 403 || !strings.Contains(out["error"].(string), "every action of yuko is denied while its configuration does not load") {
		t.Errorf("%d %v", code, out)
	}
	// rex, with no configuration at all, is not affected.
	if code, out := f.do(t, f.token(t, "rex", ""), "POST", "/v1/actions", `{"intent":"email-send","payload":{"to":["x@elsewhere.com"]}}`); code != http.StatusAccepted {
		t.Errorf("rex: %d %v", code, out)
	}
}

// An auto-approved action that fails is answered with the failure and
// its reason.
func TestAutoActionFails(t *testing.T) {
	f := newFixture(t)
	os.WriteFile(f.y.Path("org.toml"), []byte(strings.Replace(org, "log = \"mail.jsonl\"", "log = \"mail.jsonl\"\ncommand = [\"sh\", \"-c\", \"echo smtp down; exit 1\"]", 1)), 0o640)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		(&executor.Runner{Yard: f.y, Home: f.home, Backoff: time.Millisecond}).Run(ctx, time.Minute, 1)
		close(done)
	}()
	defer func() { cancel(); <-done }()
	code, out := f.do(t, f.token(t, "yuko", ""), "POST", "/v1/actions", `{"intent":"email-send","payload":{"to":["a@ourco.com"]}}`)
	if code != 200 || out["status"] != "failed" || !strings.HasPrefix(out["reason"].(string), "outcome unknown: sh: exit status 1: smtp down") || out["result"] == nil {
		t.Errorf("%d %v", code, out)
	}
}

// Nobody executes: the box is answered pending once the wait is over, or
// at once when it hangs up.
func TestAutoActionWaitBounded(t *testing.T) {
	f := newFixture(t)
	os.WriteFile(f.y.Path("org.toml"), []byte(strings.Replace(org, `wait = "15s"`, `wait = "30ms"`, 1)), 0o640)
	tok := f.token(t, "yuko", "")
	code, out := f.do(t, tok, "POST", "/v1/actions", `{"intent":"email-send","payload":{"to":["a@ourco.com"],"subject":"1"}}`)
	if code != http.StatusAccepted || out["status"] != "pending" {
		t.Errorf("after the wait: %d %v", code, out)
	}
	g, err := gate.Get(f.y, out["gate_id"].(string))
	if err != nil || g.State != state.Approved {
		t.Errorf("gate %v %v, want approved by trust", g, err)
	}

	os.WriteFile(f.y.Path("org.toml"), []byte(org), 0o640) // 15s
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	req := httptest.NewRequest("POST", "/v1/actions", strings.NewReader(`{"intent":"email-send","payload":{"to":["a@ourco.com"],"subject":"2"}}`)).WithContext(ctx)
	req.Header.Set("Authorization", "Bearer "+tok)
	rec := httptest.NewRecorder()
	start := time.Now()
	f.api.ServeHTTP(rec, req)
	if rec.Code != http.StatusAccepted || !strings.Contains(rec.Body.String(), `"status":"pending"`) || time.Since(start) > 10*time.Second {
		t.Errorf("hung-up box: %d %s after %v", rec.Code, rec.Body, time.Since(start))
	}
}
