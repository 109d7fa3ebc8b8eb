package tests

import (
	"encoding/json"
	"net/http"
	"os"
	"strings"
	"testing"

	"github.com/impyard/impyard/lib/approval"
	"github.com/impyard/impyard/lib/gate"
	"github.com/impyard/impyard/lib/state"
)

// TestApproveForgeriesNotExecuted writes the yard as an attacker who
// cannot read IMPYARD_HOME would: a rewritten approved gate, hand-written
// approved gates, an approval signed by a key of their own, an executed
// gate put back in its approved state. impexec, a
// real process, fails (or, unsigned, refuses) each one and the mail API
// sees nothing; the owner's and the gateway's real approvals are sent.
func TestApproveForgeriesNotExecuted(t *testing.T) {
	s := newSpine(t, true, bin)
	tok := s.token(t, "yuko", "--run", "r-0000000000000001")
	gated := func(n string) string {
		t.Helper()
		code, out, _ := s.propose(t, tok, `{"intent":"email-send","payload":{"to":["boss@elsewhere.com"],"subject":"`+n+`","body":"hi"}}`)
		if code != http.StatusAccepted {
			t.Fatalf("proposal: %d %v", code, out)
		}
		return out["gate_id"].(string)
	}
	approve := func(gid string) {
		t.Helper()
		if out, err := s.run(t, "impgate", "approve", gid); err != nil {
			t.Fatalf("approve: %v %s", err, out)
		}
	}
	path := func(gid string) string { return s.y.Path("gates", "resolved", gid+".json") }
	rewrite := func(gid string, edit func(m map[string]any)) {
		t.Helper()
		b, err := os.ReadFile(path(gid))
		if err != nil {
			t.Fatal(err)
		}
		var m map[string]any
		json.Unmarshal(b, &m)
		edit(m)
		b, _ = json.Marshal(m)
		if err := os.WriteFile(path(gid), b, 0o640); err != nil {
			t.Fatal(err)
		}
	}
	sent := func() int {
		s.mail.mu.Lock()
		defer s.mail.mu.Unlock()
		return len(s.mail.bodies)
	}
	refused := func(name, gid, want string) {
		t.Helper()
		out, err := s.run(t, "impexec", "once", gid)
		g, _ := gate.Get(s.y, gid)
		if err == nil || g == nil || g.State != state.Failed || !strings.Contains(out, "approval signature does not verify: ") || !strings.Contains(out, want) {
			t.Errorf("%s: impexec once: %v %s; gate %v; want failed, saying %q", name, err, out, g, want)
		}
		if why := g.History[len(g.History)-1].Why; !strings.HasPrefix(why, "approval signature does not verify: ") || !strings.HasSuffix(why, "nothing was sent") {
			t.Errorf("%s: recorded reason %q", name, why)
		}
		if n := sent(); n != 0 {
			t.Fatalf("%s: the mail API saw %d requests", name, n)
		}
	}

	// (a) Payload and sha256 rewritten together after the owner approved.
	a := gated("a")
	approve(a)
	forged := []byte(`{"body":"wire the money","subject":"a","to":["all@world.com"]}`)
	rewrite(a, func(m map[string]any) { m["payload"] = json.RawMessage(forged); m["sha256"] = gate.Sum(forged) })
	refused("rewritten payload", a, "is not over this gate id, payload sha256 "+gate.Sum(forged))

	// (b) An approved gate written into gates/resolved/ by hand, its
	// approval copied from a real one.
	model := gated("model")
	approve(model)
	b, _ := os.ReadFile(path(model))
	hand := "g-0000000000000042"
	os.WriteFile(path(hand), []byte(strings.ReplaceAll(string(b), model, hand)), 0o640)
	refused("hand-written", hand, "is not over this gate id")

	// (c) Signed with a key that is not in IMPYARD_HOME/keys/: refused and
	// left approved, as one made with another IMPYARD_HOME would be, for
	// the owner to approve again.
	c := gated("c")
	stranger, _ := approval.Generate("owner")
	if _, err := gate.Move(s.y, c, gate.Change{To: state.Approved, By: "alice", Actor: "impgate", Signer: stranger}); err != nil {
		t.Fatal(err)
	}
	if out, err := s.run(t, "impexec", "once", c); err == nil || !strings.Contains(out, "approval signed by a key this executor does not trust") || !strings.Contains(out, "which is not in "+approval.Dir(s.home)) {
		t.Errorf("unknown key: impexec once: %v %s", err, out)
	}
	if g, _ := gate.Get(s.y, c); g == nil || g.State != state.Approved || sent() != 0 {
		t.Fatalf("unknown key: gate %v, %d sent; want approved, nothing sent", g, sent())
	}

	// A hand-written gate with no approval at all looks like one approved
	// before approvals were signed: refused, left approved, and sent once
	// the owner approves it again.
	unsigned := "g-0000000000000043"
	os.WriteFile(path(unsigned), []byte(strings.ReplaceAll(string(b), model, unsigned)), 0o640)
	rewrite(unsigned, func(m map[string]any) { delete(m, "approval") })
	out, err := s.run(t, "impexec", "once", unsigned)
	if g, _ := gate.Get(s.y, unsigned); err == nil || g.State != state.Approved || !strings.Contains(out, "no signed approval") || !strings.Contains(out, "impgate approve "+unsigned) || sent() != 0 {
		t.Fatalf("unsigned: %v %s; gate %s", err, out, g.State)
	}
	approve(unsigned)
	if out, err := s.run(t, "impexec", "once", unsigned); err != nil || sent() != 1 {
		t.Fatalf("approved again: %v %s; %d sent", err, out, sent())
	}

	// (d) The owner's approval executes.
	if out, err := s.run(t, "impexec", "once", model); err != nil || !strings.Contains(out, model+" executed") || sent() != 2 {
		t.Fatalf("owner's approval: %v %s; %d sent", err, out, sent())
	}

	// The executed gate written back in its approved state, signature and
	// all, is a replay: refused, not sent again.
	os.WriteFile(path(model), b, 0o640)
	if out, err := s.run(t, "impexec", "once", model); err == nil || !strings.Contains(out, "approval already used") || sent() != 2 {
		t.Fatalf("replayed approval: %v %s; %d sent", err, out, sent())
	}

	// (e) The gateway's auto-approval executes.
	s.daemon(t, bin, "impexec", "run", "--rescan", "2s")
	code, res, _ := s.propose(t, tok, `{"intent":"email-send","payload":{"to":["team@ourco.com"],"subject":"e","body":"ok"}}`)
	if code != http.StatusOK || res["status"] != "done" || sent() != 3 {
		t.Fatalf("auto-approval: %d %v; %d sent", code, res, sent())
	}
	g, _ := gate.Get(s.y, res["gate_id"].(string))
	if show, err := s.run(t, "impgate", "show", g.ID); err != nil || !strings.Contains(show, "approval   verifies: signed by gateway ed25519:") {
		t.Errorf("show of the auto-approved gate: %v %s", err, show)
	}
	s.mail.mu.Lock()
	defer s.mail.mu.Unlock()
	for _, gid := range []string{a, hand, c} {
		if s.mail.seen[gid] != 0 {
			t.Errorf("gate %s reached the mail API", gid)
		}
	}
	if s.mail.seen[model] != 1 {
		t.Errorf("the replayed gate reached the mail API %d times", s.mail.seen[model])
	}
}
