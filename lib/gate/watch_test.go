package gate

import (
	"context"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/impyard/impyard/lib/state"
	"github.com/impyard/impyard/lib/watch"
	"github.com/impyard/impyard/lib/yard"
)

// watcher runs Watch on y until the test ends and delivers each gate it
// reports, and each error, on channels the test reads.
type watcher struct {
	gates chan *Gate
	errs  chan error
	ready chan struct{}
}

func startWatch(t *testing.T, y *yard.Yard, rescan time.Duration) *watcher {
	t.Helper()
	w := &watcher{gates: make(chan *Gate, 100), errs: make(chan error, 100), ready: make(chan struct{})}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	var once sync.Once
	go func() {
		done <- Watch(ctx, y, rescan, Handler{
			Gate:   func(g *Gate) { w.gates <- g },
			Rescan: func() { once.Do(func() { close(w.ready) }) },
			Error:  func(err error) { w.errs <- err },
		})
	}()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Watch: %v", err)
		}
	})
	select {
	case <-w.ready:
	case <-time.After(10 * time.Second):
		t.Fatal("Watch never made its first scan")
	}
	return w
}

// await returns the first reported gate with id gateID in state want.
func (w *watcher) await(t *testing.T, gateID, want string) *Gate {
	t.Helper()
	deadline := time.After(10 * time.Second)
	for {
		select {
		case g := <-w.gates:
			if g.ID == gateID && g.State == want {
				return g
			}
		case <-deadline:
			t.Fatalf("gate %s never reported %s", gateID, want)
			return nil
		}
	}
}

// TestWatchHelperProcess is not a test: run by TestWatchSeesOtherProcess
// as another process, it approves the gate it is given.
func TestWatchHelperProcess(t *testing.T) {
	root, gateID := os.Getenv("GATE_WATCH_ROOT"), os.Getenv("GATE_WATCH_GATE")
	if root == "" {
		t.Skip("run by TestWatchSeesOtherProcess")
	}
	y, err := yard.Open(root)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Move(y, gateID, Change{To: state.Approved, Signer: testKey, By: "alice"}); err != nil {
		t.Fatal(err)
	}
}

// TestWatchSeesOtherProcess: a gate approved by another process is
// reported, approved, without waiting for a rescan.
func TestWatchSeesOtherProcess(t *testing.T) {
	y := newYard(t)
	g := file(t, y, `{"n":1}`)
	w := startWatch(t, y, time.Hour)
	w.await(t, g.ID, state.Filed)
	cmd := exec.Command(os.Args[0], "-test.run=^TestWatchHelperProcess$", "-test.count=1")
	cmd.Env = append(os.Environ(), "GATE_WATCH_ROOT="+y.Root, "GATE_WATCH_GATE="+g.ID)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("helper: %v\n%s", err, out)
	}
	got := w.await(t, g.ID, state.Approved)
	if got.Approval == nil || got.Approval.By != "alice" {
		t.Fatalf("reported gate has approval %+v, want one by alice", got.Approval)
	}
}

// TestWatchRescanFindsLostEvent: with every inotify event lost, a gate
// filed after the watch started is still reported by the periodic rescan.
func TestWatchRescanFindsLostEvent(t *testing.T) {
	var mu sync.Mutex
	lost := 0
	watchRun = func(ctx context.Context, period time.Duration, h watch.Handler) error {
		h.File = func(string) { mu.Lock(); lost++; mu.Unlock() }
		return watch.Run(ctx, period, h)
	}
	t.Cleanup(func() { watchRun = watch.Run })
	y := newYard(t)
	w := startWatch(t, y, 100*time.Millisecond)
	g := file(t, y, `{"n":2}`)
	w.await(t, g.ID, state.Filed)
	if _, err := Move(y, g.ID, Change{To: state.Denied, By: "alice"}); err != nil {
		t.Fatal(err)
	}
	w.await(t, g.ID, state.Denied)
	mu.Lock()
	defer mu.Unlock()
	if lost == 0 {
		t.Fatal("no event was lost; the test did not test the rescan")
	}
}

// TestWatchRefusesSymlinkedGates: gates/resolved replaced by a symlink to
// another yard's gates is refused as List and Get refuse it: its gates are
// never reported, not at start and not when one of them changes, and the
// refusal is reported as an error naming the directory.
func TestWatchRefusesSymlinkedGates(t *testing.T) {
	other := newYard(t)
	og := file(t, other, `{"to":"team@ourco.com"}`)
	if _, err := Move(other, og.ID, Change{To: state.Approved, Signer: testKey, By: "alice"}); err != nil {
		t.Fatal(err)
	}
	y := newYard(t)
	mine := file(t, y, `{"n":3}`)
	link := y.Path("gates", resolved)
	os.RemoveAll(link)
	if err := os.Symlink(other.Path("gates", resolved), link); err != nil {
		t.Fatal(err)
	}
	w := startWatch(t, y, 100*time.Millisecond)
	w.await(t, mine.ID, state.Filed)
	select {
	case err := <-w.errs:
		if !strings.Contains(err.Error(), "resolved") {
			t.Fatalf("error %v does not name %s", err, link)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the symlinked gates/resolved was never reported as an error")
	}
	if _, err := Move(other, og.ID, Change{To: state.Executing, By: "impexec"}); err != nil {
		t.Fatal(err)
	}
	// Two more rescans: had the symlinked gate been read, it is reported by now.
	for range 2 {
		w.await(t, mine.ID, state.Filed)
	}
	for {
		select {
		case g := <-w.gates:
			if g.ID == og.ID {
				t.Fatalf("gate %s behind the symlink was reported (%s)", og.ID, g.State)
			}
		default:
			return
		}
	}
}

// TestWatchScannedAfterFirstScan: Scanned comes after every gate on disk
// at start was reported.
func TestWatchScannedAfterFirstScan(t *testing.T) {
	y := newYard(t)
	a, b := file(t, y, `{"n":1}`), file(t, y, `{"n":2}`)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var mu sync.Mutex
	seen := map[string]bool{}
	scanned := make(chan map[string]bool, 10)
	done := make(chan error, 1)
	go func() {
		done <- Watch(ctx, y, time.Hour, Handler{
			Gate: func(g *Gate) { mu.Lock(); seen[g.ID] = true; mu.Unlock() },
			Scanned: func() {
				mu.Lock()
				defer mu.Unlock()
				snap := map[string]bool{}
				for k, v := range seen {
					snap[k] = v
				}
				scanned <- snap
			},
		})
	}()
	select {
	case got := <-scanned:
		if !got[a.ID] || !got[b.ID] {
			t.Errorf("Scanned before both gates were reported: %v", got)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no Scanned")
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}
