package executor

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/impyard/impyard/lib/gate"
	"github.com/impyard/impyard/lib/state"
	"github.com/impyard/impyard/lib/store"
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

// logLines collects what a runner logs, safe for Run's goroutines.
type logLines struct {
	mu    sync.Mutex
	lines []string
}

func (l *logLines) logf(format string, a ...any) {
	l.mu.Lock()
	l.lines = append(l.lines, fmt.Sprintf(format, a...))
	l.mu.Unlock()
}

// count is how many lines hold s.
func (l *logLines) count(s string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for _, line := range l.lines {
		if strings.Contains(line, s) {
			n++
		}
	}
	return n
}

func (l *logLines) all() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]string(nil), l.lines...)
}

// runUntil runs r.Run until cond holds (or a deadline passes), then stops
// it and checks it returned cleanly.
func runUntil(t *testing.T, r *Runner, rescan time.Duration, workers int, what string, cond func() bool) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx, rescan, workers) }()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			cancel()
			<-done
			t.Fatalf("Run never got to %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
	cancel()
	if err := <-done; err != nil {
		t.Errorf("Run returned %v", err)
	}
}

// Run logs a gate it could not execute, as "gate <id>: <why>", at every
// rescan, but not a gate another executor holds: that one is busy, not
// failing. A rescan whose repair succeeds logs nothing.
func TestRunLogsWhatItCannotExecute(t *testing.T) {
	r := setup(t, "[executors.message-user]\nkind = \"message-user\"\nbogus = 1\n")
	var logs logLines
	r.Logf = logs.logf
	broken := approved(t, r, "message-user", `{"text":"config is broken"}`)
	held := approved(t, r, "message-user", `{"text":"another executor has it"}`)
	lockPath, err := gate.ExecLock(r.Yard, held.ID)
	if err != nil {
		t.Fatal(err)
	}
	unlock, ok, err := store.TryLock(lockPath)
	if err != nil || !ok {
		t.Fatalf("lock %s: %v %v", lockPath, ok, err)
	}
	defer unlock()
	want := "gate " + broken.ID + ": gate " + broken.ID + " not executed: "
	// Three times: the start-up scan and two rescans, each of which also
	// took up the held gate. A line about the held gate ends it early.
	runUntil(t, r, 20*time.Millisecond, 2, "log either gate", func() bool { return logs.count(want) >= 3 || logs.count(held.ID) > 0 })
	if n := logs.count(want); n < 3 {
		t.Errorf("the broken gate was logged %d times, want at least 3: %q", n, logs.all())
	}
	for _, line := range logs.all() {
		switch {
		case strings.HasPrefix(line, want) && !strings.Contains(line, "unknown key"):
			t.Errorf("logged %q, want the configuration error", line)
		case strings.Contains(line, held.ID) || strings.Contains(line, ErrBusy.Error()):
			t.Errorf("logged a gate another executor holds: %q", line)
		case line == "<nil>":
			t.Errorf("logged %q, though nothing went wrong", line)
		}
	}
	for _, id := range []string{broken.ID, held.ID} {
		if g, err := gate.Get(r.Yard, id); err != nil || g.State != state.Approved {
			t.Errorf("gate %s: %v %v, want still approved", id, g, err)
		}
	}
	if n := len(notices(t, r)); n != 0 {
		t.Errorf("%d notices sent", n)
	}
}

// A rescan whose repair of the gates store fails says why: here the
// store's temp directory is a regular file, so sweeping it fails with
// ENOTDIR.
func TestRunLogsAFailedRepair(t *testing.T) {
	r := setup(t, "[executors.message-user]\nkind = \"message-user\"\n")
	var logs logLines
	r.Logf = logs.logf
	tmp := r.Yard.Path("gates", ".tmp")
	if err := os.MkdirAll(filepath.Dir(tmp), 0o750); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(tmp, nil, 0o640); err != nil {
		t.Fatal(err)
	}
	want := "sweep " + tmp + ": "
	runUntil(t, r, time.Hour, 1, "log the failed repair", func() bool { return logs.count(want) > 0 })
	for _, line := range logs.all() {
		if strings.HasPrefix(line, want) && !strings.HasSuffix(line, "not a directory") {
			t.Errorf("logged %q, want it to end in ENOTDIR's text", line)
		}
	}
}
