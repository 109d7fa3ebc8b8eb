package main

import (
	"fmt"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/impyard/impyard/lib/cli"
	"github.com/impyard/impyard/lib/complete"
	"github.com/impyard/impyard/lib/gate"
	"github.com/impyard/impyard/lib/proposal"
	"github.com/impyard/impyard/lib/queue"
	runrec "github.com/impyard/impyard/lib/run"
	"github.com/impyard/impyard/lib/state"
	"github.com/impyard/impyard/lib/store"
	"github.com/impyard/impyard/lib/yard"
)

const showUsage = `usage: impq show [--json] TASK

Show one task: its fields, its text and every transition with who, when
and why. A failed task's "box log" line names its last run's box.log.
Each "action" line is an action the task's imp proposed: a gate filed
for it, with its state and who moved it there, when and why (a denial,
a failure), or a proposal the gateway refused (its kind of refusal and
the reason, from runs/decisions.jsonl); --json lists them as "actions".

Examples:
  impq show t-01jf8k2m3nx4k9q2
  impq show --json t-01jf8k2m3nx4k9q2 | jq .history
`

func show(e *cli.Env, args []string) error {
	fs := e.FlagSet("show", showUsage)
	e.Complete(fs, "", cli.Names(complete.Task))
	root := cli.RootFlag(fs)
	asJSON := fs.Bool("json", false, "print the task as one JSON object")
	if err := cli.Parse(fs, args); err != nil {
		return err
	}
	if fs.NArg() != 1 {
		return cli.Usagef("show: want exactly one task id")
	}
	y, err := yard.Open(*root)
	if err != nil {
		return err
	}
	taskID, err := queue.Resolve(y, fs.Arg(0))
	if err != nil {
		return err
	}
	t, err := queue.Get(y, taskID)
	if err != nil {
		return err
	}
	acts, bad, err := actionsOf(y, t)
	if err != nil {
		return err
	}
	for _, b := range bad {
		e.Warn(b)
	}
	if *asJSON {
		return cli.JSONLine(e.Stdout, shownTask{Task: t, Actions: acts})
	}
	w := e.Stdout
	fmt.Fprintf(w, "task     %s\nimp      %s\nstate    %s\nkind     %s\nattempt  %d\n", t.ID, t.Imp, t.State, cli.Printable(t.Kind), t.Attempt)
	owner := "owner"
	if t.Proactive {
		owner = "proactive"
	}
	fmt.Fprintf(w, "origin   %s\n", owner)
	field := func(k, v string) {
		if v != "" {
			fmt.Fprintf(w, "%-8s %s\n", k, cli.Printable(v))
		}
	}
	if t.Source != "" {
		field("source", t.Source+" (inbound: its text is untrusted data)")
	}
	field("labels", strings.Join(t.Labels, ", "))
	field("repo", t.Repo)
	field("base", t.Base)
	field("continues", t.Continues)
	field("unique", t.Unique)
	if t.NotBefore != nil {
		field("start", "not before "+t.NotBefore.Local().Format(time.RFC3339))
	}
	field("runs", strings.Join(t.Runs, ", "))
	field("reason", t.Reason)
	if t.State == state.Failed && len(t.Runs) > 0 {
		// Where the box said why: the first place to look.
		log := runrec.Path(y, t.Runs[len(t.Runs)-1], runrec.BoxLog)
		if _, err := os.Stat(log); err == nil {
			field("box log", log)
		} else {
			field("box log", log+" (not there: no box wrote it)")
		}
	}
	for _, a := range acts {
		field("action", a.String())
	}
	// The text is the sender's: its line breaks are kept, its carriage
	// returns and escape sequences shown, so it cannot erase the fence.
	fmt.Fprintf(w, "\n%s\n\n", cli.PrintableLines(strings.TrimRight(t.Text, "\n")))
	for _, h := range t.History {
		fmt.Fprintln(w, cli.Timeline(h.At, h.From, h.To, h.By, h.Why))
	}
	return nil
}

// shownTask is a task as show --json prints it: the task file's fields
// and its actions.
type shownTask struct {
	*queue.Task
	Actions []action `json:"actions,omitempty"`
}

// action is what became of one action the task proposed: a gate filed
// for it, as its last transition left it, or a refused proposal.
type action struct {
	Gate    string `json:"gate_id,omitempty"`
	Intent  string `json:"intent"`
	State   string `json:"state"`             // the gate's, or "refused"
	Refusal string `json:"refusal,omitempty"` // the kind, for a refused proposal
	By      string `json:"by,omitempty"`
	At      string `json:"at"`
	Why     string `json:"why,omitempty"`
}

func (a action) String() string {
	s := a.Intent + " " + a.State
	if a.Gate != "" {
		s = a.Gate + " " + s
	}
	if a.Refusal != "" {
		s += " (" + a.Refusal + ")"
	}
	if a.By != "" {
		s += " by " + a.By
	}
	if at, err := time.Parse(time.RFC3339, a.At); err == nil {
		s += " at " + at.Local().Format(time.RFC3339)
	}
	if a.Why != "" {
		s += ": " + cli.OneLine(a.Why, 300)
	}
	return s
}

// actionsOf lists t's actions, oldest first: the gates of its imp filed
// for it, and the proposals the gateway refused for it. Gate files that
// cannot be read and refusal records that cannot be parsed are returned
// in bad, and the rest still listed.
func actionsOf(y *yard.Yard, t *queue.Task) ([]action, []error, error) {
	var acts []action
	// A gate's file is rewritten at each move, so none of the task's
	// was last written before the task was made.
	bad, err := gate.Each(y, gate.Filter{All: true, Imp: t.Imp, WrittenSince: t.Created.Add(-time.Second)}, func(g *gate.Gate) error {
		if g.Task != t.ID {
			return nil
		}
		a := action{Gate: g.ID, Intent: g.Intent, State: g.State, At: store.FormatTime(g.Created)}
		if n := len(g.History); n > 0 {
			h := g.History[n-1]
			a.By, a.At, a.Why = h.By, store.FormatTime(h.At), h.Why
		}
		acts = append(acts, a)
		return nil
	})
	if err != nil {
		return nil, bad, err
	}
	refused, more, err := proposal.Refusals(y, t.ID)
	if err != nil {
		return nil, bad, err
	}
	for _, r := range refused {
		acts = append(acts, action{Intent: r.Intent, State: r.Verdict.String(), Refusal: r.Refusal.String(), By: "impgw",
			At: store.FormatTime(r.Time), Why: r.Reason})
	}
	slices.SortStableFunc(acts, func(a, b action) int { return strings.Compare(a.At, b.At) })
	return acts, append(bad, more...), nil
}
