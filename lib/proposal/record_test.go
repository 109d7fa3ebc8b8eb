package proposal

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"
)

// Every proposal leaves exactly one record in the audit log, whatever its
// verdict, with the decision's fields and the payload's hash and size but
// never the payload; a refusal's record is in the imp's journal too.
func TestDeciderRecordsEach(t *testing.T) {
	y := newYard(t)
	var dc Decider
	key := signer(t)
	const secret = "the-payload-itself"
	for _, tc := range []struct {
		imp, body, payload, verdict, refusal string
		entry, gate                          bool
	}{
		{"yuko", `{"intent":"launch-missiles","payload":{"x":"` + secret + `"}}`, `{"x":"` + secret + `"}`, "refused", "unknown-intent", false, false},
		{"yuko", `not json ` + secret, ``, "refused", "bad-envelope", false, false},
		{"rex", `{"intent":"message-user","payload":{"text":"` + secret + `"}}`, `{"text":"` + secret + `"}`, "refused", "trust-deny", true, false},
		{"yuko", `{"intent":"email-send","payload":{"to":["x@elsewhere.com"],"subject":"` + secret + `"}}`, `{"to":["x@elsewhere.com"],"subject":"` + secret + `"}`, "gated", "", false, true},
		{"yuko", `{"intent":"email-send","payload":{"to":["a@ourco.com"],"subject":"` + secret + `"}}`, `{"to":["a@ourco.com"],"subject":"` + secret + `"}`, "auto-approved", "", true, true},
	} {
		ap, _ := y.DecisionsPath()
		before := len(lines(t, ap, RecordSchema))
		d, err := dc.Decide(y, Proposal{Imp: tc.imp, Run: run, Body: strings.NewReader(tc.body), Rules: rules, Signer: key})
		if err != nil {
			t.Fatal(err)
		}
		recs := lines(t, ap, RecordSchema)
		if len(recs) != before+1 {
			t.Fatalf("%s: %d records after the proposal, want %d", tc.body, len(recs), before+1)
		}
		r := recs[len(recs)-1]
		wantSum, wantSize := "", 0
		if tc.payload != "" {
			s := sha256.Sum256([]byte(tc.payload))
			wantSum, wantSize = hex.EncodeToString(s[:]), len(tc.payload)
		}
		if r[FieldImp] != tc.imp || r[FieldRun] != run || r[FieldVerdict] != tc.verdict || r[FieldReason] != d.Reason ||
			r[FieldSHA256] != wantSum || r[FieldSize] != float64(wantSize) || r[FieldTime] == nil {
			t.Errorf("%s: record %v", tc.body, r)
		}
		if got, _ := r[FieldRefusal].(string); got != tc.refusal {
			t.Errorf("%s: refusal %q, want %q", tc.body, got, tc.refusal)
		}
		if _, ok := r[FieldEntry]; ok != tc.entry {
			t.Errorf("%s: trust entry %v, want one: %v", tc.body, r[FieldEntry], tc.entry)
		}
		if tc.gate && (d.Gate == nil || r[FieldGate] != d.Gate.ID) || !tc.gate && r[FieldGate] != nil {
			t.Errorf("%s: gate_id %v, decision's gate %v", tc.body, r[FieldGate], d.Gate)
		}
	}
	audit, _ := y.DecisionsPath()
	if b, _ := os.ReadFile(audit); strings.Contains(string(b), secret) {
		t.Errorf("the audit log holds a payload: %s", b)
	}
	for imp, want := range map[string]int{"yuko": 2, "rex": 1} {
		jp, _ := y.JournalPath(imp)
		if got := len(lines(t, jp, RecordSchema)); got != want {
			t.Errorf("%s's journal: %d proposal records, want its %d refusals", imp, got, want)
		}
	}
	// The journal goes into the box's brief: its copy of the trust deny
	// names no host file, as the audit log's does.
	jp, _ := y.JournalPath("rex")
	j := lines(t, jp, RecordSchema)[0]
	if j[FieldRefusal] != "trust-deny" || j[FieldReason] != "" || j[FieldEntry] != nil {
		t.Errorf("rex's journal: %v", j)
	}
	if b, _ := os.ReadFile(jp); strings.Contains(string(b), y.Root) {
		t.Errorf("rex's journal names the yard: %s", b)
	}
	if b, _ := os.ReadFile(audit); !strings.Contains(string(b), y.Root+"/org.toml [[trust]] #2") {
		t.Errorf("the audit log lost the trust entry: %s", b)
	}
}

// A run's refusals are recorded up to the cap, then the cap once, then
// no more; another run is counted apart. Concurrent refusals do not
// overshoot.
func TestDeciderRefusalCap(t *testing.T) {
	y := newYard(t)
	dc := Decider{RefusalsPerRun: 5}
	refuse := func(runID string) {
		d, err := dc.Decide(y, Proposal{Imp: "yuko", Run: runID, Body: strings.NewReader(`{"intent":"launch-missiles","payload":{}}`), Rules: rules})
		if err != nil || d.Verdict != Refused {
			t.Errorf("%+v %v", d, err)
		}
	}
	var wg sync.WaitGroup
	for range 50 {
		wg.Add(1)
		go func() { defer wg.Done(); refuse(run) }()
	}
	wg.Wait()
	ap, _ := y.DecisionsPath()
	jp, _ := y.JournalPath("yuko")
	for _, p := range []string{ap, jp} {
		if got, quota := len(lines(t, p, RecordSchema)), lines(t, p, QuotaEvent); got != 5 || len(quota) != 1 || !strings.Contains(quota[0]["why"].(string), "cap of 5 records") {
			t.Errorf("%s: %d records and quota events %v, want 5 and one", p, got, quota)
		}
	}
	refuse("r-0000000000000002")
	if got := len(lines(t, ap, RecordSchema)); got != 6 {
		t.Errorf("another run's refusal: %d records, want 6", got)
	}
	// Tokens issued without a run are counted by imp and task.
	for range 6 {
		refuse("")
	}
	if d, err := dc.Decide(y, Proposal{Imp: "yuko", Task: "t-0000000000000001", Body: strings.NewReader(`{}`), Rules: rules}); err != nil || d.Refusal != BadEnvelope {
		t.Fatalf("%+v %v", d, err)
	}
	if got := len(lines(t, ap, RecordSchema)); got != 12 {
		t.Errorf("without a run: %d records, want 12", got)
	}
	// Gated proposals are not refusals: the cap does not hold them back.
	d, err := dc.Decide(y, Proposal{Imp: "yuko", Run: run, Body: strings.NewReader(`{"intent":"email-send","payload":{"to":["x@elsewhere.com"]}}`), Rules: rules})
	if err != nil || d.Verdict != Gated {
		t.Fatalf("%+v %v", d, err)
	}
	if got := len(lines(t, ap, RecordSchema)); got != 13 {
		t.Errorf("a gated proposal past the cap: %d records, want 13", got)
	}
}

// A record that cannot be written is an error; the refusal it would have
// recorded is given back to the quota.
func TestDeciderRecordFails(t *testing.T) {
	y := newYard(t)
	dc := Decider{RefusalsPerRun: 1}
	ap, _ := y.DecisionsPath()
	if err := os.Mkdir(ap, 0o750); err != nil {
		t.Fatal(err)
	}
	body := `{"intent":"launch-missiles","payload":{}}`
	if d, err := dc.Decide(y, Proposal{Imp: "yuko", Run: run, Body: strings.NewReader(body), Rules: rules}); err == nil || d.Refusal != UnknownIntent {
		t.Fatalf("%+v %v, want the refusal and the record's error", d, err)
	}
	if err := os.Remove(ap); err != nil {
		t.Fatal(err)
	}
	if _, err := dc.Decide(y, Proposal{Imp: "yuko", Run: run, Body: strings.NewReader(body), Rules: rules}); err != nil {
		t.Fatal(err)
	}
	if got := len(lines(t, ap, RecordSchema)); got != 1 {
		t.Errorf("%d records, want the one the cap still allowed", got)
	}
}

// A quota event that cannot be written is an error too, and is written
// with the next refusal instead.
func TestDeciderQuotaEventFails(t *testing.T) {
	y := newYard(t)
	dc := Decider{RefusalsPerRun: 1}
	refuse := func() error {
		_, err := dc.Decide(y, Proposal{Imp: "yuko", Run: run, Body: strings.NewReader(`{"intent":"launch-missiles","payload":{}}`), Rules: rules})
		return err
	}
	if err := refuse(); err != nil {
		t.Fatal(err)
	}
	ap, _ := y.DecisionsPath()
	if err := os.Rename(ap, ap+".kept"); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(ap, 0o750); err != nil {
		t.Fatal(err)
	}
	if err := refuse(); err == nil {
		t.Fatal("an unwritable audit log: no error")
	}
	if err := os.Remove(ap); err != nil {
		t.Fatal(err)
	}
	if err := refuse(); err != nil {
		t.Fatal(err)
	}
	if err := refuse(); err != nil {
		t.Fatal(err)
	}
	if got := lines(t, ap, QuotaEvent); len(got) != 1 {
		t.Errorf("%d quota events, want the one written after the failure", len(got))
	}
}

// Fifty proposals of one run at once file exactly gates_per_run gates
// (default 20); the rest are refused GateCap with nothing filed, and
// refusals and failures take no slot.
func TestDeciderGateCap(t *testing.T) {
	y := newYard(t)
	var dc Decider
	propose := func(runID, body string) Decision {
		d, err := dc.Decide(y, Proposal{Imp: "yuko", Run: runID, Body: strings.NewReader(body), Rules: rules})
		if err != nil {
			t.Error(err)
		}
		return d
	}
	// Each payload its own, so the executor's dedupe files every one.
	gated := func(i int) string {
		return fmt.Sprintf(`{"intent":"email-send","payload":{"to":["x@elsewhere.com"],"subject":"n%d"}}`, i)
	}
	for range 5 {
		propose(run, `{"intent":"launch-missiles","payload":{}}`)
	}
	var mu sync.Mutex
	kinds := map[string]int{}
	var wg sync.WaitGroup
	for i := range 50 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			d := propose(run, gated(i))
			mu.Lock()
			kinds[d.Verdict.String()+"/"+d.Refusal.String()]++
			mu.Unlock()
		}()
	}
	wg.Wait()
	if kinds["gated/unexplained"] != 20 || kinds["refused/gate-cap"] != 30 {
		t.Errorf("verdicts %v, want 20 gated and 30 gate-cap", kinds)
	}
	files, _ := filepath.Glob(y.Path("gates", "pending", "*.json"))
	if len(files) != 20 {
		t.Errorf("%d gates in gates/pending, want 20", len(files))
	}
	if d := propose("r-0000000000000002", gated(50)); d.Verdict != Gated {
		t.Errorf("another run: %+v", d)
	}
}

// ParseRecord reads back what MarshalJSON writes, to the millisecond;
// other lines are ErrNotProposal, damaged ones an error naming the field.
func TestParseRecord(t *testing.T) {
	at := time.Date(2026, 7, 1, 10, 0, 0, 250e6, time.UTC)
	for _, r := range []*Record{
		{Time: at, Imp: "yuko", Run: "r-1", Task: "t-1", Intent: "email-send", Verdict: Refused, Refusal: TrustDeny,
			Reason: "intent \"email-send\" is refused for yuko by trust.toml", Entry: "trust.toml:3", SHA256: strings.Repeat("a", 64), Size: 12},
		{Time: at, Imp: "yuko", Intent: "email-send", Verdict: Refused, Refusal: PayloadRefused, Reason: "payload: to: want a list"},
		{Time: at, Imp: "yuko", Intent: "message-user", Verdict: AutoApproved, Entry: "trust.toml:1", Gate: "g-1", Size: 2},
	} {
		line, _ := r.MarshalJSON()
		got, err := ParseRecord(line)
		if err != nil {
			t.Fatalf("%s: %v", line, err)
		}
		if !reflect.DeepEqual(got, r) {
			t.Errorf("%s\nread as %+v\nwant    %+v", line, got, r)
		}
	}
	if _, err := ParseRecord([]byte(`{"schema":"impyard.decision/1","ts":"2026-07-01T10:00:00Z"}`)); err != ErrNotProposal {
		t.Errorf("a decision: %v, want ErrNotProposal", err)
	}
	for line, want := range map[string]string{
		`{"schema":"impyard.proposal/1","ts":"yesterday","verdict":"refused"}`:                               "ts",
		`{"schema":"impyard.proposal/1","ts":"2026-07-01T10:00:00Z","verdict":"maybe"}`:                      `unknown verdict "maybe"`,
		`{"schema":"impyard.proposal/1","ts":"2026-07-01T10:00:00Z","verdict":"refused","payload_size":"x"}`: "proposal record",
		`{"schema":"impyard.proposal/1"`: "unexpected end",
	} {
		if _, err := ParseRecord([]byte(line)); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: %v, want an error with %q", line, err, want)
		}
	}
	r, err := ParseRecord([]byte(`{"schema":"impyard.proposal/1","ts":"2026-07-01T10:00:00Z","verdict":"refused","refusal":"from-the-future"}`))
	if err != nil || r.Verdict != Refused || r.Refusal != Unexplained {
		t.Errorf("an unknown refusal: %+v, %v", r, err)
	}
}

// Refusals finds a task's refused proposals, as the Decider recorded
// them, and neither another task's nor its gated ones; a damaged proposal
// line of the task is reported, damage elsewhere in the log is not.
func TestRefusals(t *testing.T) {
	y := newYard(t)
	var dc Decider
	key := signer(t)
	for _, p := range []struct{ imp, task, body string }{
		{"yuko", "t-0000000000000001", `{"intent":"launch-missiles","payload":{"x":1}}`},
		{"rex", "t-0000000000000001", `{"intent":"message-user","payload":{"text":"hi"}}`},
		{"yuko", "t-0000000000000001", `{"intent":"email-send","payload":{"to":["x@elsewhere.com"],"subject":"s"}}`},
		{"yuko", "t-0000000000000002", `{"intent":"launch-missiles","payload":{"x":2}}`},
	} {
		if _, err := dc.Decide(y, Proposal{Imp: p.imp, Task: p.task, Body: strings.NewReader(p.body), Rules: rules, Signer: key}); err != nil {
			t.Fatal(err)
		}
	}
	got, bad, err := Refusals(y, "t-0000000000000001")
	if err != nil || bad != nil {
		t.Fatal(err, bad)
	}
	if len(got) != 2 || got[0].Refusal != UnknownIntent || got[1].Refusal != TrustDeny || got[1].Reason == "" {
		t.Fatalf("refusals of the task: %+v", got)
	}
	ap, _ := y.DecisionsPath()
	f, _ := os.OpenFile(ap, os.O_APPEND|os.O_WRONLY, 0)
	f.WriteString("{torn\n" + `{"schema":"impyard.proposal/1","task":"t-0000000000000001","ts":"never"}` + "\n")
	f.Close()
	got, bad, err = Refusals(y, "t-0000000000000001")
	if err != nil || len(got) != 2 || len(bad) != 1 || !strings.Contains(bad[0].Error(), "a proposal of task t-0000000000000001") {
		t.Errorf("with damage: %d refusals, bad %v, %v", len(got), bad, err)
	}
	if got, bad, err := Refusals(y, "t-0000000000000009"); got != nil || bad != nil || err != nil {
		t.Errorf("a task with none: %v %v %v", got, bad, err)
	}
}
