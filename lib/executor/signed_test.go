package executor

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"os"
	"strings"
	"testing"

	"github.com/impyard/impyard/internal/approvaltest"
	"github.com/impyard/impyard/lib/approval"
	"github.com/impyard/impyard/lib/gate"
	"github.com/impyard/impyard/lib/state"
)

const messageUser = "[executors.message-user]\nkind = \"message-user\"\n"

// rewrite edits a resolved gate's file as someone who can write the yard.
func rewrite(t *testing.T, r *Runner, gateID string, edit func(g map[string]any)) {
	t.Helper()
	p := r.Yard.Path("gates", "resolved", gateID+".json")
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	var g map[string]any
	if err := json.Unmarshal(b, &g); err != nil {
		t.Fatal(err)
	}
	edit(g)
	if b, err = json.Marshal(g); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, b, 0o640); err != nil {
		t.Fatal(err)
	}
}

// refused runs the gate and checks it ended failed with a reason that
// starts the way impexec(8) promises, and that nothing was sent.
func refused(t *testing.T, r *Runner, gateID, want string) {
	t.Helper()
	out, err := r.Execute(context.Background(), gateID)
	if err != nil || out.State != state.Failed {
		t.Fatalf("got %v %v, want failed", out, err)
	}
	why := out.History[len(out.History)-1].Why
	if !strings.HasPrefix(why, "approval signature does not verify: ") || !strings.Contains(why, want) {
		t.Errorf("reason %q, want one that starts with the promised text and says %q", why, want)
	}
	if n := notices(t, r); len(n) != 0 {
		t.Errorf("sent %d notices for a gate whose approval does not verify", len(n))
	}
}

func TestPayloadAndSHARewrittenTogether(t *testing.T) {
	r := setup(t, messageUser)
	g := approved(t, r, "message-user", `{"text":"hello"}`)
	forged := []byte(`{"text":"wire the money"}`)
	rewrite(t, r, g.ID, func(m map[string]any) { m["payload"] = json.RawMessage(forged); m["sha256"] = gate.Sum(forged) })
	refused(t, r, g.ID, "is not over this gate id, payload sha256 "+gate.Sum(forged))
}

func TestDeciderOrTimeEdited(t *testing.T) {
	r := setup(t, messageUser)
	g := approved(t, r, "message-user", `{"text":"hello"}`)
	rewrite(t, r, g.ID, func(m map[string]any) {
		m["approval"].(map[string]any)["by"] = "ci-bot"
		m["history"].([]any)[1].(map[string]any)["by"] = "ci-bot"
	})
	refused(t, r, g.ID, `decider "ci-bot"`)

	g = approved(t, r, "message-user", `{"text":"hello again"}`)
	rewrite(t, r, g.ID, func(m map[string]any) { m["history"].([]any)[1].(map[string]any)["at"] = "2020-01-01T00:00:00Z" })
	refused(t, r, g.ID, "its timeline says approved by")
}

func TestHandWrittenApprovedGate(t *testing.T) {
	r := setup(t, messageUser)
	// A real approval, to copy from: its signature is over another gate.
	model := approved(t, r, "message-user", `{"text":"hello"}`)
	b, _ := os.ReadFile(r.Yard.Path("gates", "resolved", model.ID+".json"))
	forgedID := "g-0000000000000042"
	os.WriteFile(r.Yard.Path("gates", "resolved", forgedID+".json"), []byte(strings.ReplaceAll(string(b), model.ID, forgedID)), 0o640)
	refused(t, r, forgedID, "is not over this gate id")

	// Without any approval it might be a gate approved before approvals
	// were signed: refused and left for the owner to approve again.
	unsignedID := "g-0000000000000043"
	os.WriteFile(r.Yard.Path("gates", "resolved", unsignedID+".json"), []byte(strings.ReplaceAll(string(b), model.ID, unsignedID)), 0o640)
	rewrite(t, r, unsignedID, func(m map[string]any) { delete(m, "approval") })
	out, err := r.Execute(context.Background(), unsignedID)
	if !errors.Is(err, approval.ErrUnsigned) || !strings.Contains(err.Error(), "approval signature does not verify: no signed approval") ||
		!strings.Contains(err.Error(), "impgate approve "+unsignedID) || out.State != state.Approved {
		t.Fatalf("unsigned: %v %v; want a refusal that says how to approve again, the gate still approved", out, err)
	}
	if n := notices(t, r); len(n) != 0 {
		t.Fatalf("%d notices for an unsigned gate", len(n))
	}
	// Approving it again signs it, and then it executes.
	if _, err := gate.Move(r.Yard, unsignedID, gate.Change{To: state.Approved, By: "alice", Actor: "test", Signer: approvaltest.Key(t, r.Home)}); err != nil {
		t.Fatal(err)
	}
	if out, err := r.Execute(context.Background(), unsignedID); err != nil || out.State != state.Executed || len(notices(t, r)) != 1 {
		t.Errorf("approved again: %v %v", out, err)
	}
}

func TestUnknownKey(t *testing.T) {
	r := setup(t, messageUser)
	approvaltest.Key(t, r.Home) // the owner key verifiers trust
	stranger, _ := approval.Generate("owner")
	g, _ := gate.File(r.Yard, gate.FileOptions{Imp: "yuko", Intent: "message-user", Payload: []byte(`{"text":"hi"}`), By: "yuko", Actor: "test"})
	if _, err := gate.Move(r.Yard, g.ID, gate.Change{To: state.Approved, By: "alice", Signer: stranger}); err != nil {
		t.Fatal(err)
	}
	// Made perhaps with another IMPYARD_HOME: not executed, not failed.
	out, err := r.Execute(context.Background(), g.ID)
	if !errors.Is(err, ErrUnknownKey) || !strings.Contains(err.Error(), "which is not in "+approval.Dir(r.Home)) || out.State != state.Approved {
		t.Fatalf("unknown key: %v %v; want refused, the gate still approved", out, err)
	}
	if n := notices(t, r); len(n) != 0 {
		t.Fatalf("%d notices for a gate signed by an unknown key", len(n))
	}
	// Approved again with a trusted key, it executes, once.
	keys := func() (*approval.Keyring, error) { return approval.LoadKeyring(r.Home) }
	again, repeated, err := gate.Decide(r.Yard, g.ID, gate.Change{To: state.Approved, By: "alice", Actor: "test", Signer: approvaltest.Key(t, r.Home)}, keys)
	if err != nil || repeated || !strings.HasPrefix(lastWhy(again), "approved again with a trusted key") {
		t.Fatalf("approved again: %v %v %v", again, repeated, err)
	}
	if out, err := r.Execute(context.Background(), g.ID); err != nil || out.State != state.Executed || len(notices(t, r)) != 1 {
		t.Errorf("approved again: %v %v, %d notices", out, err, len(notices(t, r)))
	}
}

func TestGatewayAutoApprovalExecutes(t *testing.T) {
	r := setup(t, messageUser)
	k, err := approval.Ensure(r.Home, approval.Gateway, io.Discard, "test")
	if err != nil {
		t.Fatal(err)
	}
	g, err := gate.File(r.Yard, gate.FileOptions{Imp: "yuko", Intent: "message-user", Payload: []byte(`{"text":"hi"}`), By: "trust: org.toml#1", Actor: "impgw", Approved: true, Signer: k})
	if err != nil {
		t.Fatal(err)
	}
	if out, err := r.Execute(context.Background(), g.ID); err != nil || out.State != state.Executed || len(notices(t, r)) != 1 {
		t.Errorf("auto-approved: %v %v", out, err)
	}
}

func TestResumedGateVerified(t *testing.T) {
	r := setup(t, messageUser)
	g := approved(t, r, "message-user", `{"text":"hi"}`)
	gate.Move(r.Yard, g.ID, gate.Change{To: state.Executing, By: Actor})
	rewrite(t, r, g.ID, func(m map[string]any) { m["approval"].(map[string]any)["by"] = "mallory" })
	out, err := r.Execute(context.Background(), g.ID)
	if err != nil || out.State != state.Failed || !strings.Contains(out.History[len(out.History)-1].Why, "approval signature does not verify: ") {
		t.Fatalf("resumed with a bad approval: %v %v", out, err)
	}
	if len(notices(t, r)) != 0 {
		t.Errorf("a resumed gate whose approval does not verify was sent")
	}
}

func TestNoKeysWaits(t *testing.T) {
	r := setup(t, messageUser)
	g := approved(t, r, "message-user", `{"text":"hi"}`)
	r.Home = t.TempDir()
	out, err := r.Execute(context.Background(), g.ID)
	if !errors.Is(err, approval.ErrNoKeys) || out.State != state.Approved || len(notices(t, r)) != 0 {
		t.Errorf("no keys: %v %v; want an error and the gate still approved", out, err)
	}
}

func TestReplayedApprovalRefused(t *testing.T) {
	r := setup(t, messageUser)
	g := approved(t, r, "message-user", `{"text":"pay the invoice"}`)
	p := r.Yard.Path("gates", "resolved", g.ID+".json")
	approvedState, _ := os.ReadFile(p)
	if out, err := r.Execute(context.Background(), g.ID); err != nil || out.State != state.Executed {
		t.Fatalf("first execution: %v %v", out, err)
	}
	// The executed gate is put back as it was when approved, signature
	// and all.
	os.WriteFile(p, approvedState, 0o640)
	out, err := r.Execute(context.Background(), g.ID)
	if err != nil || out.State != state.Failed || !strings.Contains(out.History[len(out.History)-1].Why, "approval already used") {
		t.Fatalf("replayed: %v %v; want failed, approval already used", out, err)
	}
	if n := notices(t, r); len(n) != 1 {
		t.Errorf("a replayed approval was sent again: %d notices", len(n))
	}
}
