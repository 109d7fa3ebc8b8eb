package tests

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/impyard/impyard/lib/ledger"
)

// heldAPI is a loopback model API that holds every call until released
// and then answers with the usage an honest API would: the request's
// max_tokens as output, a token per four bytes of its body as input.
type heldAPI struct {
	*httptest.Server
	arrived chan struct{} // one per call that reached the API
	release chan struct{} // closed to answer every call
	once    sync.Once
}

func newHeldAPI(t *testing.T) *heldAPI {
	h := &heldAPI{arrived: make(chan struct{}, 1000), release: make(chan struct{})}
	h.Server = httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		var req struct {
			MaxTokens int64 `json:"max_tokens"`
		}
		json.Unmarshal(body, &req)
		h.arrived <- struct{}{}
		<-h.release
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprintf(w, `{"model":"gpt-5","choices":[],"usage":{"prompt_tokens":%d,"completion_tokens":%d}}`, (len(body)+3)/4, req.MaxTokens)
	}))
	t.Cleanup(h.Server.Close)
	// Closed before the server, so no handler is left waiting.
	t.Cleanup(func() { h.open() })
	return h
}

// open answers every call held and every later one.
func (h *heldAPI) open() { h.once.Do(func() { close(h.release) }) }

// burst makes n model calls with body through c at once and returns, once
// each was either refused or reached the API, the statuses and
// Retry-After values of the refused ones, and how many reached it; the
// calls that reached it are answered when done is called, which returns
// their statuses.
func (m *meterYard) burst(t *testing.T, h *heldAPI, c *http.Client, n int, body string) (refused []string, reached int, done func() []int) {
	t.Helper()
	type answer struct {
		status int
		retry  string
		body   string
	}
	answers := make(chan answer, n)
	for range n {
		go func() {
			resp, err := c.Post(h.URL+"/v1/chat/completions", "application/json", strings.NewReader(body))
			if err != nil {
				answers <- answer{status: -1, body: err.Error()}
				return
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			answers <- answer{resp.StatusCode, resp.Header.Get("Retry-After"), string(b)}
		}()
	}
	var passed []int
	timeout := time.After(20 * time.Second)
	for len(refused)+reached < n {
		select {
		case a := <-answers:
			if a.status != http.StatusTooManyRequests {
				t.Fatalf("a call answered %d %q before any was released", a.status, a.body)
			}
			refused = append(refused, a.retry+" "+a.body)
		case <-h.arrived:
			reached++
		case <-timeout:
			t.Fatalf("after 20s: %d refused, %d reached the API, of %d", len(refused), reached, n)
		}
	}
	return refused, reached, func() []int {
		h.open()
		for range reached {
			passed = append(passed, (<-answers).status)
		}
		return passed
	}
}

// proactiveTokens sums the proactive model tokens in yuko's ledger once
// it holds calls tokens entries: they are written as each exchange ends,
// after its answer.
func (m *meterYard) proactiveTokens(t *testing.T, calls int) int64 {
	t.Helper()
	since, until := ledger.Day(time.Now())
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		var n int64
		seen := 0
		if err := ledger.Read(m.y, "yuko", since, until, func(e ledger.Entry) {
			if e.Class == ledger.Proactive && e.Kind == ledger.Tokens {
				n += e.InputTokens + e.OutputTokens
				seen++
			}
		}); err != nil {
			t.Fatal(err)
		}
		if seen >= calls || time.Now().After(deadline) {
			if seen != calls {
				t.Errorf("%d proactive calls on record, want %d", seen, calls)
			}
			return n
		}
	}
}

// retrySeconds is a refusal's Retry-After in seconds.
func retrySeconds(t *testing.T, refusal string) int {
	t.Helper()
	s, _, _ := strings.Cut(refusal, " ")
	n, err := strconv.Atoi(s)
	if err != nil {
		t.Fatalf("refusal %q has no Retry-After", refusal)
	}
	return n
}

// TestReservationsHoldTheCap: a proactive run fires 30 model calls at
// once, each asking for up to 2000 output tokens, under tokens_daily =
// 5000. Each call reserves what it asked for before it is forwarded, so
// only the two whose reservations fit reach the API; the rest are
// refused 429 with a Retry-After, and what the ledger records stays
// under the cap. Once they settle, a call that would pass the cap is
// refused until the next day and one that fits passes.
func TestReservationsHoldTheCap(t *testing.T) {
	h := newHeldAPI(t)
	m := newMeterYardOn(t, "[budget.yuko]\ntokens_daily = 5000\n", h.Server)
	proactive := m.client(t, m.task(t, "--proactive", "digest"))
	body := `{"model":"gpt-5","max_tokens":2000,"messages":[]}` // 2000 + 13 tokens
	refused, reached, done := m.burst(t, h, proactive, 30, body)
	if reached != 2 || len(refused) != 28 {
		t.Fatalf("%d calls reached the API and %d were refused, want 2 and 28", reached, len(refused))
	}
	for _, r := range refused {
		if retrySeconds(t, r) < 1 || !strings.Contains(r, "of its daily 5000 model tokens on proactive work") || !strings.Contains(r, "this call reserves 2013 more") {
			t.Fatalf("refusal %q", r)
		}
	}
	if got := done(); fmt.Sprint(got) != "[200 200]" {
		t.Fatalf("the calls that reached the API: %v", got)
	}
	if n := m.proactiveTokens(t, 2); n != 4026 {
		t.Errorf("%d proactive tokens on record, want 4026 (of a 5000 cap)", n)
	}
	// Settled: 4026 spent. Another 2013 would pass the cap, and nothing
	// in flight can lift that before midnight; 913 fit.
	_, hdr := m.callBody(t, proactive, body, http.StatusTooManyRequests)
	if ra, _ := strconv.Atoi(hdr.Get("Retry-After")); time.Duration(ra)*time.Second < time.Until(midnightUTC())-5*time.Second {
		t.Errorf("Retry-After %q with nothing in flight, want the seconds to midnight", hdr.Get("Retry-After"))
	}
	m.callBody(t, proactive, `{"model":"gpt-5","max_tokens":900,"messages":[]}`, http.StatusOK)
	if n := m.proactiveTokens(t, 3); n > 5000 {
		t.Errorf("%d proactive tokens on record, over the 5000 cap", n)
	}
}

// TestInflightCap: 30 proactive model calls at once, with no budget to
// stop them: only [budget.<imp>] inflight (default 4) are forwarded, the
// rest refused 429 with a short Retry-After naming the cap; an owner
// call still passes while they are out, and once they end the next
// proactive call passes.
func TestInflightCap(t *testing.T) {
	h := newHeldAPI(t)
	m := newMeterYardOn(t, "", h.Server)
	proactive := m.client(t, m.task(t, "--proactive", "digest"))
	owner := m.client(t, m.task(t, "asked by alice"))
	body := `{"model":"gpt-5","max_tokens":100,"messages":[]}`
	refused, reached, done := m.burst(t, h, proactive, 30, body)
	if reached != 4 || len(refused) != 26 {
		t.Fatalf("%d calls reached the API and %d were refused, want 4 and 26", reached, len(refused))
	}
	for _, r := range refused {
		if s := retrySeconds(t, r); s < 1 || s > 10 || !strings.Contains(r, "has 4 proactive model calls out, its inflight cap") {
			t.Fatalf("refusal %q", r)
		}
	}
	ownerRefused, ownerReached, ownerDone := m.burst(t, h, owner, 1, body)
	if ownerReached != 1 || len(ownerRefused) != 0 {
		t.Fatalf("an owner call with 4 proactive ones out: refused %q", ownerRefused)
	}
	if got := fmt.Sprint(done(), ownerDone()); got != "[200 200 200 200] [200]" {
		t.Fatalf("the calls that reached the API: %s", got)
	}
	m.callBody(t, proactive, body, http.StatusOK)
}

// callBody is call with a body of the caller's.
func (m *meterYard) callBody(t *testing.T, c *http.Client, body string, want int) (string, http.Header) {
	t.Helper()
	resp, err := c.Post(m.api.URL+"/v1/chat/completions", "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != want {
		t.Fatalf("%s: %d %s, want %d", body, resp.StatusCode, b, want)
	}
	return string(b), resp.Header
}

func midnightUTC() time.Time {
	_, next := ledger.Day(time.Now())
	return next
}

// pendingGates counts the gates filed and not yet decided.
func pendingGates(t *testing.T, s *spine) int {
	t.Helper()
	ents, err := os.ReadDir(s.y.Path("gates", "pending"))
	if err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	n := 0
	for _, e := range ents {
		if strings.HasSuffix(e.Name(), ".json") {
			n++
		}
	}
	return n
}

// TestGatesPerRun: a run files its 20 gated proposals, and the 21st is
// refused 429 naming gates_per_run, with nothing filed for it; another
// run files again. A run is held to gate_bytes_per_run the same way.
func TestGatesPerRun(t *testing.T) {
	s := newSpine(t, true, bin)
	envelope := func(run, body string) string {
		return fmt.Sprintf(`{"intent":"email-send","payload":{"to":["boss@elsewhere.com"],"subject":"s","body":%q},"rationale":"r","run_id":%q}`, body, run)
	}
	run1, run2, run3 := "r-0000000000000001", "r-0000000000000002", "r-0000000000000003"
	tok := s.token(t, "yuko", "--run", run1)
	for i := range 20 {
		if code, out, _ := s.propose(t, tok, envelope(run1, fmt.Sprint("n", i))); code != http.StatusAccepted {
			t.Fatalf("proposal %d: %d %v", i+1, code, out)
		}
	}
	code, out, _ := s.propose(t, tok, envelope(run1, "one too many"))
	if reason, _ := out["error"].(string); code != http.StatusTooManyRequests || !strings.Contains(reason, "has filed 20 gates, its gates_per_run cap") {
		t.Fatalf("the 21st proposal: %d %v", code, out)
	}
	if n := pendingGates(t, s); n != 20 {
		t.Fatalf("%d gates filed, want 20", n)
	}
	if code, out, _ := s.propose(t, s.token(t, "yuko", "--run", run2), envelope(run2, "a new run")); code != http.StatusAccepted {
		t.Fatalf("another run's proposal: %d %v", code, out)
	}

	org, _ := os.ReadFile(s.y.Path("org.toml"))
	os.WriteFile(s.y.Path("org.toml"), append(org, "[budget.yuko]\ngate_bytes_per_run = 3000\n"...), 0o640)
	tok = s.token(t, "yuko", "--run", run3)
	// Each payload its own: identical ones would be one gate (dedupe).
	big := func(i int) string { return strings.Repeat("x", 1000) + fmt.Sprint(i) }
	for i := range 2 {
		if code, out, _ := s.propose(t, tok, envelope(run3, big(i))); code != http.StatusAccepted {
			t.Fatalf("payload %d of about 1 KB: %d %v", i+1, code, out)
		}
	}
	code, out, _ = s.propose(t, tok, envelope(run3, big(2)))
	if reason, _ := out["error"].(string); code != http.StatusTooManyRequests || !strings.Contains(reason, "would pass its gate_bytes_per_run cap of 3000") {
		t.Fatalf("a payload past gate_bytes_per_run: %d %v", code, out)
	}
	if n := pendingGates(t, s); n != 23 {
		t.Fatalf("%d gates filed, want 23", n)
	}
}

// TestUnsafeOrgKeepsTheBudget: org.toml rewritten by another account of
// the yard (a writable file) with a budget of its own is refused, and the
// gateway's metering keeps the last good one in force: proactive calls
// still pass within it and are held to its cap, not the writer's.
func TestUnsafeOrgKeepsTheBudget(t *testing.T) {
	m := newMeterYardOn(t, "[budget.yuko]\ntokens_daily = 5000\n", modelAPI(t))
	proactive := m.client(t, m.task(t, "--proactive", "digest"))
	m.callBody(t, proactive, `{"model":"gpt-5","max_tokens":100,"messages":[]}`, http.StatusOK)
	// The writer's file is unsafe from the moment it is there: written
	// aside, made writable by others, then renamed in. Written in place
	// and chmodded after, the gateway could read it safe in between and
	// rightly take its budget.
	org := m.y.Path("org.toml")
	if err := os.WriteFile(org+".new", []byte("[budget.yuko]\ntokens_daily = 1000000\n"), 0o640); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(org+".new", 0o666); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(org+".new", org); err != nil {
		t.Fatal(err)
	}
	m.callBody(t, proactive, `{"model":"gpt-5","max_tokens":100,"messages":[]}`, http.StatusOK)
	body, _ := m.callBody(t, proactive, `{"model":"gpt-5","max_tokens":6000,"messages":[]}`, http.StatusTooManyRequests)
	if !strings.Contains(body, "of its daily 5000 model tokens") {
		t.Errorf("refusal %q, want the last good cap of 5000", body)
	}
}

// TestIdenticalProposalsOneGate is issue 24's six identical email-send
// proposals of one task, posted at once to a running impgw: one gate is
// filed, every answer is 202 naming it, five "duplicate": true, and the
// audit log has one gated and five duplicate proposal records.
func TestIdenticalProposalsOneGate(t *testing.T) {
	s := newSpine(t, true, bin)
	tok := s.token(t, "yuko", "--run", "r-0000000000000001", "--task", "t-0000000000000001")
	envelope := `{"intent":"email-send","payload":{"to":["boss@elsewhere.com"],"subject":"meeting tomorrow","body":"at ten"},"rationale":"r"}`
	type answer struct {
		code int
		out  map[string]any
		err  error
	}
	answers := make(chan answer, 6)
	start := make(chan struct{})
	for range 6 {
		go func() {
			<-start
			req, _ := http.NewRequest("POST", "http://"+s.listen+"/v1/actions", strings.NewReader(envelope))
			req.Header.Set("Authorization", "Bearer "+tok)
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				answers <- answer{err: err}
				return
			}
			defer resp.Body.Close()
			var out map[string]any
			err = json.NewDecoder(resp.Body).Decode(&out)
			answers <- answer{resp.StatusCode, out, err}
		}()
	}
	close(start)
	ids := map[any]bool{}
	dups := 0
	for range 6 {
		a := <-answers
		if a.err != nil || a.code != http.StatusAccepted || a.out["status"] != "pending" {
			t.Fatalf("answer %d %v %v", a.code, a.out, a.err)
		}
		ids[a.out["gate_id"]] = true
		if a.out["duplicate"] == true {
			dups++
		}
	}
	if len(ids) != 1 || dups != 5 {
		t.Errorf("gate ids %v and %d duplicates; want one gate and five duplicates", ids, dups)
	}
	if n := pendingGates(t, s); n != 1 {
		t.Errorf("%d gates filed, want 1", n)
	}
	verdicts := map[string]int{}
	b, err := os.ReadFile(s.y.Path("runs", "decisions.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	for line := range strings.Lines(string(b)) {
		var r map[string]any
		if json.Unmarshal([]byte(line), &r) == nil && r["schema"] == "impyard.proposal/1" {
			verdicts[r["verdict"].(string)]++
		}
	}
	if verdicts["gated"] != 1 || verdicts["duplicate"] != 5 {
		t.Errorf("proposal records %v, want 1 gated and 5 duplicate", verdicts)
	}
}
