package main

import (
	"fmt"
	"time"

	"github.com/impyard/impyard/lib/cli"
	"github.com/impyard/impyard/lib/id"
	"github.com/impyard/impyard/lib/queue"
	"github.com/impyard/impyard/lib/state"
	"github.com/impyard/impyard/lib/yard"
)

const lsUsage = `usage: impq ls [--imp NAME] [--state STATE] [--json]

List tasks, oldest first. SOURCE is the inbound source whose delivery
filed a task (its text is untrusted data), or - for one filed in the yard. Files that cannot be read are reported on
standard error by name and the rest are still listed.

On a terminal the ID column shows each id's shortest unique abbreviation
(at least 4 characters after "t-"), which show, cancel and retry take
back; elsewhere the whole id, for scripts. --json adds "short_id".

Examples:
  impq ls --state waiting
  impq ls --imp yuko --json | jq -r 'select(.state=="failed") | .id'
`

func ls(e *cli.Env, args []string) error {
	fs := e.FlagSet("ls", lsUsage)
	root := cli.RootFlag(fs)
	var f queue.Filter
	fs.StringVar(&f.Imp, "imp", "", "only tasks of imp `NAME`")
	fs.StringVar(&f.State, "state", "", "only tasks in `STATE` (waiting, running, needs-review, done, failed, cancelled)")
	asJSON := fs.Bool("json", false, "print one JSON object per line")
	if err := cli.Parse(fs, args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return cli.Usagef("ls: unexpected argument %q", fs.Arg(0))
	}
	if f.State != "" && !state.TaskMachine.Known(f.State) {
		return cli.Usagef("ls: unknown state %q", f.State)
	}
	y, err := yard.Open(*root)
	if err != nil {
		return err
	}
	now := time.Now()
	// Abbreviations unique among every task, listed or not, as
	// queue.Resolve takes them back.
	ids, err := queue.IDs(y)
	if err != nil {
		return err
	}
	shorts := id.Shortest(ids)
	return cli.List(e, *asJSON, "ID\tIMP\tSTATE\tKIND\tSOURCE\tAGE\tTEXT", func(t *listedTask) string {
		return fmt.Sprintf("%s\t%s\t%s\t%s\t%s\t%s\t%s", e.Abbrev(t.ID, shorts), t.Imp, t.State, cli.Cell(string(t.Kind)), cli.Cell(sourceOf(t.Task)), cli.Age(now, t.Created), cli.OneLine(t.Text, 60))
	}, func(fn func(*listedTask) error) ([]error, error) {
		return queue.Each(y, f, func(t *queue.Task) error { return fn(&listedTask{t, shorts[t.ID]}) })
	})
}

// listedTask is a task as impq ls --json prints it: the task file and
// its id's shortest unique abbreviation.
type listedTask struct {
	*queue.Task
	ShortID string `json:"short_id"`
}

// sourceOf is a task's SOURCE column.
func sourceOf(t *queue.Task) string {
	if t.Source == "" {
		return "-"
	}
	return t.Source
}
