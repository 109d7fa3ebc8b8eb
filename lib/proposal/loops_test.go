package proposal

import (
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/impyard/impyard/internal/testclock"
	"github.com/impyard/impyard/lib/config"
	"github.com/impyard/impyard/lib/desk"
	"github.com/impyard/impyard/lib/gate"
	"github.com/impyard/impyard/lib/state"
	"github.com/impyard/impyard/lib/yard"
)

// Six identical email-send proposals of one task, made at once, file one
// gate: every answer names it, five as duplicates, and the audit log has
// one gated record and five duplicate ones.
func TestDedupeConcurrent(t *testing.T) {
	y := newYard(t)
	var dc Decider
	body := `{"intent":"email-send","payload":{"to":["x@elsewhere.com"],"subject":"meeting tomorrow"}}`
	var wg sync.WaitGroup
	start := make(chan struct{})
	ds := make([]Decision, 6)
	for i := range ds {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			d, err := dc.Decide(y, Proposal{Imp: "yuko", Run: run, Task: "", Body: strings.NewReader(body), Rules: rules})
			if err != nil {
				t.Error(err)
			}
			ds[i] = d
		}()
	}
	close(start)
	wg.Wait()
	verdicts := map[Verdict]int{}
	for _, d := range ds {
		verdicts[d.Verdict]++
		if d.Gate == nil || d.Gate.ID != ds[0].Gate.ID {
			t.Fatalf("decisions name different gates: %+v", ds)
		}
	}
	if verdicts[Gated] != 1 || verdicts[Duplicate] != 5 {
		t.Errorf("verdicts %v, want one gated and five duplicates", verdicts)
	}
	if gs, _ := gate.List(y, gate.Filter{All: true}); len(gs) != 1 {
		t.Errorf("%d gates filed, want 1", len(gs))
	}
	ap, _ := y.DecisionsPath()
	recs := lines(t, ap, "impyard.proposal/1")
	dups := 0
	for _, r := range recs {
		if r["verdict"] == "duplicate" && r["gate_id"] == ds[0].Gate.ID {
			dups++
		}
	}
	if len(recs) != 6 || dups != 5 {
		t.Errorf("%d proposal records, %d duplicates naming the gate; want 6 and 5", len(recs), dups)
	}
}

// A duplicate is one of the same imp, intent and payload (its canonical
// form: key order and spacing do not make a new one), pending or decided
// within the executor's dedupe; after it, or with dedupe = "0", the
// proposal is filed again.
func TestDedupeWindow(t *testing.T) {
	now := testclock.Freeze(t, &state.Now)
	y := newYard(t)
	propose := func(imp, body string) Decision {
		t.Helper()
		d, _ := Decide(y, Proposal{Imp: imp, Run: run, Body: strings.NewReader(body), Rules: rules})
		if d.Verdict == Refused {
			t.Fatalf("refused: %v %s", d.Refusal, d.Reason)
		}
		return d
	}
	mail := `{"intent":"email-send","payload":{"to":["x@elsewhere.com"],"subject":"s"}}`
	first := propose("yuko", mail)
	if first.Verdict != Gated {
		t.Fatalf("first: %v", first.Verdict)
	}
	same := `{"intent":"email-send","payload":{ "subject":"s", "to":["x@elsewhere.com"]}}`
	if d := propose("yuko", same); d.Verdict != Duplicate || d.Gate.ID != first.Gate.ID {
		t.Errorf("the same payload reordered: %v %s", d.Verdict, d.Reason)
	}
	if d := propose("rex", mail); d.Verdict != Gated || d.Gate.ID == first.Gate.ID {
		t.Errorf("another imp's identical proposal: %v", d.Verdict)
	}
	if d := propose("yuko", strings.Replace(mail, `"s"`, `"t"`, 1)); d.Verdict != Gated {
		t.Errorf("another payload: %v", d.Verdict)
	}
	// Denied 59 minutes ago: still a duplicate; 61 minutes: filed anew.
	if _, err := gate.Move(y, first.Gate.ID, gate.Change{To: state.Denied, By: "alice", Why: "no"}); err != nil {
		t.Fatal(err)
	}
	state.Now = func() time.Time { return now.Add(59 * time.Minute) }
	if d := propose("yuko", mail); d.Verdict != Duplicate || d.Gate.ID != first.Gate.ID || d.Gate.State != state.Denied {
		t.Errorf("59 minutes after the denial: %v %+v", d.Verdict, d.Gate)
	}
	state.Now = func() time.Time { return now.Add(61 * time.Minute) }
	again := propose("yuko", mail)
	if again.Verdict != Gated || again.Gate.ID == first.Gate.ID {
		t.Errorf("61 minutes after the denial: %v", again.Verdict)
	}

	// dedupe = "0": every proposal is filed.
	writeOrg(t, y, strings.Replace(org, "[executors.email-send]\n", "[executors.email-send]\ndedupe = \"0\"\n", 1))
	if d := propose("yuko", mail); d.Verdict != Gated || d.Gate.ID == again.Gate.ID {
		t.Errorf("with dedupe off: %v", d.Verdict)
	}
}

func writeOrg(t *testing.T, y *yard.Yard, text string) {
	t.Helper()
	if err := os.WriteFile(y.Path("org.toml"), []byte(text), 0o640); err != nil {
		t.Fatal(err)
	}
	if _, err := config.LoadOrg(y); err != nil {
		t.Fatal(err)
	}
}

// rateOrg lets email-send to ourco.com through twice an hour.
var rateOrg = strings.Replace(org, `free = ["subject", "body"]
level = "auto"`, `free = ["subject", "body"]
level = "auto"
rate = "2/1h"`, 1)

// An auto entry's rate: past it, the proposal is filed for a human, its
// trust verdict naming the rate; the count is read from the gates, so a
// new Decider (a restarted gateway) does not reset it; an hour later the
// entry approves again.
func TestTrustRate(t *testing.T) {
	now := testclock.Freeze(t, &state.Now)
	y := newYard(t)
	writeOrg(t, y, rateOrg)
	key := signer(t)
	n := 0
	propose := func(dc *Decider) Decision {
		t.Helper()
		n++
		body := fmt.Sprintf(`{"intent":"email-send","payload":{"to":["a@ourco.com"],"subject":"n%d"}}`, n)
		d, err := dc.Decide(y, Proposal{Imp: "yuko", Run: run, Body: strings.NewReader(body), Rules: rules, Signer: key})
		if err != nil || d.Verdict == Refused {
			t.Fatalf("refused: %v %s %v", d.Refusal, d.Reason, err)
		}
		return d
	}
	var dc Decider
	for i := range 2 {
		if d := propose(&dc); d.Verdict != AutoApproved {
			t.Fatalf("approval %d: %v %s", i+1, d.Verdict, d.Reason)
		}
	}
	d := propose(&dc)
	if d.Verdict != Gated || d.Gate.State != state.Filed || d.Gate.Approval != nil {
		t.Fatalf("third in the hour: %v %s", d.Verdict, d.Gate.State)
	}
	g, err := gate.Get(y, d.Gate.ID)
	if err != nil {
		t.Fatal(err)
	}
	if g.Trust == nil || g.Trust.Reason != gate.RateReason || g.Trust.Level != config.Gate || !strings.Contains(g.Trust.Entry, "[[trust]] #1") {
		t.Errorf("trust of the gate past the rate: %+v", g.Trust)
	}
	if v := desk.Verdict(g); !strings.Contains(v, "rate 2/1h: 2 auto-approvals of yuko in the last 1h") || !strings.HasPrefix(v, "gated by ") {
		t.Errorf("verdict shown: %q", v)
	}
	if !strings.Contains(d.Reason, "rate 2/1h") {
		t.Errorf("the box is told %q", d.Reason)
	}
	if d := propose(new(Decider)); d.Verdict != Gated {
		t.Errorf("after a restart: %v", d.Verdict)
	}
	state.Now = func() time.Time { return now.Add(time.Hour + time.Second) }
	if d := propose(new(Decider)); d.Verdict != AutoApproved {
		t.Errorf("an hour later: %v %s", d.Verdict, d.Reason)
	}
}

// Five proposals the entry would approve, made at once, are approved
// twice: the count and the filing are one transaction.
func TestTrustRateConcurrent(t *testing.T) {
	y := newYard(t)
	writeOrg(t, y, rateOrg)
	key := signer(t)
	var dc Decider
	var wg sync.WaitGroup
	var mu sync.Mutex
	verdicts := map[Verdict]int{}
	for i := range 5 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			body := fmt.Sprintf(`{"intent":"email-send","payload":{"to":["a@ourco.com"],"subject":"c%d"}}`, i)
			d, _ := dc.Decide(y, Proposal{Imp: "yuko", Run: run, Body: strings.NewReader(body), Rules: rules, Signer: key})
			mu.Lock()
			verdicts[d.Verdict]++
			mu.Unlock()
		}()
	}
	wg.Wait()
	if verdicts[AutoApproved] != 2 || verdicts[Gated] != 3 {
		t.Errorf("verdicts %v, want 2 auto-approved and 3 gated", verdicts)
	}
	approved := 0
	gs, _ := gate.List(y, gate.Filter{All: true})
	for _, g := range gs {
		if g.State != state.Filed {
			approved++
		}
	}
	if len(gs) != 5 || approved != 2 {
		t.Errorf("%d gates, %d approved; want 5 and 2", len(gs), approved)
	}
}

// An entry's rate counts the auto-approvals of that entry, wherever it
// stands in org.toml: an entry written above it moves it to #2, and it
// is still spent; its rate raised, it approves as many more as the new
// rate allows, not a whole new count.
func TestTrustRateFollowsTheEntry(t *testing.T) {
	testclock.Freeze(t, &state.Now)
	y := newYard(t)
	writeOrg(t, y, rateOrg)
	key := signer(t)
	n := 0
	propose := func() Decision {
		t.Helper()
		n++
		body := fmt.Sprintf(`{"intent":"email-send","payload":{"to":["a@ourco.com"],"subject":"n%d"}}`, n)
		d, err := new(Decider).Decide(y, Proposal{Imp: "yuko", Run: run, Body: strings.NewReader(body), Rules: rules, Signer: key})
		if err != nil || d.Verdict == Refused {
			t.Fatalf("refused: %v %s %v", d.Refusal, d.Reason, err)
		}
		return d
	}
	for i := range 2 {
		if d := propose(); d.Verdict != AutoApproved {
			t.Fatalf("approval %d: %v %s", i+1, d.Verdict, d.Reason)
		}
	}
	above := "[[trust]]\nintent = \"message-user\"\nimp = \"rex\"\nlevel = \"gate\"\n" + rateOrg
	writeOrg(t, y, above)
	d := propose()
	if d.Verdict != Gated || d.Gate == nil || d.Gate.Trust == nil || d.Gate.Trust.Reason != gate.RateReason || !strings.Contains(d.Gate.Trust.Entry, "[[trust]] #2") {
		t.Errorf("the spent entry moved to #2: %v %s, want gated for its rate", d.Verdict, d.Reason)
	}
	writeOrg(t, y, strings.Replace(above, `rate = "2/1h"`, `rate = "3/1h"`, 1))
	if d := propose(); d.Verdict != AutoApproved {
		t.Errorf("the entry's rate raised to 3: %v %s, want one more auto-approval", d.Verdict, d.Reason)
	}
	if d := propose(); d.Verdict != Gated {
		t.Errorf("the entry's rate raised to 3, spent: %v %s, want gated, its count kept", d.Verdict, d.Reason)
	}
}
