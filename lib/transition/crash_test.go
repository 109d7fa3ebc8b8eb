package transition_test

import (
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"syscall"
	"testing"

	"github.com/impyard/impyard/lib/event"
	"github.com/impyard/impyard/lib/gate"
	"github.com/impyard/impyard/lib/notify"
	"github.com/impyard/impyard/lib/queue"
	"github.com/impyard/impyard/lib/run"
	"github.com/impyard/impyard/lib/store"
	"github.com/impyard/impyard/lib/transition"
	"github.com/impyard/impyard/lib/yard"
	"github.com/impyard/impyard/lib/yard/yardtest"
)

var (
	buildOnce sync.Once
	crasher   string
	buildErr  error
)

func TestMain(m *testing.M) {
	code := m.Run()
	if crasher != "" {
		os.RemoveAll(filepath.Dir(crasher))
	}
	os.Exit(code)
}

// crasherBin builds testdata/crasher with crash points, once.
func crasherBin(t *testing.T) string {
	t.Helper()
	buildOnce.Do(func() {
		goBin, err := exec.LookPath("go")
		if err != nil {
			buildErr = err
			return
		}
		dir, err := os.MkdirTemp("", "impyard-crasher-")
		if err != nil {
			buildErr = err
			return
		}
		crasher = filepath.Join(dir, "crasher")
		out, err := exec.Command(goBin, "build", "-tags", "impyard_crash", "-o", crasher, "./testdata/crasher").CombinedOutput()
		if err != nil {
			buildErr = errors.New(string(out))
		}
	})
	if buildErr != nil {
		t.Fatalf("building the crasher: %v", buildErr)
	}
	return crasher
}

// killedAt runs the crasher, which must die by SIGKILL at point.
func killedAt(t *testing.T, y *yard.Yard, point string, args ...string) {
	t.Helper()
	cmd := exec.Command(crasherBin(t), append([]string{y.Root}, args...)...)
	cmd.Env = append(os.Environ(), "IMPYARD_CRASH="+point)
	out, err := cmd.CombinedOutput()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
		t.Fatalf("crasher %v: want SIGKILL at %s, got %v: %s", args, point, err, out)
	}
}

// records counts, in the journal and the audit log, the records of each
// transition of entity id.
func records(t *testing.T, y *yard.Yard, id string) (journal, audit map[int]int) {
	t.Helper()
	count := func(p string) map[int]int {
		n := map[int]int{}
		if _, err := store.ReadJSONL(p, func(line []byte) error {
			var e struct {
				ID  string `json:"id"`
				Seq int    `json:"seq"`
			}
			if json.Unmarshal(line, &e) == nil && e.ID == id {
				n[e.Seq]++
			}
			return nil
		}); err != nil && !store.IsNotExist(err) {
			t.Fatal(err)
		}
		return n
	}
	return count(y.Path("journal", "yuko", "events.jsonl")), count(y.Path("runs", "decisions.jsonl"))
}

// exactlyOnce checks that each of the n transitions of id has one record
// in each log, and nothing else does.
func exactlyOnce(t *testing.T, y *yard.Yard, id string, n int) {
	t.Helper()
	j, a := records(t, y, id)
	for name, got := range map[string]map[int]int{"journal": j, "audit": a} {
		for seq := 1; seq <= n; seq++ {
			if got[seq] != 1 {
				t.Errorf("%s: %s transition %d has %d records, want 1", name, id, seq, got[seq])
			}
		}
		if len(got) != n {
			t.Errorf("%s: %s has records of %v, want transitions 1..%d", name, id, got, n)
		}
	}
}

// crashCase is one kind of record: how to file and move one with the
// crasher, how to read its history, and a later transition that repairs.
type crashCase struct {
	name       string
	create     []string // crasher args; the id is appended when fixed
	move       []string
	fixedID    string // the id the crasher files, when chosen by the test
	find       func(y *yard.Yard) string
	get        func(y *yard.Yard, id string) (transition.Record, error)
	repair     func(y *yard.Yard, id string) error
	repairAdds int // transitions the repair itself adds
	dir        func(y *yard.Yard, id string) string
}

// only is the id of the one record listed, "" unless there is one.
func only[R transition.Record](rs []R, _ []error) string {
	if len(rs) != 1 {
		return ""
	}
	return rs[0].Timeline().ID
}

// getter turns a typed read into a crashCase's get.
func getter[R transition.Record](read func(*yard.Yard, string) (R, error)) func(*yard.Yard, string) (transition.Record, error) {
	return func(y *yard.Yard, id string) (transition.Record, error) { return read(y, id) }
}

var crashCases = []crashCase{{
	name: "gate", create: []string{"gate-file"}, move: []string{"gate-deny"},
	find:   func(y *yard.Yard) string { return only(gate.List(y, gate.Filter{All: true})) },
	get:    getter(gate.Get),
	repair: func(y *yard.Yard, _ string) error { return gate.Repair(y) },
	dir:    func(y *yard.Yard, _ string) string { return y.Path("gates") },
}, {
	name: "task", create: []string{"task-add"}, move: []string{"task-cancel"},
	find: func(y *yard.Yard) string { return only(queue.List(y, queue.Filter{})) },
	get:  getter(queue.Get),
	// The next change to the queue repairs: another task's add.
	repair: func(y *yard.Yard, _ string) error {
		_, _, err := queue.Add(y, queue.AddOptions{Imp: "yuko", Text: "next", By: "yuko", Actor: "test"})
		return err
	},
	dir: func(y *yard.Yard, _ string) string { return y.Path("queue", "yuko") },
}, {
	name: "run", create: []string{"run-create"}, move: []string{"run-start"}, fixedID: "r-0000000000000001",
	get: getter(run.Read),
	// The run's next transition repairs before it moves.
	repair: func(y *yard.Yard, id string) error {
		_, err := run.Move(y, id, run.Change{To: run.Failed, By: "impsup", Actor: "test", Why: "after the crash"})
		return err
	},
	repairAdds: 1,
	dir:        func(y *yard.Yard, id string) string { return y.Path("runs", id) },
}}

// TestCrashBetweenWriteAndRecord kills the writer of each kind of record
// after its state file is written and before its record, once while
// filing and once while moving it: the state file holds the transition,
// the marker names it, no record exists yet, and after the repair each
// transition has exactly one record in the journal and the audit log.
func TestCrashBetweenWriteAndRecord(t *testing.T) {
	for _, c := range crashCases {
		for _, moving := range []bool{false, true} {
			name := c.name + "/file"
			if moving {
				name = c.name + "/move"
			}
			t.Run(name, func(t *testing.T) {
				y := yardtest.New(t)
				create := c.create
				if c.fixedID != "" {
					create = append(create, c.fixedID)
				}
				args, want := create, 1
				if moving {
					cmd := exec.Command(crasherBin(t), append([]string{y.Root}, create...)...)
					if out, err := cmd.CombinedOutput(); err != nil {
						t.Fatalf("crasher %v: %v: %s", create, err, out)
					}
				}
				id := c.fixedID
				if id == "" && moving {
					id = c.find(y)
				}
				if moving {
					args, want = append(c.move, id), 2
				}
				killedAt(t, y, "before-record", args...)
				if id == "" {
					id = c.find(y)
				}
				r, err := c.get(y, id)
				if err != nil {
					t.Fatal(err)
				}
				if h := r.Timeline().History; len(h) != want {
					t.Fatalf("after the kill %q has %d transitions on disk, want %d", id, len(h), want)
				}
				if marked, ok := event.Interrupted(c.dir(y, id)); !ok || marked != id {
					t.Errorf("marker names %q (%v), want %s", marked, ok, id)
				}
				if j, a := records(t, y, id); j[want] != 0 || a[want] != 0 {
					t.Errorf("transition %d recorded before the kill point: journal %v audit %v", want, j, a)
				}
				if err := c.repair(y, id); err != nil {
					t.Fatal(err)
				}
				if marked, ok := event.Interrupted(c.dir(y, id)); ok {
					t.Errorf("marker left after the repair naming %s", marked)
				}
				exactlyOnce(t, y, id, want+c.repairAdds)
			})
		}
	}
}

// TestCrashAroundOutbox kills the filer of a gate after the gate is
// written, once before its outbox entry and once after it: either way,
// after the repair the outbox owes exactly one notification of the filing
// and the journal holds exactly one record of it. Without a receiver in
// org.toml, the repair writes no entry either.
func TestCrashAroundOutbox(t *testing.T) {
	for _, point := range []string{"before-record", "after-outbox"} {
		t.Run(point, func(t *testing.T) {
			y := yardtest.New(t)
			if err := os.WriteFile(y.Path("org.toml"), []byte("[notify]\ncommand = [\"true\"]\n"), 0o640); err != nil {
				t.Fatal(err)
			}
			killedAt(t, y, point, "gate-file")
			id := only(gate.List(y, gate.Filter{}))
			if id == "" {
				t.Fatal("no gate was written")
			}
			owed, _ := notify.Pending(y)
			if wantBefore := point == "after-outbox"; (len(owed) == 1) != wantBefore {
				t.Fatalf("before the repair the outbox holds %v", owed)
			}
			if err := gate.Repair(y); err != nil {
				t.Fatal(err)
			}
			owed, bad := notify.Pending(y)
			if len(owed) != 1 || owed[0].ID != id+".1" || owed[0].Event != "gate-filed" || owed[0].Imp != "yuko" || len(bad) != 0 {
				t.Fatalf("after the repair the outbox holds %v (%v)", owed, bad)
			}
			exactlyOnce(t, y, id, 1)
		})
	}
}

func TestCrashWithoutReceiver(t *testing.T) {
	y := yardtest.New(t)
	killedAt(t, y, "before-record", "gate-file")
	id := only(gate.List(y, gate.Filter{}))
	if err := gate.Repair(y); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Lstat(y.Path("outbox")); !os.IsNotExist(err) {
		t.Fatalf("an outbox was written without a receiver: %v", err)
	}
	exactlyOnce(t, y, id, 1)
}
