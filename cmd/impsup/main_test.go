package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/rogpeppe/go-internal/testscript"

	"github.com/impyard/impyard/internal/scripttest"
	"github.com/impyard/impyard/lib/gate"
	"github.com/impyard/impyard/lib/queue"
	"github.com/impyard/impyard/lib/yard"
)

// TestMain makes this test binary double as impsup, on PATH for the scripts.
func TestMain(m *testing.M) {
	testscript.Main(m, map[string]func(){"impsup": scripttest.Main(main)})
}

func TestScripts(t *testing.T) {
	p := scripttest.Params(map[string]func(ts *testscript.TestScript, neg bool, args []string){
		"task": taskCmd,
		"gate": gateCmd,
	})
	// CMDBIN is where impsup is, for a script that narrows PATH to
	// stand-ins of the runtimes.
	self, err := exec.LookPath("impsup")
	if err != nil {
		t.Fatal(err)
	}
	setup := p.Setup
	p.Setup = func(env *testscript.Env) error {
		env.Setenv("CMDBIN", filepath.Dir(self))
		if setup != nil {
			return setup(env)
		}
		return nil
	}
	testscript.Run(t, p)
}

func scriptYard(ts *testscript.TestScript) *yard.Yard {
	y, err := yard.Open(os.Getenv("IMPYARD_ROOT"))
	if y == nil || err != nil {
		y, err = yard.Open(ts.Getenv("IMPYARD_ROOT"))
	}
	ts.Check(err)
	return y
}

// taskCmd, "task IMP [STATE [WHY]]...", queues a task for IMP through
// lib/queue and moves it through each STATE in turn, WHY being the
// reason of the move; it prints the task's id.
func taskCmd(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) < 1 {
		ts.Fatalf("usage: task IMP [STATE WHY]...")
	}
	y := scriptYard(ts)
	id, _, err := queue.Add(y, queue.AddOptions{Imp: args[0], Text: "a task", Kind: queue.Research, By: "alice", Actor: "test"})
	ts.Check(err)
	for rest := args[1:]; len(rest) > 0; rest = rest[2:] {
		if len(rest) < 2 {
			ts.Fatalf("usage: task IMP [STATE WHY]...")
		}
		_, err := queue.Move(y, id, queue.Change{To: rest[0], By: "test", Why: rest[1]})
		ts.Check(err)
	}
	ts.Logf("task %s", id)
}

// gateCmd, "gate IMP INTENT", files a gate for IMP through lib/gate.
func gateCmd(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) != 2 {
		ts.Fatalf("usage: gate IMP INTENT")
	}
	g, err := gate.File(scriptYard(ts), gate.FileOptions{Imp: args[0], Intent: args[1], Payload: []byte(`{"text":"hi"}`), By: args[0], Actor: "test"})
	ts.Check(err)
	ts.Logf("gate %s", g.ID)
}
