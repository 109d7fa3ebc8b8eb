package control

import (
	"encoding/json"
	"net/http"
	"os"
	"strings"
	"sync"
	"testing"

	"github.com/impyard/impyard/lib/proposal"
	"github.com/impyard/impyard/lib/queue"
	"github.com/impyard/impyard/lib/store"
)

// proposalRecords returns the proposal records of the audit log, decoded.
func proposalRecords(t *testing.T, f *fixture) []map[string]any {
	t.Helper()
	var out []map[string]any
	if _, err := store.ReadJSONL(f.y.Path("runs", "decisions.jsonl"), func(line []byte) error {
		var m map[string]any
		if err := json.Unmarshal(line, &m); err != nil {
			return err
		}
		if m[proposal.FieldSchema] == proposal.RecordSchema {
			out = append(out, m)
		}
		return nil
	}); err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	return out
}

// Each kind of proposal, refused or not, gets the answer it always got
// and leaves exactly one record naming its verdict.
func TestEveryProposalRecorded(t *testing.T) {
	f := newFixture(t)
	os.WriteFile(f.y.Path("org.toml"), []byte(strings.Replace(org, "log = \"mail.jsonl\"", "log = \"mail.jsonl\"\ncost = 1.0", 1)), 0o640)
	pro, _, _ := queue.Add(f.y, queue.AddOptions{Imp: "yuko", Text: "digest", Proactive: true, By: "cron", Actor: "test"})
	f.executor(t)
	yuko, rex, proTok := f.token(t, "yuko", ""), f.token(t, "rex", ""), f.token(t, "yuko", pro)
	for _, tc := range []struct {
		tok, body        string
		code             int
		want             string // in the error, or the status
		verdict, refusal string
	}{
		{yuko, `not json`, 400, "envelope", "refused", "bad-envelope"},
		{yuko, `{"payload":{}}`, 400, "no intent", "refused", "bad-envelope"},
		{yuko, `{"intent":"email-send","payload":"` + strings.Repeat("x", MaxEnvelope) + `"}`, 413, "limit", "refused", "too-large"},
		{yuko, `{"intent":"email-send","payload":{},"run_id":"r-0000000000000009"}`, 403, "not this token's run", "refused", "not-own"},
		{yuko, `{"intent":"launch-missiles","payload":{}}`, 403, "names no rule", "refused", "unknown-intent"},
		{yuko, `{"intent":"status-page","payload":{}}`, 400, `no executor is configured for intent "status-page"`, "refused", "no-executor"},
		{yuko, `{"intent":"email-send","payload":{"to":["team@ourco.com"],"from":"attacker@evil.com"}}`, 400, `field "from" is not a declared field`, "refused", "payload-refused"},
		{yuko, `{"intent":"egress-grant","payload":{"name":"x","match":{"host":"a.example"},"verdict":"tunnel"}}`, 400, "tunnel", "refused", "payload-refused"},
		{rex, `{"intent":"message-user","payload":{"text":"hi"}}`, 403, "refused for rex", "refused", "trust-deny"},
		{yuko, `{"intent":"email-send","payload":{"to":["x@elsewhere.com"]}}`, 202, "pending", "gated", ""},
		{proTok, `{"intent":"email-send","payload":{"to":["a@ourco.com"],"subject":"first"}}`, 200, "done", "auto-approved", ""},
		{proTok, `{"intent":"email-send","payload":{"to":["a@ourco.com"],"subject":"second"}}`, 429, "wait for tomorrow", "refused", "over-budget"},
	} {
		before := len(proposalRecords(t, f))
		code, out := f.do(t, tc.tok, "POST", "/v1/actions", tc.body)
		said, _ := out["error"].(string)
		if said == "" {
			said, _ = out["status"].(string)
		}
		if code != tc.code || !strings.Contains(said, tc.want) {
			t.Errorf("%.60s: got %d %v, want %d %q", tc.body, code, out, tc.code, tc.want)
		}
		recs := proposalRecords(t, f)
		if len(recs) != before+1 {
			t.Errorf("%.60s: %d records, want exactly one more than %d", tc.body, len(recs), before)
			continue
		}
		r := recs[len(recs)-1]
		refusal, _ := r[proposal.FieldRefusal].(string)
		if r[proposal.FieldVerdict] != tc.verdict || refusal != tc.refusal {
			t.Errorf("%.60s: recorded %v", tc.body, r)
		}
		if id, ok := out["gate_id"]; ok && r[proposal.FieldGate] != id {
			t.Errorf("%.60s: answered gate %v, recorded %v", tc.body, id, r[proposal.FieldGate])
		}
	}
}

// A box that sends refusal after refusal gets every answer, but the log
// holds the run's first DefaultRefusalsPerRun and one proposal-quota
// event; concurrency does not overshoot the cap.
func TestProposalRefusalFlood(t *testing.T) {
	f := newFixture(t)
	tok := f.token(t, "yuko", "")
	const sent = proposal.DefaultRefusalsPerRun + 200
	var wg sync.WaitGroup
	var mu sync.Mutex
	codes := map[int]int{}
	for range sent {
		wg.Add(1)
		go func() {
			defer wg.Done()
			code, _ := f.do(t, tok, "POST", "/v1/actions", `{"intent":"launch-missiles","payload":{}}`)
			mu.Lock()
			codes[code]++
			mu.Unlock()
		}()
	}
	wg.Wait()
	if codes[http.StatusForbidden] != sent {
		t.Fatalf("statuses %v, want %d refusals", codes, sent)
	}
	if got := len(proposalRecords(t, f)); got != proposal.DefaultRefusalsPerRun {
		t.Errorf("%d proposal records, want %d", got, proposal.DefaultRefusalsPerRun)
	}
	for name, path := range map[string]string{"audit log": f.y.Path("runs", "decisions.jsonl"), "journal": f.y.Path("journal", "yuko", "events.jsonl")} {
		if got := events(t, path)[proposal.QuotaEvent]; got != 1 {
			t.Errorf("%s: %d %s events, want 1", name, got, proposal.QuotaEvent)
		}
	}
}

// The refusals that come from the yard rather than the box: an
// auto-approval the gateway cannot sign (400, as before) and a ledger it
// cannot read (500); each leaves its one record too.
func TestYardRefusalsRecorded(t *testing.T) {
	f := newFixture(t)
	f.api.Signer = nil
	code, out := f.do(t, f.token(t, "yuko", ""), "POST", "/v1/actions", `{"intent":"email-send","payload":{"to":["a@ourco.com"]}}`)
	if code != http.StatusBadRequest || !strings.Contains(out["error"].(string), "signed") {
		t.Errorf("unsigned auto: %d %v", code, out)
	}
	pro, _, _ := queue.Add(f.y, queue.AddOptions{Imp: "yuko", Text: "digest", Proactive: true, By: "cron", Actor: "test"})
	if err := os.MkdirAll(f.y.Path("ledger", "yuko.jsonl"), 0o750); err != nil {
		t.Fatal(err)
	}
	if code, out := f.do(t, f.token(t, "yuko", pro), "POST", "/v1/actions", `{"intent":"email-send","payload":{"to":["x@elsewhere.com"]}}`); code != http.StatusInternalServerError {
		t.Errorf("unreadable ledger: %d %v", code, out)
	}
	recs := proposalRecords(t, f)
	if len(recs) != 2 || recs[0][proposal.FieldRefusal] != "not-filed" || recs[1][proposal.FieldRefusal] != "failed" {
		t.Errorf("records %v", recs)
	}
}
