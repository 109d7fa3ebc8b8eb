package main

import (
	"errors"
	"flag"
	"fmt"
	"time"

	"github.com/impyard/impyard/lib/cli"
	"github.com/impyard/impyard/lib/complete"
	"github.com/impyard/impyard/lib/queue"
	"github.com/impyard/impyard/lib/state"
	"github.com/impyard/impyard/lib/yard"
)

const cancelUsage = `usage: impq cancel [--as NAME] [--reason WHY] [--json] TASK

Cancel a waiting, running or needs-review task. A running task's box is
stopped by the supervisor when it sees the cancellation. A task in review
is closed: its gates stay as they are (a pending one can still be decided),
but it ends; use it when a gate that expired or failed leaves it in review.
Cancelling a task already cancelled changes nothing and exits 0 with a
note; a task done or failed is refused (exit 1).

Examples:
  impq cancel t-01jf8k2m3nx4k9q2
  impq ls --imp yuko --state waiting --json | jq -r .id | xargs -n1 impq cancel
`

const retryUsage = `usage: impq retry [--as NAME] [--json] TASK

Move a failed task back to waiting, as a new attempt of the same task.

Examples:
  impq retry t-01jf8k2m3nx4k9q2
`

func cancel(e *cli.Env, args []string) error {
	fs := e.FlagSet("cancel", cancelUsage)
	e.Complete(fs, "", cli.Names(complete.Kind(complete.Task, state.Waiting, state.Running, state.NeedsReview)))
	e.TimeoutFlag(fs)
	root := cli.RootFlag(fs)
	as := fs.String("as", "", "`NAME` of who cancels (default $USER)")
	reason := fs.String("reason", "cancelled", "`WHY` it is cancelled")
	asJSON := jsonFlag(fs)
	taskID, y, err := oneTask(fs, args, root)
	if err != nil {
		return err
	}
	t, err := queue.Move(y, taskID, queue.Change{To: state.Cancelled, By: by(*as), Actor: "impq", Why: *reason})
	if errors.Is(err, state.ErrIllegal) {
		// Cancelled already is the state asked for: a repeat, not a
		// refusal (impyard(7), REPEATED ACTIONS).
		if was, gerr := queue.Get(y, taskID); gerr == nil && was.State == state.Cancelled {
			h := was.History[len(was.History)-1]
			fmt.Fprintf(e.Stderr, "%s: note: %s already cancelled by %s at %s; nothing to do\n", e.Name, was.ID, cli.Printable(h.By), h.At.UTC().Format(time.RFC3339))
			if !*asJSON {
				return nil
			}
			t, err = was, nil
		}
	}
	if err != nil {
		return err
	}
	if *asJSON {
		return cli.JSONLine(e.Stdout, t)
	}
	_, err = fmt.Fprintf(e.Stdout, "%s %s\n", t.ID, t.State)
	return err
}

func retry(e *cli.Env, args []string) error {
	fs := e.FlagSet("retry", retryUsage)
	e.Complete(fs, "", cli.Names(complete.Kind(complete.Task, state.Failed)))
	e.TimeoutFlag(fs)
	root := cli.RootFlag(fs)
	as := fs.String("as", "", "`NAME` of who retries (default $USER)")
	asJSON := jsonFlag(fs)
	taskID, y, err := oneTask(fs, args, root)
	if err != nil {
		return err
	}
	t, err := queue.Retry(y, taskID, by(*as), "impq")
	if err != nil {
		return err
	}
	if *asJSON {
		return cli.JSONLine(e.Stdout, t)
	}
	_, err = fmt.Fprintf(e.Stdout, "%s %s attempt %d\n", t.ID, t.State, t.Attempt)
	return err
}

// jsonFlag adds --json to a command that prints the task it changed.
func jsonFlag(fs *flag.FlagSet) *bool {
	return fs.Bool("json", false, "print the task as one JSON object")
}

func oneTask(fs *flag.FlagSet, args []string, root *string) (string, *yard.Yard, error) {
	if err := cli.Parse(fs, args); err != nil {
		return "", nil, err
	}
	if fs.NArg() != 1 {
		return "", nil, cli.Usagef("want exactly one task id")
	}
	y, err := yard.Open(*root)
	if err != nil {
		return "", nil, err
	}
	taskID, err := queue.Resolve(y, fs.Arg(0))
	return taskID, y, err
}

func by(as string) string {
	if as != "" {
		return as
	}
	return cli.User()
}
