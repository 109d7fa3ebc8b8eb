// Package approvaltest approves gates in tests the way impgate does: with
// an owner key made on first use in the test's IMPYARD_HOME/keys/, so an
// executor given the same home verifies the approval. A test never writes
// a key into the real home: it passes its own temporary one.
package approvaltest

import (
	"io"
	"testing"

	"github.com/impyard/impyard/lib/approval"
	"github.com/impyard/impyard/lib/gate"
	"github.com/impyard/impyard/lib/state"
	"github.com/impyard/impyard/lib/yard"
)

// Key is the owner key of home, created on first use.
func Key(t testing.TB, home string) *approval.Key {
	t.Helper()
	k, err := approval.Ensure(home, approval.Owner, io.Discard, "test")
	if err != nil {
		t.Fatal(err)
	}
	return k
}

// Approve approves gateID as "alice", signed with home's owner key, and
// returns the gate as written. It fails the test if the move is refused.
func Approve(t testing.TB, y *yard.Yard, home, gateID string) *gate.Gate {
	t.Helper()
	g, err := gate.Move(y, gateID, gate.Change{To: state.Approved, By: "alice", Actor: "test", Signer: Key(t, home)})
	if err != nil {
		t.Fatal(err)
	}
	return g
}
