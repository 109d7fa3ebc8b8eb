package tests

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/impyard/impyard/lib/gate"
	"github.com/impyard/impyard/lib/queue"
	"github.com/impyard/impyard/lib/state"
	"github.com/impyard/impyard/lib/store"
	"github.com/impyard/impyard/lib/yard"
	"github.com/impyard/impyard/lib/yard/yardtest"
)

// run starts one of the built binaries against the yard and waits for it.
func run(t *testing.T, dir, root string, env []string, name string, args ...string) (stdout, stderr string, err error) {
	t.Helper()
	cmd := exec.Command(filepath.Join(dir, name), args...)
	cmd.Env = append(os.Environ(), append([]string{"IMPYARD_ROOT=" + root, "USER=tester"}, env...)...)
	var o, e bytes.Buffer
	cmd.Stdout, cmd.Stderr = &o, &e
	err = cmd.Run()
	return o.String(), e.String(), err
}

func newYard(t testing.TB) *yard.Yard { return newYardB(t) }

func newYardB(t testing.TB) *yard.Yard {
	t.Helper()
	y := yardtest.New(t)
	// impq add queues only tasks a box could run: yuko is configured.
	if err := os.MkdirAll(y.Path("imps", "yuko"), 0o750); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(y.Path("imps", "yuko", "imp.toml"), []byte("image = \"docker.io/library/busybox:latest\"\n"), 0o640); err != nil {
		t.Fatal(err)
	}
	return y
}

func signalled(err error) bool {
	var ee *exec.ExitError
	if !errors.As(err, &ee) {
		return false
	}
	ws, ok := ee.Sys().(syscall.WaitStatus)
	return ok && ws.Signaled() && ws.Signal() == syscall.SIGKILL
}

// TestConcurrentAdds: 1000 impq add from 50 concurrent processes give
// 1000 files, 1000 distinct ids, every file valid, every event recorded.
func TestConcurrentAdds(t *testing.T) {
	y := newYard(t)
	const workers, each = 50, 20
	ids := make(chan string, workers*each)
	var wg sync.WaitGroup
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < each; i++ {
				out, errOut, err := run(t, bin, y.Root, nil, "impq", "add", "--imp", "yuko", "concurrent task")
				if err != nil {
					t.Errorf("impq add: %v %s", err, errOut)
					return
				}
				ids <- strings.TrimSpace(out)
			}
		}()
	}
	wg.Wait()
	close(ids)
	seen := map[string]bool{}
	for id := range ids {
		if seen[id] {
			t.Errorf("id %s printed twice", id)
		}
		seen[id] = true
	}
	tasks, bad := queue.List(y, queue.Filter{})
	if len(bad) > 0 {
		t.Errorf("unreadable files: %v", bad)
	}
	if len(seen) != workers*each || len(tasks) != workers*each {
		t.Fatalf("%d ids printed, %d tasks stored; want %d", len(seen), len(tasks), workers*each)
	}
	for _, task := range tasks {
		if !seen[task.ID] || task.State != state.Waiting {
			t.Errorf("stored task %s (%s) was not acknowledged or is not waiting", task.ID, task.State)
		}
	}
	for _, p := range []string{y.Path("journal", "yuko", "events.jsonl"), y.Path("runs", "decisions.jsonl")} {
		n := 0
		bad, err := store.ReadJSONL(p, func([]byte) error { n++; return nil })
		if err != nil || len(bad) > 0 || n != workers*each {
			t.Errorf("%s: %d records, %v, %v; want %d whole records", p, n, bad, err, workers*each)
		}
	}
}

// race starts the same command in n processes at once and returns how many
// exited 0, the stderr of the others and the stderr of the winners.
func race(t *testing.T, y *yard.Yard, n int, name string, args ...string) (wins int, losers, won []string) {
	t.Helper()
	var mu sync.Mutex
	var wg sync.WaitGroup
	start := make(chan struct{})
	home := t.TempDir() // an approval's signing key lands here, not in the real home
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			cmd := exec.Command(filepath.Join(bin, name), args...)
			cmd.Env = append(os.Environ(), "IMPYARD_ROOT="+y.Root, "IMPYARD_HOME="+home, "USER=tester")
			var e bytes.Buffer
			cmd.Stderr = &e
			<-start
			err := cmd.Run()
			mu.Lock()
			defer mu.Unlock()
			if err == nil {
				wins++
				won = append(won, e.String())
			} else {
				losers = append(losers, e.String())
			}
		}()
	}
	close(start)
	wg.Wait()
	return wins, losers, won
}

// TestRaceOutOfWaiting: two processes move the same task out of waiting;
// exactly one moves it, every time, and the other finds it moved and
// exits 0 with a note (a repeat), writing nothing.
func TestRaceOutOfWaiting(t *testing.T) {
	y := newYard(t)
	for round := 0; round < 200; round++ {
		id, _, err := queue.Add(y, queue.AddOptions{Imp: "yuko", Text: "race", By: "t", Actor: "test"})
		if err != nil {
			t.Fatal(err)
		}
		wins, losers, won := race(t, y, 2, "impq", "cancel", id)
		notes := 0
		for _, w := range won {
			if strings.Contains(w, "impq: note: "+id+" already cancelled by tester at ") {
				notes++
			} else if w != "" {
				t.Fatalf("round %d: a winner said %q", round, w)
			}
		}
		if wins != 2 || len(losers) != 0 || notes != 1 {
			t.Fatalf("round %d: %d exited 0 (%d with a note: %q), losers said %q", round, wins, notes, won, losers)
		}
		task, err := queue.Get(y, id)
		if err != nil || task.State != state.Cancelled || len(task.History) != 2 {
			t.Fatalf("round %d: task %+v, %v; want cancelled once", round, task, err)
		}
	}
}

// noExecutorNote is impgate approve's note that no executor will run the
// gate it approved now.
var noExecutorNote = regexp.MustCompile(`impgate: note: no executor will run [^\n]*\n`)

// TestApproveRace: two impgate approve of the same gate; exactly one writes
// the approval, and the other finds it made, verifies it and exits 0 with
// a note, writing nothing: one transition, one journal record.
func TestApproveRace(t *testing.T) {
	y := newYard(t)
	for round := 0; round < 50; round++ {
		g, err := gate.File(y, gate.FileOptions{Imp: "yuko", Intent: "email-send", Payload: []byte(`{"to":["a@b.c"]}`), By: "t", Actor: "test"})
		if err != nil {
			t.Fatal(err)
		}
		wins, losers, won := race(t, y, 2, "impgate", "approve", g.ID)
		notes := 0
		for _, w := range won {
			// Either may also note that no executor will run the gate:
			// this yard configures none.
			w = noExecutorNote.ReplaceAllString(w, "")
			if strings.Contains(w, "impgate: note: "+g.ID+" already approved by tester at ") {
				notes++
			} else if w != "" && !strings.Contains(w, "owner.key") {
				t.Fatalf("round %d: a winner said %q", round, w)
			}
		}
		if wins != 2 || len(losers) != 0 || notes != 1 {
			t.Fatalf("round %d: %d exited 0 (%d with a note: %q), losers said %q", round, wins, notes, won, losers)
		}
		got, _ := gate.Get(y, g.ID)
		if got.State != state.Approved || len(got.History) != 2 {
			t.Fatalf("round %d: gate %s with %d transitions", round, got.State, len(got.History))
		}
		approvals := 0
		if _, err := store.ReadJSONL(y.Path("journal", "yuko", "events.jsonl"), func(line []byte) error {
			if bytes.Contains(line, []byte(`"gate-approved"`)) && bytes.Contains(line, []byte(g.ID)) {
				approvals++
			}
			return nil
		}); err != nil || approvals != 1 {
			t.Fatalf("round %d: %d approval records of %s, %v; want 1", round, approvals, g.ID, err)
		}
	}
}

// history is what a client was told: acknowledged adds and cancels.
type history struct {
	added     map[string]bool
	cancelled map[string]bool
	kills     int
}

// check verifies the yard against the history, Jepsen-style: every
// acknowledged id exists exactly once, in a legal state, and parses; no task
// file is torn or empty; journal lines are whole except for at most one torn
// line per kill. With exact (after a clean write has repaired what the last
// kill left), every transition of every stored task has exactly one whole
// record in the journal and in the audit log.
func (h *history) check(t *testing.T, y *yard.Yard, exact bool) {
	t.Helper()
	dir := y.Path("queue", "yuko")
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	stored := map[string]int{}
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), ".") {
			continue
		}
		b, err := store.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil || len(b) == 0 {
			t.Errorf("%s: %v, %d bytes", e.Name(), err, len(b))
			continue
		}
		var task queue.Task
		if err := json.Unmarshal(b, &task); err != nil {
			t.Errorf("%s is torn: %v", e.Name(), err)
			continue
		}
		stored[task.ID]++
	}
	tasks, bad := queue.List(y, queue.Filter{})
	if len(bad) > 0 {
		t.Errorf("unreadable task files: %v", bad)
	}
	byID := map[string]*queue.Task{}
	for _, task := range tasks {
		byID[task.ID] = task
		if task.State != state.Waiting && task.State != state.Cancelled {
			t.Errorf("%s in illegal state %s", task.ID, task.State)
		}
	}
	for id := range h.added {
		if stored[id] != 1 || byID[id] == nil {
			t.Errorf("acknowledged task %s stored %d times", id, stored[id])
		}
	}
	for id := range h.cancelled {
		if task := byID[id]; task == nil || task.State != state.Cancelled {
			t.Errorf("acknowledged cancel of %s not stored", id)
		}
	}
	jbad, err := store.ReadJSONL(y.Path("journal", "yuko", "events.jsonl"), func(line []byte) error {
		var m map[string]any
		return json.Unmarshal(line, &m)
	})
	if err != nil || len(jbad) > h.kills {
		t.Errorf("journal: %d torn lines after %d kills: %v", len(jbad), h.kills, err)
	}
	if !exact {
		return
	}
	for _, p := range []string{y.Path("journal", "yuko", "events.jsonl"), y.Path("runs", "decisions.jsonl")} {
		records := map[string]map[int]int{}
		store.ReadJSONL(p, func(line []byte) error {
			var e struct {
				ID  string `json:"id"`
				Seq int    `json:"seq"`
			}
			if json.Unmarshal(line, &e) == nil {
				if records[e.ID] == nil {
					records[e.ID] = map[int]int{}
				}
				records[e.ID][e.Seq]++
			}
			return nil
		})
		for _, task := range tasks {
			for seq := 1; seq <= len(task.History); seq++ {
				if n := records[task.ID][seq]; n != 1 {
					t.Errorf("%s: task %s transition %d has %d records", filepath.Base(p), task.ID, seq, n)
				}
			}
			if len(records[task.ID]) != len(task.History) {
				t.Errorf("%s: task %s has records for %v, transitions %d", filepath.Base(p), task.ID, records[task.ID], len(task.History))
			}
		}
	}
}

// TestCrashPoints kills impq at each named crash point of a write, many
// times, then checks the history and that the next write sweeps the debris.
// Each point must kill in its own runs; a process that exits any other way
// than killed or successful fails the test.
func TestCrashPoints(t *testing.T) {
	y := newYard(t)
	h := &history{added: map[string]bool{}, cancelled: map[string]bool{}}
	points := []string{"after-temp-write", "after-rename", "mid-append"}
	for _, p := range points {
		began := time.Now()
		kills := 0
		for hit := 1; hit <= 3; hit++ {
			for i := 0; i < 10; i++ {
				spec := []string{"IMPYARD_CRASH=" + p + ":" + string(rune('0'+hit))}
				out, errOut, err := run(t, crashBin, y.Root, spec, "impq", "add", "--imp", "yuko", "--unique", "k"+p, "crash test")
				switch {
				case signalled(err):
					kills++
				case err == nil:
					h.added[strings.TrimSpace(out)] = true
				default:
					t.Fatalf("%s: impq add: %v %s", p, err, errOut)
				}
				// A cancel on a surviving task, also killed at the point.
				tasks, _ := queue.List(y, queue.Filter{State: state.Waiting})
				if len(tasks) > 0 {
					id := tasks[rand.IntN(len(tasks))].ID
					_, errOut, err := run(t, crashBin, y.Root, spec, "impq", "cancel", id)
					switch {
					case signalled(err):
						kills++
					case err == nil:
						h.cancelled[id] = true
					default:
						t.Fatalf("%s: impq cancel %s: %v %s", p, id, err, errOut)
					}
				}
			}
		}
		if kills == 0 {
			t.Fatalf("crash point %s was never reached", p)
		}
		h.kills += kills
		t.Logf("%s: %d kills in %v", p, kills, time.Since(began))
	}
	t.Logf("%d kills, %d acknowledged adds, %d acknowledged cancels", h.kills, len(h.added), len(h.cancelled))
	h.check(t, y, false)
	out, _, err := run(t, bin, y.Root, nil, "impq", "add", "--imp", "yuko", "after the crashes")
	if err != nil {
		t.Fatal(err)
	}
	h.added[strings.TrimSpace(out)] = true
	if left, _ := os.ReadDir(y.Path("queue", "yuko", ".tmp")); len(left) != 0 {
		t.Errorf("orphaned temp files survived the next write: %d", len(left))
	}
	h.check(t, y, true)
}

// TestRandomKills SIGKILLs writers at random moments during 200 writes.
// A writer that exits any other way than killed or successful fails it.
func TestRandomKills(t *testing.T) {
	y := newYard(t)
	h := &history{added: map[string]bool{}, cancelled: map[string]bool{}}
	// The kills fall anywhere in twice the time an add takes on this
	// machine now, measured, so about half the writers finish whatever
	// the machine's speed or load.
	var took time.Duration
	for range 3 {
		began := time.Now()
		out, _, err := run(t, bin, y.Root, nil, "impq", "add", "--imp", "yuko", "timed")
		if err != nil {
			t.Fatal(err)
		}
		h.added[strings.TrimSpace(out)] = true
		took = max(took, time.Since(began))
	}
	window := 2 * took
	for i := 0; i < 200; i++ {
		args := []string{"add", "--imp", "yuko", "random kill"}
		var target string
		if tasks, _ := queue.List(y, queue.Filter{State: state.Waiting}); i%3 == 2 && len(tasks) > 0 {
			target = tasks[rand.IntN(len(tasks))].ID
			args = []string{"cancel", target}
		}
		cmd := exec.Command(filepath.Join(bin, "impq"), args...)
		cmd.Env = append(os.Environ(), "IMPYARD_ROOT="+y.Root, "USER=tester")
		var o, e bytes.Buffer
		cmd.Stdout, cmd.Stderr = &o, &e
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		time.AfterFunc(time.Duration(rand.Int64N(int64(window))), func() { cmd.Process.Kill() })
		err := cmd.Wait()
		switch {
		case err == nil && target == "":
			h.added[strings.TrimSpace(o.String())] = true
		case err == nil:
			h.cancelled[target] = true
		case signalled(err):
			h.kills++
		default:
			t.Fatalf("impq %s was not killed but failed: %v %s", strings.Join(args, " "), err, e.String())
		}
	}
	t.Logf("kills within %v: %d kills, %d acknowledged adds, %d acknowledged cancels", window, h.kills, len(h.added), len(h.cancelled))
	if h.kills == 0 || len(h.added) == 3 {
		t.Fatalf("the run did not mix kills and completed writes")
	}
	h.check(t, y, false)
	if _, _, err := run(t, bin, y.Root, nil, "impq", "add", "--imp", "yuko", "after the kills"); err != nil {
		t.Fatal(err)
	}
	h.check(t, y, true)
}

// TestWatchEndsOnSignal: impq watch, the one impq command that runs until
// stopped, ends on SIGINT or SIGTERM with exit 0 and the lines it printed,
// not killed by the signal.
func TestWatchEndsOnSignal(t *testing.T) {
	for _, sig := range []syscall.Signal{syscall.SIGINT, syscall.SIGTERM} {
		t.Run(sig.String(), func(t *testing.T) {
			y := newYard(t)
			cmd, out, stderr := startWatch(t, y.Root)
			defer cmd.Process.Kill()
			// The watcher shows nothing from before its first scan, so
			// add until a line shows it is watching.
			lines := make(chan string)
			go func() {
				defer close(lines)
				buf := make([]byte, 4096)
				for {
					n, err := out.Read(buf)
					if n > 0 {
						lines <- string(buf[:n])
					}
					if err != nil {
						return
					}
				}
			}()
			deadline := time.After(10 * time.Second)
		probe:
			for {
				if _, _, err := queue.Add(y, queue.AddOptions{Imp: "yuko", Text: "probe", By: "probe", Actor: "test"}); err != nil {
					t.Fatal(err)
				}
				select {
				case l := <-lines:
					if strings.Contains(l, `"by":"probe"`) {
						break probe
					}
				case <-time.After(100 * time.Millisecond):
				case <-deadline:
					t.Fatalf("impq watch showed no transition in 10s: %s", stderr.String())
				}
			}
			if err := cmd.Process.Signal(sig); err != nil {
				t.Fatal(err)
			}
			done := make(chan error, 1)
			go func() {
				for range lines {
				}
				done <- cmd.Wait()
			}()
			select {
			case err := <-done:
				if err != nil {
					t.Fatalf("impq watch after %v: %v, want exit 0; stderr: %s", sig, err, stderr.String())
				}
			case <-time.After(10 * time.Second):
				t.Fatalf("impq watch still runs 10s after %v", sig)
			}
		})
	}
}

// startWatch starts impq watch --imp yuko on the yard at root with its
// standard output a pipe; the caller waits for it or kills it.
func startWatch(t testing.TB, root string) (cmd *exec.Cmd, stdout io.Reader, stderr *bytes.Buffer) {
	t.Helper()
	cmd = exec.Command(filepath.Join(bin, "impq"), "watch", "--imp", "yuko")
	cmd.Env = append(os.Environ(), "IMPYARD_ROOT="+root)
	stderr = new(bytes.Buffer)
	cmd.Stderr = stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	return cmd, stdout, stderr
}
