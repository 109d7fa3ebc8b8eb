package executor

import (
	"context"
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/impyard/impyard/lib/gate"
	"github.com/impyard/impyard/lib/state"
)

// waitState polls the gate's file until it reaches want.
func waitState(t *testing.T, r *Runner, gateID, want string) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		g, err := gate.Get(r.Yard, gateID)
		if err == nil && g.State == want {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("gate %s: %v %v, want %s", gateID, g, err, want)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// Run takes up at start every gate left approved or executing, then every
// gate approved while it runs (woken by the watcher: the rescan is an hour
// away), and leaves filed gates alone.
func TestRunExecutesApprovedGates(t *testing.T) {
	r := setup(t, "[executors.message-user]\nkind = \"message-user\"\n")
	waiting := approved(t, r, "message-user", `{"text":"approved before start"}`)
	interrupted := approved(t, r, "message-user", `{"text":"left executing"}`)
	if _, err := gate.Move(r.Yard, interrupted.ID, gate.Change{To: state.Executing, By: Actor}); err != nil {
		t.Fatal(err)
	}
	filed, err := gate.File(r.Yard, gate.FileOptions{Imp: "yuko", Intent: "message-user", Payload: []byte(`{"text":"not approved"}`), By: "yuko", Actor: "test"})
	if err != nil {
		t.Fatal(err)
	}
	// A damaged gate file is reported by the start-up scan, and skipped.
	os.WriteFile(r.Yard.Path("gates", "resolved", "g-0000000000000099.json"), []byte("{"), 0o640)
	var mu sync.Mutex
	var logs []string
	r.Logf = func(format string, a ...any) {
		mu.Lock()
		logs = append(logs, fmt.Sprintf(format, a...))
		mu.Unlock()
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx, time.Hour, 0) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run returned %v", err)
		}
	}()
	waitState(t, r, waiting.ID, state.Executed)
	waitState(t, r, interrupted.ID, state.Executed)

	// Files in resolved/ that are not gates are passed over.
	os.WriteFile(r.Yard.Path("gates", "resolved", "notes.json"), []byte("{}"), 0o640)
	later := approved(t, r, "message-user", `{"text":"approved while running"}`)
	waitState(t, r, later.ID, state.Executed)

	mu.Lock()
	if !strings.Contains(strings.Join(logs, "\n"), "g-0000000000000099.json") {
		t.Errorf("the damaged gate was not reported: %q", logs)
	}
	mu.Unlock()
	if g, _ := gate.Get(r.Yard, filed.ID); g.State != state.Filed {
		t.Errorf("a filed gate became %s", g.State)
	}
	seen := map[string]int{}
	for _, n := range notices(t, r) {
		seen[n.Gate]++
	}
	if len(seen) != 3 || seen[waiting.ID] != 1 || seen[interrupted.ID] != 1 || seen[later.ID] != 1 {
		t.Errorf("notices per gate %v, want one each for the three approved", seen)
	}
}
