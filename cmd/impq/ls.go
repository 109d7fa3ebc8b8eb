package main

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/impyard/impyard/lib/cli"
	"github.com/impyard/impyard/lib/complete"
	"github.com/impyard/impyard/lib/id"
	"github.com/impyard/impyard/lib/queue"
	"github.com/impyard/impyard/lib/state"
	"github.com/impyard/impyard/lib/yard"
)

const lsUsage = `usage: impq ls [--imp NAME] [--state STATE]... [--since WHEN] [--limit N] [--json]

List tasks, oldest first. SOURCE is the inbound source whose delivery
filed a task (its text is untrusted data), or - for one filed in the yard. Files that cannot be read are reported on
standard error by name and the rest are still listed.

--state may be given more than once, or as a comma-separated list: tasks
in any of those states. --since keeps tasks made at or after a time: a
duration back from now (15m, 2h, 7d), an RFC 3339 time or a date, the
same forms as impgw log --since. --limit N lists only the N newest of
the tasks that match, still oldest first.

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
	e.Complete(fs, "imp", cli.Names(complete.Imp))
	var states stateList
	fs.Var(&states, "state", "only tasks in `STATE` (waiting, running, needs-review, done, failed, cancelled; repeatable, or comma-separated)")
	e.Complete(fs, "state", cli.Words(state.Waiting, state.Running, state.NeedsReview, state.Done, state.Failed, state.Cancelled))
	since := fs.String("since", "", "only tasks made at or after `DURATION|TIME` (15m, 2h, 7d, 2026-07-01T10:00:00Z, 2026-07-01)")
	limit := fs.Int("limit", 0, "at most the `N` newest tasks (0: all)")
	asJSON := fs.Bool("json", false, "print one JSON object per line")
	if err := cli.Parse(fs, args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return cli.Usagef("ls: unexpected argument %q", fs.Arg(0))
	}
	for _, st := range states {
		if !state.TaskMachine.Known(st) {
			return cli.Usagef("ls: unknown state %q", st)
		}
	}
	if len(states) == 1 {
		f.State = states[0]
	}
	if *limit < 0 {
		return cli.Usagef("ls: --limit %d: want 0 or more", *limit)
	}
	now := time.Now()
	var from time.Time
	if *since != "" {
		var err error
		if from, err = cli.ParseSince(*since, now); err != nil {
			return cli.Usagef("ls: %v", err)
		}
	}
	y, err := yard.Open(*root)
	if err != nil {
		return err
	}
	keep := func(t *queue.Task) bool {
		return (len(states) == 0 || slices.Contains(states, t.State)) && !t.Created.Before(from)
	}
	// Abbreviations unique among every task, listed or not, as
	// queue.Resolve takes them back.
	shortsOf := cli.Meanwhile(func() (map[string]string, error) {
		ids, err := queue.IDs(y)
		if err != nil {
			return nil, err
		}
		return id.Shortest(ids), nil
	})
	return cli.List(e, *asJSON, "ID\tIMP\tSTATE\tKIND\tSOURCE\tAGE\tTEXT", func(t *listedTask) string {
		return fmt.Sprintf("%s\t%s\t%s\t%s\t%s\t%s\t%s", e.Abbrev(t.ID, t.shorts), t.Imp, t.State, cli.Cell(string(t.Kind)), cli.Cell(sourceOf(t.Task)), cli.Age(now, t.Created), cli.OneLine(t.Text, 60))
	}, func(render func(*listedTask) cli.Line, emit func(cli.Line) error) ([]error, error) {
		// Rendered as read, on every core; nil: not kept, or no
		// abbreviations to render it with.
		prep := func(t *queue.Task) *cli.Line {
			shorts, err := shortsOf()
			if err != nil || !keep(t) {
				return nil
			}
			l := render(&listedTask{t, shorts[t.ID], shorts})
			return &l
		}
		bad, err := listTasks(y, f, *limit, prep, emit)
		// Without the abbreviations nothing was printed, and the
		// listing fails as it did before reading any file.
		if _, serr := shortsOf(); serr != nil {
			return nil, serr
		}
		return bad, err
	})
}

// listTasks passes emit the lines prep renders of the tasks f selects,
// only the newest limit of them unless limit is 0.
func listTasks(y *yard.Yard, f queue.Filter, limit int, prep func(*queue.Task) *cli.Line, emit func(cli.Line) error) ([]error, error) {
	if limit == 0 {
		return queue.EachAs(y, f, prep, func(l *cli.Line) error {
			if l == nil {
				return nil
			}
			return emit(*l)
		})
	}
	// The newest N, still listed oldest first: only N are held.
	var last []*cli.Line
	bad, err := queue.EachAs(y, f, prep, func(l *cli.Line) error {
		if l != nil {
			if last = append(last, l); len(last) > limit {
				last = last[1:]
			}
		}
		return nil
	})
	for _, l := range last {
		if err == nil {
			err = emit(*l)
		}
	}
	return bad, err
}

// stateList is --state, given once or more, each one state or several
// separated by commas.
type stateList []string

func (l *stateList) String() string { return strings.Join(*l, ",") }
func (l *stateList) Set(s string) error {
	*l = append(*l, strings.Split(s, ",")...)
	return nil
}

// listedTask is a task as impq ls --json prints it: the task file and
// its id's shortest unique abbreviation.
type listedTask struct {
	*queue.Task
	ShortID string            `json:"short_id"`
	shorts  map[string]string // every task's, for the table
}

// sourceOf is a task's SOURCE column.
func sourceOf(t *queue.Task) string {
	if t.Source == "" {
		return "-"
	}
	return t.Source
}
