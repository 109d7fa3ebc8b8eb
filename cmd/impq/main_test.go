package main

import (
	"testing"
	"time"

	"github.com/rogpeppe/go-internal/testscript"

	"github.com/impyard/impyard/internal/scripttest"
	"github.com/impyard/impyard/lib/gate"
	"github.com/impyard/impyard/lib/proposal"
	"github.com/impyard/impyard/lib/state"
	"github.com/impyard/impyard/lib/store"
	"github.com/impyard/impyard/lib/yard"
)

// TestMain makes this test binary double as impq, on PATH for the scripts.
func TestMain(m *testing.M) {
	testscript.Main(m, map[string]func(){"impq": scripttest.Main(main)})
}

func TestScripts(t *testing.T) {
	testscript.Run(t, scripttest.Params(map[string]func(ts *testscript.TestScript, neg bool, args []string){
		"proposed": proposedCmd,
	}))
}

// proposedCmd records what became of a proposal of a task as the gateway
// and the owner leave it: "proposed VAR IMP TASK INTENT" files its gate,
// its id in $VAR; "proposed - IMP TASK INTENT deny BY WHY" files it and
// denies it; "proposed - IMP TASK INTENT refuse KIND WHY" appends the
// record of a refusal to the audit log instead.
func proposedCmd(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) != 4 && len(args) != 7 {
		ts.Fatalf("usage: proposed VAR|- IMP TASK INTENT [deny BY WHY | refuse KIND WHY]")
	}
	y, err := yard.Open(ts.Getenv("WORK"))
	ts.Check(err)
	v, imp, task, intent := args[0], args[1], args[2], args[3]
	if len(args) == 7 && args[4] == "refuse" {
		r := &proposal.Record{Time: time.Now(), Imp: imp, Task: task, Intent: intent, Verdict: proposal.Refused, Reason: args[6]}
		for k := proposal.Unexplained; k <= proposal.Paused; k++ {
			if k.String() == args[5] {
				r.Refusal = k
			}
		}
		b, err := r.MarshalJSON()
		ts.Check(err)
		p, err := y.DecisionsPath()
		ts.Check(err)
		ts.Check(store.AppendLine(p, append(b, '\n')))
		return
	}
	g, err := gate.File(y, gate.FileOptions{Imp: imp, Task: task, Intent: intent, Payload: []byte(`{"text":"hi"}`), By: imp, Actor: "impgw"})
	ts.Check(err)
	if v != "-" {
		ts.Setenv(v, g.ID)
	}
	if len(args) == 7 {
		if args[4] != "deny" {
			ts.Fatalf("proposed: want deny or refuse, not %q", args[4])
		}
		_, err := gate.Move(y, g.ID, gate.Change{To: state.Denied, By: args[5], Actor: "impgate", Why: args[6]})
		ts.Check(err)
	}
}
