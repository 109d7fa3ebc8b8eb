package main

import (
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/impyard/impyard/lib/cli"
	"github.com/impyard/impyard/lib/complete"
	"github.com/impyard/impyard/lib/queue"
	runrec "github.com/impyard/impyard/lib/run"
	"github.com/impyard/impyard/lib/state"
	"github.com/impyard/impyard/lib/yard"
)

const showUsage = `usage: impq show [--json] TASK

Show one task: its fields, its text and every transition with who, when
and why. A failed task's "box log" line names its last run's box.log.

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
	if *asJSON {
		return cli.JSONLine(e.Stdout, t)
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
	// The text is the sender's: its line breaks are kept, its carriage
	// returns and escape sequences shown, so it cannot erase the fence.
	fmt.Fprintf(w, "\n%s\n\n", cli.PrintableLines(strings.TrimRight(t.Text, "\n")))
	for _, h := range t.History {
		fmt.Fprintln(w, cli.Timeline(h.At, h.From, h.To, h.By, h.Why))
	}
	return nil
}
