package gate

import (
	"errors"
	"testing"
	"time"

	"github.com/impyard/impyard/internal/passkeytest"
	"github.com/impyard/impyard/lib/approval"
	"github.com/impyard/impyard/lib/state"
)

// TestDecideSigned: a passkey's approval made before the move is written
// stamped at its own time, and verifies as impexec checks it; one made
// for another gate, by another decider, at a time that is not a whole
// second, or without a keyring is refused, and the gate stays filed.
func TestDecideSigned(t *testing.T) {
	y := newYard(t)
	home := t.TempDir()
	a := passkeytest.New(t, approval.AlgES256, "phone")
	if err := approval.AddPasskey(home, a.Passkey); err != nil {
		t.Fatal(err)
	}
	keys := func() (*approval.Keyring, error) { return approval.LoadKeyring(home) }
	g1 := file(t, y, `{"to":["a@b.com"],"subject":"one"}`)
	g2 := file(t, y, `{"to":["a@b.com"],"subject":"two"}`)
	at := state.Second(time.Now()).Add(-time.Minute)
	for name, c := range map[string]struct {
		ch   Change
		keys func() (*approval.Keyring, error)
	}{
		"made for another gate": {Change{To: state.Approved, By: "phone", Signed: a.Approve(g2.Subject(), "phone", at)}, keys},
		"another decider":       {Change{To: state.Approved, By: "alice", Signed: a.Approve(g1.Subject(), "phone", at)}, keys},
		"not a whole second":    {Change{To: state.Approved, By: "phone", Signed: a.Approve(g1.Subject(), "phone", at.Add(time.Millisecond))}, keys},
		"no keyring":            {Change{To: state.Approved, By: "phone", Signed: a.Approve(g1.Subject(), "phone", at)}, nil},
	} {
		if _, _, err := Decide(y, g1.ID, c.ch, c.keys); err == nil || !errors.Is(err, approval.ErrInvalid) && !errors.Is(err, ErrNoSigner) {
			t.Errorf("%s: %v, want refused", name, err)
		}
		if g, _ := Get(y, g1.ID); g.State != state.Filed {
			t.Fatalf("%s: gate %s", name, g.State)
		}
	}
	g, _, err := Decide(y, g1.ID, Change{To: state.Approved, By: "phone", Actor: "impgate serve", Signed: a.Approve(g1.Subject(), "phone", at)}, keys)
	if err != nil {
		t.Fatal(err)
	}
	kr, _ := keys()
	if h := g.History[len(g.History)-1]; !h.At.Equal(at) || h.By != "phone" {
		t.Errorf("approval recorded as %+v, want at %s", h, at)
	}
	if k, err := g.VerifyApproval(kr); err != nil || k.Name != "phone" {
		t.Errorf("recorded approval: %v %v", k, err)
	}
}
