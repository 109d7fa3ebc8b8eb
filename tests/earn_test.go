package tests

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/impyard/impyard/lib/config"
	"github.com/impyard/impyard/lib/earn"
	"github.com/impyard/impyard/lib/gate"
	"github.com/impyard/impyard/lib/intent"
	"github.com/impyard/impyard/lib/state"
)

// kaiTOML is kai's hand-written imp.toml: an email whose body mentions a
// password always waits for the owner.
const kaiTOML = `# kai writes status reports
[[trust]]
intent = "email-send"
match = { body = "*password*" }
level = "gate"
`

// promotions lists kai's trust-promote gates.
func (s *spine) promotions(t *testing.T) []*gate.Gate {
	t.Helper()
	all, bad := gate.List(s.y, gate.Filter{All: true, Imp: "kai"})
	if len(bad) > 0 {
		t.Fatal(bad)
	}
	var out []*gate.Gate
	for _, g := range all {
		if g.Intent == intent.TrustPromote {
			out = append(out, g)
		}
	}
	return out
}

// earnSpine is a spine whose kai earns email-send after after clean
// approvals, with kaiTOML as imp.toml and impexec running; it returns the
// spine, imp.toml's path and a token of kai's.
func earnSpine(t *testing.T, after int) (s *spine, imp, tok string) {
	t.Helper()
	s = newSpine(t, true, bin)
	org, _ := os.ReadFile(s.y.Path("org.toml"))
	os.WriteFile(s.y.Path("org.toml"), append(org, fmt.Sprintf("\n[[earn]]\nintent = \"email-send\"\nimp = \"kai\"\nafter = %d\n", after)...), 0o640)
	imp = config.ImpPath(s.y, "kai")
	os.MkdirAll(s.y.Path("imps", "kai"), 0o750)
	os.WriteFile(imp, []byte(kaiTOML), 0o640)
	s.daemon(t, bin, "impexec", "run", "--rescan", "1s")
	return s, imp, s.token(t, "kai")
}

// waitingPromotion is an earnSpine whose kai has made two clean
// approvals, and the trust-promote gate they filed.
func waitingPromotion(t *testing.T) (s *spine, imp, tok string, promote *gate.Gate) {
	t.Helper()
	s, imp, tok = earnSpine(t, 2)
	s.approveExecuted(t, s.gated(t, tok, "team@ourco.com", "report 1"))
	s.approveExecuted(t, s.gated(t, tok, "team@ourco.com", "report 2"))
	return s, imp, tok, s.promotion(t)
}

// promotion waits for kai's one trust-promote gate.
func (s *spine) promotion(t *testing.T) *gate.Gate {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		if p := s.promotions(t); len(p) > 0 {
			return p[0]
		} else if time.Now().After(deadline) {
			t.Fatal("no trust-promote gate after the clean approvals [[earn]] asks for")
		}
	}
}

// rescanEarned does what impexec's next rescan does about earned trust,
// here and now: it files every promotion due (earn.ProposeAll on the
// yard as it is). A test that wants no promotion filed checks after it;
// waiting a rescan period for impexec's own stood for that, and on a
// loaded machine checked before the rescan had run.
func (s *spine) rescanEarned(t *testing.T) {
	t.Helper()
	org, err := config.LoadOrg(s.y)
	if err != nil {
		t.Fatal(err)
	}
	filed, errs := earn.ProposeAll(s.y, org)
	for _, err := range errs {
		if !errors.Is(err, earn.ErrNoNarrowEntry) {
			t.Error(err)
		}
	}
	for _, p := range filed {
		t.Logf("the rescan filed trust-promote gate %s", p.ID)
	}
}

// afterSecondOf returns once the clock has left the whole second at (a
// time the yard recorded) is in: the wait is for the clock itself.
func afterSecondOf(at time.Time) {
	time.Sleep(time.Until(at.Truncate(time.Second).Add(time.Second)))
}

// gated proposes an email from kai and checks that it waits at the desk.
func (s *spine) gated(t *testing.T, tok, to, body string) string {
	t.Helper()
	code, out, _ := s.propose(t, tok, fmt.Sprintf(`{"intent":"email-send","payload":{"to":[%q],"subject":"status","body":%q}}`, to, body))
	if code != http.StatusAccepted || out["status"] != "pending" {
		t.Fatalf("email to %s (%s): want pending, got %d %v", to, body, code, out)
	}
	return out["gate_id"].(string)
}

// approveExecuted approves a gate at the desk and waits for its execution.
func (s *spine) approveExecuted(t *testing.T, gid string) {
	t.Helper()
	if out, err := s.run(t, "impgate", "approve", gid); err != nil {
		t.Fatalf("approve %s: %v %s", gid, err, out)
	}
	if g := s.waitState(t, gid, state.Executed, state.Failed); g.State != state.Executed {
		t.Fatalf("gate %s ended %s: %s", gid, g.State, g.History[len(g.History)-1].Why)
	}
}

// TestEarnedTrust is earned promotion end to end with impgw, impexec and
// impgate as processes: a deny resets the count; five clean approvals
// file exactly one trust-promote gate, however many approvals follow
// before and after the owner decides it; impgate show shows the entry and
// its gates; approved, the entry is appended to imp.toml (the old kept)
// and auto-approves a matching proposal but not a new recipient, nor
// what a hand-written gate entry holds back; a deny of a gate the earned
// entry would have approved removes it and says so.
func TestEarnedTrust(t *testing.T) {
	s, imp, tok := earnSpine(t, 5)
	report := func(i int) string { return fmt.Sprintf("report %d", i) }

	// Two approvals, then a deny: the count starts again.
	s.approveExecuted(t, s.gated(t, tok, "team@ourco.com", report(1)))
	s.approveExecuted(t, s.gated(t, tok, "team@ourco.com", report(2)))
	denied := s.gated(t, tok, "team@ourco.com", report(3))
	if out, err := s.run(t, "impgate", "deny", "--reason", "not today", denied); err != nil {
		t.Fatalf("deny: %v %s", err, out)
	}
	// Decisions are recorded in whole seconds; of a deny and an approval
	// in the same second the deny counts as the later. The approvals
	// below come after the second the deny was recorded in has passed.
	afterSecondOf(s.waitState(t, denied, state.Denied).Updated)
	var rests []string
	for i := 4; i <= 7; i++ {
		gid := s.gated(t, tok, "team@ourco.com", report(i))
		s.approveExecuted(t, gid)
		rests = append(rests, gid)
	}
	s.rescanEarned(t)
	if p := s.promotions(t); len(p) != 0 {
		t.Fatalf("six approvals with a deny after the second filed a promotion: %s", p[0].ID)
	}

	// The fifth approval since the deny files one trust-promote gate.
	gid := s.gated(t, tok, "team@ourco.com", report(8))
	s.approveExecuted(t, gid)
	rests = append(rests, gid)
	promote := s.promotion(t)
	show, err := s.run(t, "impgate", "show", promote.ID)
	if err != nil {
		t.Fatalf("show: %v\n%s", err, show)
	}
	for _, want := range append([]string{"intent     trust-promote", "proposed entry (appended to imp.toml on approval):",
		`match = { subject = "status", to = "team@ourco.com" }`, `free = ["body"]`, "earned = true",
		"WIDER than the approvals it rests on:\n  body: free, any value\n",
		"rests on 5 gate(s) the owner approved:", "\n  intent = \"email-send\"\n",
		`executed  by alice at `, `{"body":"report 4","subject":"status","to":["team@ourco.com"]}`, "goes to    trust-promote an earned [[trust]] entry appended to " + imp}, rests...) {
		if !strings.Contains(show, want) {
			t.Errorf("impgate show lacks %q:\n%s", want, show)
		}
	}

	// A sixth approval while the promotion waits files no second one; a
	// seventh matching proposal is left waiting, gated as before.
	s.approveExecuted(t, s.gated(t, tok, "team@ourco.com", report(9)))
	early := s.gated(t, tok, "team@ourco.com", report(10))
	s.rescanEarned(t)
	if p := s.promotions(t); len(p) != 1 {
		t.Fatalf("%d trust-promote gates, want 1", len(p))
	}

	s.approveExecuted(t, promote.ID)
	b, _ := os.ReadFile(imp)
	for _, want := range []string{kaiTOML, "earned = true", "# earned: approved with trust-promote gate " + promote.ID, `gates = ["` + strings.Join(rests, `", "`) + `"]`} {
		if !strings.Contains(string(b), want) {
			t.Errorf("imp.toml lacks %q:\n%s", want, b)
		}
	}
	if old, _ := os.ReadFile(imp + ".1"); string(old) != kaiTOML {
		t.Errorf("imp.toml.1 is not the previous file:\n%s", old)
	}

	// The earned entry approves a matching proposal, not a new
	// recipient, and not what the hand-written entry gates.
	code, out, _ := s.propose(t, tok, `{"intent":"email-send","payload":{"to":["team@ourco.com"],"subject":"status","body":"report 11"}}`)
	if code != http.StatusOK || out["status"] != "done" {
		t.Fatalf("a matching proposal after the promotion: %d %v", code, out)
	}
	auto, _ := gate.Get(s.y, out["gate_id"].(string))
	if auto.Trust == nil || auto.Trust.Level != config.Auto || !strings.Contains(auto.Trust.Entry, imp) {
		t.Errorf("auto-approved by %+v, want the earned entry in %s", auto.Trust, imp)
	}
	s.gated(t, tok, "new@ourco.com", report(12))
	password := s.gated(t, tok, "team@ourco.com", "the password is hunter2")
	s.rescanEarned(t)
	if p := s.promotions(t); len(p) != 1 {
		t.Fatalf("%d trust-promote gates after the promotion, want 1", len(p))
	}

	// Denying what the hand-written entry held back agrees with the
	// ladder: the earned entry stays.
	if out, err := s.run(t, "impgate", "deny", password); err != nil || strings.Contains(out, "removed") {
		t.Fatalf("deny of the password email: %v %s", err, out)
	}
	if b, _ := os.ReadFile(imp); !strings.Contains(string(b), "earned = true") {
		t.Fatalf("a deny the earned entry agrees with removed it:\n%s", b)
	}
	// Denying the gate filed before the promotion, which the earned entry
	// would now approve, is the owner disagreeing: the entry goes.
	out2, err := s.run(t, "impgate", "deny", "--reason", "not like this", early)
	if err != nil || !strings.Contains(out2, "1 earned entry for email-send removed from "+imp) || !strings.Contains(out2, "previous kept as imp.toml.2") {
		t.Fatalf("disagreeing deny: %v %s", err, out2)
	}
	if b, _ := os.ReadFile(imp); string(b) != kaiTOML {
		t.Errorf("imp.toml after the removal is not the owner's:\n%s", b)
	}
	journal, _ := os.ReadFile(s.y.Path("journal", "kai", "events.jsonl"))
	audit, _ := os.ReadFile(s.y.Decisions())
	for _, want := range []string{`"event":"trust-earned"`, `"event":"trust-earned-removed","imp":"kai","actor":"impgate","by":"alice","id":"` + early} {
		if !strings.Contains(string(journal), want) || !strings.Contains(string(audit), want) {
			t.Errorf("journal or audit log lacks %s", want)
		}
	}
	s.gated(t, tok, "team@ourco.com", report(13))

	// A box cannot propose a promotion of its own.
	code, out, _ = s.propose(t, tok, `{"intent":"trust-promote","payload":{"intent":"email-send","level":"auto","earned":true,"gates":["`+early+`"]}}`)
	if code == http.StatusOK || code == http.StatusAccepted || !strings.Contains(fmt.Sprint(out["error"]), "filed only by impyard") {
		t.Errorf("a box proposing trust-promote: %d %v", code, out)
	}
}

// TestEarnedTrustBrokenWhileWaiting: the owner denies a proposal while
// its promotion waits; impgate deny says the promotion now rests on a
// broken streak, and approved anyway it fails with the deny named and
// imp.toml untouched.
func TestEarnedTrustBrokenWhileWaiting(t *testing.T) {
	s, imp, tok, promote := waitingPromotion(t)

	denied := s.gated(t, tok, "team@ourco.com", "report 3")
	out, err := s.run(t, "impgate", "deny", "--reason", "wrong figures", denied)
	if err != nil || !strings.Contains(out, "trust-promote gate "+promote.ID+" rests on approvals of kai email-send that this deny broke") {
		t.Fatalf("deny while the promotion waits: %v\n%s", err, out)
	}
	if out, err := s.run(t, "impgate", "approve", promote.ID); err != nil {
		t.Fatalf("approve %s: %v %s", promote.ID, err, out)
	}
	g := s.waitState(t, promote.ID, state.Executed, state.Failed)
	if why := g.History[len(g.History)-1].Why; g.State != state.Failed || !strings.Contains(why, "the owner denied gate "+denied) {
		t.Fatalf("promotion approved after its streak broke ended %s: %s", g.State, why)
	}
	if b, _ := os.ReadFile(imp); string(b) != kaiTOML {
		t.Errorf("imp.toml after a broken promotion:\n%s", b)
	}
	if _, err := os.Stat(imp + ".1"); err == nil {
		t.Error("a broken promotion left imp.toml.1")
	}
}

// TestHandWrittenPromotionRefused: the promotion impexec filed, its
// payload rewritten in gates/pending/ (sha256 and all) to free the
// address fields, is shown at the desk as not what the approvals derive;
// approved with the owner's key, impexec refuses it with that reason and
// imp.toml is unchanged. (TestEarnedTrust executes a genuine one.)
func TestHandWrittenPromotionRefused(t *testing.T) {
	s, imp, _, promote := waitingPromotion(t)
	p := s.y.Path("gates", "pending", promote.ID+".json")
	genuine, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	// The same promotion, filed again by hand under another id with a
	// wider entry.
	var m map[string]any
	json.Unmarshal(genuine, &m)
	entry := m["payload"].(map[string]any)
	delete(entry, "match")
	entry["free"] = []string{"body", "subject", "to", "bcc", "cc"}
	body, _ := json.Marshal(entry)
	canon, _ := gate.Canonical(body)
	hand := "g-0000000000000077"
	m["id"], m["payload"], m["sha256"] = hand, json.RawMessage(canon), gate.Sum(canon)
	b, _ := json.Marshal(m)
	os.Remove(p) // only the forgery waits, as if the genuine one were never filed
	if err := os.WriteFile(s.y.Path("gates", "pending", hand+".json"), b, 0o640); err != nil {
		t.Fatal(err)
	}
	if show, err := s.run(t, "impgate", "show", hand); err != nil || !strings.Contains(show, "NOT WHAT THE APPROVALS DERIVE (impexec will append nothing): ") {
		t.Errorf("impgate show of the hand-written promotion: %v\n%s", err, show)
	}
	if out, err := s.run(t, "impgate", "approve", hand); err != nil {
		t.Fatalf("approve %s: %v %s", hand, err, out)
	}
	g := s.waitState(t, hand, state.Executed, state.Failed)
	if why := g.History[len(g.History)-1].Why; g.State != state.Failed || !strings.Contains(why, `field "to" (addresses) is free; an earned entry never frees an address`) {
		t.Fatalf("hand-written promotion ended %s: %s", g.State, why)
	}
	if b, _ := os.ReadFile(imp); string(b) != kaiTOML {
		t.Errorf("imp.toml after a hand-written promotion:\n%s", b)
	}
}

// TestDenyRemovesEarnedFirst: impgate deny killed between removing the
// earned entry its deny disagrees with and committing the deny leaves the
// gate pending and the entry gone, never the deny without the removal;
// the deny run again commits and removes nothing more.
func TestDenyRemovesEarnedFirst(t *testing.T) {
	s, imp, tok, promote := waitingPromotion(t)
	early := s.gated(t, tok, "team@ourco.com", "report 3")
	s.approveExecuted(t, promote.ID)
	if b, _ := os.ReadFile(imp); !strings.Contains(string(b), "earned = true") {
		t.Fatalf("no earned entry after the promotion:\n%s", b)
	}

	cmd := exec.Command(filepath.Join(crashBin, "impgate"), "deny", early)
	cmd.Env = append(os.Environ(), append(s.env, "IMPYARD_CRASH=after-earned-removal")...)
	out, err := cmd.CombinedOutput()
	if ws, ok := cmd.ProcessState.Sys().(syscall.WaitStatus); !ok || !ws.Signaled() {
		t.Fatalf("impgate deny did not die at the crash point: %v\n%s", err, out)
	}
	if b, _ := os.ReadFile(imp); string(b) != kaiTOML {
		t.Errorf("imp.toml after a deny killed before its commit:\n%s", b)
	}
	if g, err := gate.Get(s.y, early); err != nil || g.State != state.Filed {
		t.Fatalf("gate %s after the killed deny: %v %v", early, g.State, err)
	}

	out2, err := s.run(t, "impgate", "deny", early)
	if err != nil || !strings.Contains(out2, early+" denied by alice") || strings.Contains(out2, "removed") {
		t.Fatalf("deny again: %v\n%s", err, out2)
	}
	journal, _ := os.ReadFile(s.y.Path("journal", "kai", "events.jsonl"))
	if n := strings.Count(string(journal), `"event":"trust-earned-removed"`); n != 1 {
		t.Errorf("%d trust-earned-removed records, want 1", n)
	}
}
