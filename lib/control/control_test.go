package control

import (
	"context"
	"encoding/json"
	"io"
	"math"
	"net/http"
	"net/http/httptest"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/impyard/impyard/internal/testclock"
	"github.com/impyard/impyard/lib/approval"
	"github.com/impyard/impyard/lib/executor"
	"github.com/impyard/impyard/lib/gate"
	"github.com/impyard/impyard/lib/judge"
	"github.com/impyard/impyard/lib/ledger"
	"github.com/impyard/impyard/lib/queue"
	"github.com/impyard/impyard/lib/state"
	"github.com/impyard/impyard/lib/token"
	"github.com/impyard/impyard/lib/yard"
	"github.com/impyard/impyard/lib/yard/yardtest"
)

const policy = `{"schema":"impyard.policy/1","rules":[
 {"name":"email-send","match":{"host":"api.resend.com","subject":"org"},"verdict":"allow"},
 {"name":"deploy","match":{"host":"deploy.example","subject":"org"},"verdict":"allow"},
 {"name":"status-page","match":{"host":"status.example","subject":"org"},"verdict":"allow"},
 {"name":"message-user","match":{"host":"localhost"},"verdict":"deny"}]}`

const org = `
[gateway]
wait = "15s"
[[trust]]
intent = "email-send"
match = { to = "*@ourco.com" }
free = ["subject", "body"]
level = "auto"
[[trust]]
intent = "message-user"
imp = "rex"
level = "deny"
[[trust]]
intent = "deploy"
level = "auto"
[executors.email-send]
kind = "message-user"
log = "mail.jsonl"
fields = { to = "addresses", cc = "addresses", bcc = "addresses", reply_to = "address", subject = "text", body = "text" }
[executors.message-user]
kind = "message-user"
[executors.deploy]
kind = "http"
url = "https://deploy.example/v1/deploys"
[executors.egress-grant]
kind = "egress-grant"
[budget.yuko]
daily = 1.0
`

type fixture struct {
	api  *API
	y    *yard.Yard
	home string
}

func newFixture(t *testing.T) *fixture {
	t.Helper()
	y := yardtest.New(t)
	os.WriteFile(y.Path("org.toml"), []byte(org), 0o640)
	p, err := judge.Parse([]byte(policy))
	if err != nil {
		t.Fatal(err)
	}
	home := t.TempDir()
	signer, err := approval.Ensure(home, approval.Gateway, io.Discard, "test")
	if err != nil {
		t.Fatal(err)
	}
	return &fixture{api: &API{Yard: y, Home: home, Policy: func(context.Context) *judge.Policy { return p }, Signer: signer}, y: y, home: home}
}

// executor runs an executor until the test ends, and waits for it to stop
// before the test's directories are removed.
func (f *fixture) executor(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		(&executor.Runner{Yard: f.y, Home: f.home}).Run(ctx, time.Minute, 2)
	}()
	t.Cleanup(func() { cancel(); <-done })
}

func (f *fixture) token(t *testing.T, imp, task string) string {
	t.Helper()
	tok, err := token.Issue(f.home, imp, "r-0000000000000001", task)
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

func (f *fixture) do(t *testing.T, tok, method, path, body string) (int, map[string]any) {
	t.Helper()
	req := httptest.NewRequest(method, path, strings.NewReader(body))
	if tok != "" {
		req.Header.Set("Authorization", "Bearer "+tok)
	}
	rec := httptest.NewRecorder()
	f.api.ServeHTTP(rec, req)
	var out map[string]any
	if err := json.Unmarshal(rec.Body.Bytes(), &out); err != nil {
		t.Fatalf("%s %s: not JSON: %s", method, path, rec.Body.String())
	}
	return rec.Code, out
}

func TestGatedAction(t *testing.T) {
	f := newFixture(t)
	tok := f.token(t, "yuko", "")
	code, out := f.do(t, tok, "POST", "/v1/actions", `{"intent":"email-send","payload":{"to":["x@elsewhere.com"],"subject":"hi"},"rationale":"weekly","run_id":"r-0000000000000001"}`)
	if code != http.StatusAccepted || out["status"] != "pending" {
		t.Fatalf("%d %v", code, out)
	}
	g, err := gate.Get(f.y, out["gate_id"].(string))
	if err != nil || g.State != state.Filed || g.Imp != "yuko" || g.Run != "r-0000000000000001" || g.Rationale != "weekly" {
		t.Fatalf("%+v %v", g, err)
	}
	code, out = f.do(t, tok, "GET", "/v1/gates/"+g.ID, "")
	if code != 200 || out["id"] != g.ID {
		t.Errorf("own gate: %d %v", code, out)
	}
	other := f.token(t, "rex", "")
	if code, _ := f.do(t, other, "GET", "/v1/gates/"+g.ID, ""); code != http.StatusNotFound {
		t.Errorf("another imp's gate answered %d", code)
	}
	code, out = f.do(t, other, "GET", "/v1/gates", "")
	if code != 200 || len(out["gates"].([]any)) != 0 {
		t.Errorf("rex sees gates: %v", out)
	}
	code, out = f.do(t, tok, "GET", "/v1/gates?state=filed", "")
	if code != 200 || len(out["gates"].([]any)) != 1 {
		t.Errorf("yuko's filed gates: %v", out)
	}
}

func TestAutoAction(t *testing.T) {
	f := newFixture(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	r := &executor.Runner{Yard: f.y, Home: f.home}
	go r.Run(ctx, time.Minute, 2)
	tok := f.token(t, "yuko", "")
	code, out := f.do(t, tok, "POST", "/v1/actions", `{"intent":"email-send","payload":{"to":["a@ourco.com","b@ourco.com"]}}`)
	if code != http.StatusOK || out["status"] != "done" || out["result"] == nil {
		t.Fatalf("auto: %d %v", code, out)
	}
	g, _ := gate.Get(f.y, out["gate_id"].(string))
	if g.State != state.Executed || !strings.HasPrefix(g.History[1].By, "trust: ") {
		t.Errorf("auto gate %s decided by %q", g.State, g.History[1].By)
	}
	code, out = f.do(t, tok, "POST", "/v1/actions", `{"intent":"email-send","payload":{"to":["a@ourco.com","x@elsewhere.com"]}}`)
	if code != http.StatusAccepted || out["status"] != "pending" {
		t.Errorf("mixed recipients: %d %v", code, out)
	}
}

// The two payloads of issue 9 that a to = "*@ourco.com" auto entry used to
// send: a comma list in one string is refused at the door, a bcc the entry
// does not name is gated; the attacker's address reaches no executor.
func TestAutoAttacks(t *testing.T) {
	f := newFixture(t)
	f.executor(t)
	tok := f.token(t, "yuko", "")
	for _, tc := range []struct{ payload, field string }{
		{`{"to":"attacker@evil.com, team@ourco.com","subject":"hi","body":"x"}`, `field "to"`},
		{`{"to":["attacker@evil.com, team@ourco.com"],"subject":"hi","body":"x"}`, `field "to"`},
		{`{"to":["\"attacker@evil.com\"@ourco.com"],"subject":"hi"}`, `field "to"`},
		{`{"to":["team@ourco.com"],"reply_to":"attacker@evil.com, team@ourco.com"}`, `field "reply_to"`},
		{`{"to":["team@ourco.com"],"from":"attacker@evil.com"}`, `field "from" is not a declared field`},
		{`["team@ourco.com"]`, "not a JSON object"},
	} {
		code, out := f.do(t, tok, "POST", "/v1/actions", `{"intent":"email-send","payload":`+tc.payload+`}`)
		if code != http.StatusBadRequest || !strings.Contains(out["error"].(string), tc.field) {
			t.Errorf("%s: %d %v, want 400 naming %s", tc.payload, code, out, tc.field)
		}
	}
	for _, dir := range []string{"pending", "resolved"} {
		if ents, _ := os.ReadDir(f.y.Path("gates", dir)); len(ents) != 0 {
			t.Errorf("a refused payload left %d files in gates/%s", len(ents), dir)
		}
	}
	code, out := f.do(t, tok, "POST", "/v1/actions", `{"intent":"email-send","payload":{"to":["team@ourco.com"],"bcc":["attacker@evil.com"],"subject":"hi","body":"x"}}`)
	if code != http.StatusAccepted || out["status"] != "pending" || !strings.Contains(out["reason"].(string), `field "bcc" is neither matched nor free`) {
		t.Fatalf("bcc: %d %v, want 202 pending naming bcc", code, out)
	}
	g, err := gate.Get(f.y, out["gate_id"].(string))
	if err != nil || g.State != state.Filed {
		t.Errorf("bcc gate: %+v %v", g, err)
	}
	// One more auto send goes through, so the executor has run; the
	// attacker's address is in no mail it wrote.
	if code, out := f.do(t, tok, "POST", "/v1/actions", `{"intent":"email-send","payload":{"to":["team@ourco.com"],"subject":"hi","body":"x"}}`); code != http.StatusOK || out["status"] != "done" {
		t.Fatalf("auto: %d %v", code, out)
	}
	mail, _ := os.ReadFile(f.y.Path("mail.jsonl"))
	if !strings.Contains(string(mail), "team@ourco.com") || strings.Contains(string(mail), "evil.com") {
		t.Errorf("mail log: %s", mail)
	}
}

// An intent whose executor declares no fields is still gated, never auto.
func TestAutoNeedsTypedPayload(t *testing.T) {
	f := newFixture(t)
	code, out := f.do(t, f.token(t, "yuko", ""), "POST", "/v1/actions", `{"intent":"deploy","payload":{"env":"staging"}}`)
	if code != http.StatusAccepted || out["status"] != "pending" || out["reason"] != "executor deploy declares no fields; auto trust needs typed payloads" {
		t.Errorf("%d %v", code, out)
	}
}

func TestRefusals(t *testing.T) {
	f := newFixture(t)
	tok := f.token(t, "yuko", "")
	rex := f.token(t, "rex", "")
	orgTok, _ := token.OrgToken(f.home)
	for _, tc := range []struct {
		tok, method, path, body string
		code                    int
		want                    string
	}{
		{"", "POST", "/v1/actions", `{}`, 401, "no token"},
		{"impyard_" + strings.Repeat("0", 64), "POST", "/v1/actions", `{}`, 401, "unknown or revoked"},
		{orgTok, "GET", "/v1/gates", ``, 403, "org subject"},
		{tok, "POST", "/v1/actions", `not json`, 400, "envelope"},
		{tok, "POST", "/v1/actions", `{"intent":"email-send","payload":{},"imp":"rex"}`, 400, `unknown field "imp"`},
		{tok, "POST", "/v1/actions", `{"payload":{}}`, 400, "no intent"},
		{tok, "POST", "/v1/actions", `{"intent":"email-send"}`, 400, "no payload"},
		{tok, "POST", "/v1/actions", `{"intent":"launch-missiles","payload":{}}`, 403, "names no rule"},
		{tok, "POST", "/v1/actions", `{"intent":"email-send","payload":{},"run_id":"r-0000000000000009"}`, 403, "not this token's run"},
		{tok, "POST", "/v1/actions", `{"intent":"email-send","payload":{},"task_id":"t-0000000000000009"}`, 403, "not this token's task"},
		{tok, "POST", "/v1/actions", `{"intent":"email-send","payload":{"a":1,"a":2}}`, 400, "duplicate"},
		{tok, "POST", "/v1/actions", `{"intent":"email-send","payload":"` + strings.Repeat("x", MaxEnvelope) + `"}`, 413, "limit"},
		{rex, "POST", "/v1/actions", `{"intent":"message-user","payload":{"text":"hi"}}`, 403, "refused for rex"},
		{tok, "GET", "/v1/actions", ``, 405, "POST"},
		{tok, "GET", "/v1/nope", ``, 404, "no such endpoint"},
		{tok, "GET", "/v1/gates/../../etc/passwd", ``, 404, "no such gate"},
		{tok, "POST", "/v1/journal", `{"note":""}`, 400, "empty"},
	} {
		code, out := f.do(t, tc.tok, tc.method, tc.path, tc.body)
		if code != tc.code || !strings.Contains(out["error"].(string), tc.want) {
			t.Errorf("%s %s %.60s: got %d %v, want %d %q", tc.method, tc.path, tc.body, code, out, tc.code, tc.want)
		}
	}
	if gates, _ := gate.List(f.y, gate.Filter{All: true}); len(gates) != 0 {
		t.Errorf("refused envelopes filed %d gates", len(gates))
	}
}

func TestBrokenConfigDeniesAll(t *testing.T) {
	f := newFixture(t)
	os.WriteFile(f.y.Path("org.toml"), []byte("[[trust]]\nintent = \"email-send\"\nlevel = \"sometimes\"\n"), 0o640)
	code, out := f.do(t, f.token(t, "yuko", ""), "POST", "/v1/actions", `{"intent":"email-send","payload":{}}`)
	if code != 403 || !strings.Contains(out["error"].(string), "every action is denied") {
		t.Errorf("%d %v", code, out)
	}
	os.WriteFile(f.y.Path("org.toml"), []byte("[[trust]]\nintent = \"emial-send\"\nlevel = \"auto\"\n"), 0o640)
	code, out = f.do(t, f.token(t, "yuko", ""), "POST", "/v1/actions", `{"intent":"email-send","payload":{}}`)
	if code != 403 || !strings.Contains(out["error"].(string), `intent "emial-send" names no rule`) {
		t.Errorf("%d %v", code, out)
	}
}

func TestBudgetSoftDeny(t *testing.T) {
	f := newFixture(t)
	now := testclock.Freeze(t, &ledger.Now)
	os.WriteFile(f.y.Path("org.toml"), []byte(strings.Replace(org, "log = \"mail.jsonl\"", "log = \"mail.jsonl\"\ncost = 0.6", 1)), 0o640)
	pro, _, _ := queue.Add(f.y, queue.AddOptions{Imp: "yuko", Text: "digest", Proactive: true, By: "cron", Actor: "test"})
	owner, _, _ := queue.Add(f.y, queue.AddOptions{Imp: "yuko", Text: "send it", By: "alice", Actor: "test"})
	f.executor(t)
	pt := f.token(t, "yuko", pro)
	for i, want := range []int{200, 200, 429} {
		code, out := f.do(t, pt, "POST", "/v1/actions", `{"intent":"email-send","payload":{"to":["a@ourco.com"],"subject":"n`+string(rune('0'+i))+`"}}`)
		if code != want {
			t.Fatalf("proactive proposal %d: %d %v, want %d", i, code, out, want)
		}
	}
	// Refused over budget, a proposal is told when budgets start afresh:
	// the next UTC midnight. Other refusals name no time.
	for _, tc := range []struct {
		tok, body string
		budget    bool
	}{
		{pt, `{"intent":"email-send","payload":{"to":["a@ourco.com"],"subject":"late"}}`, true},
		{pt, `{"intent":"no-such-intent","payload":{}}`, false},
	} {
		req := httptest.NewRequest("POST", "/v1/actions", strings.NewReader(tc.body))
		req.Header.Set("Authorization", "Bearer "+tc.tok)
		rec := httptest.NewRecorder()
		f.api.ServeHTTP(rec, req)
		u := now.UTC()
		midnight := time.Date(u.Year(), u.Month(), u.Day()+1, 0, 0, 0, 0, time.UTC)
		want := strconv.FormatInt(max(1, int64(math.Ceil(midnight.Sub(now).Seconds()))), 10)
		switch {
		case tc.budget && (rec.Code != 429 || rec.Header().Get("Retry-After") != want):
			t.Errorf("over budget: %d Retry-After %q, want %s, the seconds from %s to %s", rec.Code, rec.Header().Get("Retry-After"), want, now, midnight)
		case !tc.budget && (rec.Code < 400 || rec.Header().Get("Retry-After") != ""):
			t.Errorf("a refusal of no budget: %d Retry-After %q", rec.Code, rec.Header().Get("Retry-After"))
		}
	}
	if code, out := f.do(t, f.token(t, "yuko", owner), "POST", "/v1/actions", `{"intent":"email-send","payload":{"to":["a@ourco.com"]}}`); code != 200 {
		t.Errorf("owner task over budget: %d %v", code, out)
	}
}

func TestJournalAndQueue(t *testing.T) {
	f := newFixture(t)
	id, _, _ := queue.Add(f.y, queue.AddOptions{Imp: "yuko", Text: "digest", By: "alice", Actor: "test"})
	queue.Add(f.y, queue.AddOptions{Imp: "rex", Text: "secret", By: "alice", Actor: "test"})
	tok := f.token(t, "yuko", id)
	code, out := f.do(t, tok, "GET", "/v1/queue", "")
	tasks := out["tasks"].([]any)
	if code != 200 || len(tasks) != 1 || tasks[0].(map[string]any)["id"] != id {
		t.Errorf("queue: %d %v", code, out)
	}
	if code, out := f.do(t, tok, "POST", "/v1/journal", `{"note":"found three sources"}`); code != 200 {
		t.Errorf("journal: %d %v", code, out)
	}
	b, _ := os.ReadFile(f.y.Path("journal", "yuko", "events.jsonl"))
	if !strings.Contains(string(b), `"event":"note"`) || !strings.Contains(string(b), `"actor":"box"`) || !strings.Contains(string(b), "found three sources") {
		t.Errorf("journal: %s", b)
	}
}

// An egress-grant proposal may not ask for more than plain requests; the
// refusal comes at the door and names what was asked.
func TestEgressGrantEscapes(t *testing.T) {
	f := newFixture(t)
	tok := f.token(t, "yuko", "")
	for _, tc := range []struct{ rule, want string }{
		{`{"name":"x","match":{"host":"a.example","method":"CONNECT"},"verdict":"allow"}`, "CONNECT"},
		{`{"name":"x","match":{"host":"a.example"},"verdict":"tunnel"}`, "tunnel"},
		{`{"name":"x","match":{"host":"a.example","headerContains":{"upgrade":"websocket"}},"verdict":"allow"}`, "upgrade"},
		{`{"name":"x","match":{"host":"127.0.0.1","network":"127.0.0.0/8"},"verdict":"allow"}`, "network"},
		{`{"name":"x","match":{"host":"a.example","subject":"org"},"verdict":"allow"}`, "subject"},
		{`{"name":"x","match":{"host":"a.example"},"verdict":"allow","inject":{"header":"authorization","secret":"resend"}}`, `field "inject"`},
	} {
		code, out := f.do(t, tok, "POST", "/v1/actions", `{"intent":"egress-grant","payload":`+tc.rule+`}`)
		if code != http.StatusBadRequest || !strings.Contains(out["error"].(string), tc.want) {
			t.Errorf("%s: %d %v, want 400 naming %s", tc.rule, code, out, tc.want)
		}
	}
	if gates, _ := gate.List(f.y, gate.Filter{All: true}); len(gates) != 0 {
		t.Errorf("refused grants filed %d gates", len(gates))
	}
	code, out := f.do(t, tok, "POST", "/v1/actions", `{"intent":"egress-grant","payload":{"name":"docs","match":{"host":"docs.python.org","method":"GET"},"verdict":"allow"}}`)
	if code != http.StatusAccepted || out["status"] != "pending" {
		t.Errorf("a plain grant: %d %v", code, out)
	}
}

// Six identical email-send proposals of one task, posted at once, make
// one gate: each answer is 202 naming it, five of them "duplicate": true.
func TestDuplicateProposals(t *testing.T) {
	f := newFixture(t)
	tok := f.token(t, "yuko", "")
	body := `{"intent":"email-send","payload":{"to":["x@elsewhere.com"],"subject":"meeting tomorrow"}}`
	type answer struct {
		code int
		out  map[string]any
	}
	answers := make(chan answer, 6)
	start := make(chan struct{})
	for range 6 {
		go func() {
			<-start
			req := httptest.NewRequest("POST", "/v1/actions", strings.NewReader(body))
			req.Header.Set("Authorization", "Bearer "+tok)
			rec := httptest.NewRecorder()
			f.api.ServeHTTP(rec, req)
			var out map[string]any
			json.Unmarshal(rec.Body.Bytes(), &out)
			answers <- answer{rec.Code, out}
		}()
	}
	close(start)
	ids := map[any]int{}
	dups := 0
	for range 6 {
		a := <-answers
		if a.code != http.StatusAccepted || a.out["status"] != "pending" {
			t.Errorf("answer %d %v", a.code, a.out)
		}
		ids[a.out["gate_id"]]++
		if a.out["duplicate"] == true {
			dups++
		}
	}
	if len(ids) != 1 || dups != 5 {
		t.Errorf("gate ids %v, %d duplicates; want one id and 5 duplicates", ids, dups)
	}
	if gs, _ := gate.List(f.y, gate.Filter{All: true}); len(gs) != 1 {
		t.Errorf("%d gates filed, want 1", len(gs))
	}
}
