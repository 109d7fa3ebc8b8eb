package executor

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/impyard/impyard/lib/gate"
	"github.com/impyard/impyard/lib/home"
	"github.com/impyard/impyard/lib/state"
	"github.com/impyard/impyard/lib/transition"
)

// commandOrg is a message-user executor that is not idempotent: its
// command appends the gate it runs for to a file, so every run shows.
func commandOrg(t *testing.T) (org, ran string) {
	ran = filepath.Join(t.TempDir(), "ran")
	return "[executors.notify]\nkind = \"message-user\"\nstdin = \"json\"\ncommand = [\"sh\", \"-c\", \"cat >> " + ran + "\"]\n", ran
}

func runs(t *testing.T, ran, gateID string) int {
	t.Helper()
	b, err := os.ReadFile(ran)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		t.Fatal(err)
	}
	return strings.Count(string(b), `"id":"`+gateID+`"`)
}

// The audit log cannot take the move to executing: nothing is sent, and
// the gate, which never began, is begun once the log can be written
// again, its command run exactly once, never failed as outcome unknown.
func TestUnrecordedMoveToExecutingIsBegunLater(t *testing.T) {
	org, ran := commandOrg(t)
	r := setup(t, org)
	g := approved(t, r, "notify", `{"text":"hi"}`)
	audit := r.Yard.Path("runs", "decisions.jsonl")
	if err := os.Rename(audit, audit+".keep"); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(audit, 0o750); err != nil {
		t.Fatal(err)
	}
	_, err := r.Execute(context.Background(), g.ID)
	if !errors.Is(err, transition.ErrUnrecorded) || !strings.Contains(err.Error(), "not executed, nothing sent") {
		t.Fatalf("Execute: %v, want the unrecorded move reported, nothing sent", err)
	}
	if n := runs(t, ran, g.ID); n != 0 || len(notices(t, r)) != 0 {
		t.Fatalf("sent %d times (%d notices) before its record was written", n, len(notices(t, r)))
	}
	// Taken up while the log still cannot be written: still nothing.
	if _, err := r.Execute(context.Background(), g.ID); err == nil || runs(t, ran, g.ID) != 0 {
		t.Fatalf("second pass with the log still broken: %v, %d runs", err, runs(t, ran, g.ID))
	}
	if got, _ := gate.Get(r.Yard, g.ID); got.State != state.Executing {
		t.Fatalf("gate %s, want executing", got.State)
	}
	os.Remove(audit)
	if err := os.Rename(audit+".keep", audit); err != nil {
		t.Fatal(err)
	}
	out, err := r.Execute(context.Background(), g.ID)
	if err != nil || out.State != state.Executed {
		t.Fatalf("once the log is back: %v %v, want executed", out, err)
	}
	if n := runs(t, ran, g.ID); n != 1 || len(notices(t, r)) != 1 {
		t.Errorf("ran %d times, %d notices; want exactly once", n, len(notices(t, r)))
	}
	b, _ := os.ReadFile(audit)
	for _, ev := range []string{"gate-executing", "gate-executed"} {
		if n := strings.Count(string(b), `"event":"`+ev+`"`); n != 1 {
			t.Errorf("%d %s records, want 1", n, ev)
		}
	}
}

// A marker cut short by a failed write (empty, or without its line's
// end) is no proof that anything was sent: the gate is begun, and the
// marker written whole before it is.
func TestIncompleteMarkerIsBegun(t *testing.T) {
	for _, content := range []string{"", "2026-12-02T01:"} {
		org, ran := commandOrg(t)
		r := setup(t, org)
		g := approved(t, r, "notify", `{"text":"hi"}`)
		if _, err := gate.Move(r.Yard, g.ID, gate.Change{To: state.Executing, By: Actor}); err != nil {
			t.Fatal(err)
		}
		marker := home.Dir(r.Home).Executed(g.ID)
		os.MkdirAll(filepath.Dir(marker), 0o700)
		if err := os.WriteFile(marker, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		out, err := r.Execute(context.Background(), g.ID)
		if err != nil || out.State != state.Executed || runs(t, ran, g.ID) != 1 {
			t.Errorf("marker %q: %v %v, %d runs; want executed once", content, out, err, runs(t, ran, g.ID))
		}
		if ok, err := r.began(g.ID); !ok || err != nil {
			t.Errorf("marker %q: not whole after the execution: %v", content, err)
		}
	}
}
