// Command crasher files and moves one gate, task or run of the yard at
// its first argument, so the engine's tests can SIGKILL it at a named
// crash point (built with -tags impyard_crash, IMPYARD_CRASH set).
//
//	crasher ROOT gate-file | gate-deny ID | task-add | task-cancel ID | run-create ID | run-start ID
package main

import (
	"fmt"
	"os"

	"github.com/impyard/impyard/lib/gate"
	"github.com/impyard/impyard/lib/queue"
	"github.com/impyard/impyard/lib/run"
	"github.com/impyard/impyard/lib/state"
	"github.com/impyard/impyard/lib/yard"
)

func main() {
	if err := do(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "crasher:", err)
		os.Exit(1)
	}
}

func do(args []string) error {
	if len(args) < 2 {
		return fmt.Errorf("usage: crasher ROOT OP [ID]")
	}
	y, err := yard.Open(args[0])
	if err != nil {
		return err
	}
	arg := func() string {
		if len(args) > 2 {
			return args[2]
		}
		return ""
	}
	switch args[1] {
	case "gate-file":
		_, err = gate.File(y, gate.FileOptions{Imp: "yuko", Intent: "email-send", Payload: []byte(`{"n":1}`), By: "yuko", Actor: "crasher"})
	case "gate-deny":
		_, err = gate.Move(y, arg(), gate.Change{To: state.Denied, By: "alice", Actor: "crasher"})
	case "task-add":
		_, _, err = queue.Add(y, queue.AddOptions{Imp: "yuko", Text: "crash test", By: "yuko", Actor: "crasher"})
	case "task-cancel":
		_, err = queue.Move(y, arg(), queue.Change{To: state.Cancelled, By: "alice", Actor: "crasher"})
	case "run-create":
		_, err = run.Create(y, &run.Run{ID: arg(), Imp: "yuko", Task: "t-0000000000000001"}, "impsup", "crasher", "task t-0000000000000001")
	case "run-start":
		_, err = run.Move(y, arg(), run.Change{To: run.Running, By: "impsup", Actor: "crasher", Why: "box started"})
	default:
		return fmt.Errorf("unknown op %q", args[1])
	}
	return err
}
