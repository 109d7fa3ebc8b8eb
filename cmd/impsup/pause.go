package main

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/impyard/impyard/lib/cli"
	"github.com/impyard/impyard/lib/complete"
	"github.com/impyard/impyard/lib/pause"
	"github.com/impyard/impyard/lib/yard"
)

const pauseUsage = `usage: impsup pause [IMP...] [--reason TEXT] [--stop] [--timeout D] [--json]

Pause the named imps, or with none the whole yard: nothing of theirs is
dispatched, their schedules skip (the skipped times are recorded in the
journal, never made up after), impgw refuses their runs' requests and
proposals with 403 naming the pause, and impexec holds their approved
gates. With --stop, their running boxes are stopped now (SIGTERM, then
SIGKILL after the ceiling's grace) and their tasks go to review with the
reason. The pause is pause/pause.json; it is recorded in each imp's
journal and notified ([notify]).

It returns once every running impsup and impgw has acknowledged the
pause, or exits 111 naming those that did not within --timeout (the
pause stays written and applies when they read it). No daemon running
is not an error: there is nothing that has to take it.

Examples:
  impsup pause --reason 'reviewing spend'
  impsup pause mailer --stop --reason 'sent twice'
`

const resumeUsage = `usage: impsup resume [IMP...] [--timeout D] [--json]

Lift the pause of the named imps, or with none every pause (the yard's
and each imp's). An imp resumed while the whole yard stays paused stays
paused. Schedules fire again from their next time; approved gates held
by the pause are executed. Exits like impsup pause.

Examples:
  impsup resume
  impsup resume mailer
`

func pauseCmd(ctx context.Context, e *cli.Env, args []string, resume bool) error {
	name, text := "pause", pauseUsage
	if resume {
		name, text = "resume", resumeUsage
	}
	fs := e.FlagSet(name, text)
	e.Complete(fs, "", cli.Names(complete.Imp))
	root := cli.RootFlag(fs)
	var reason *string
	var stop *bool
	if !resume {
		reason = fs.String("reason", "", "why, recorded and shown with the pause")
		stop = fs.Bool("stop", false, "stop the imps' running boxes now")
	}
	timeout := cli.PositiveDuration(fs, "timeout", 5*time.Second, "wait at most `D` for the daemons to acknowledge")
	asJSON := fs.Bool("json", false, "print the result as one JSON object")
	if err := cli.Parse(fs, args); err != nil {
		return err
	}
	y, err := yard.Open(*root)
	if err != nil {
		return err
	}
	c := pause.Change{Imps: fs.Args(), By: cli.User()}
	if !resume {
		c.Reason, c.Stop = *reason, *stop
	}
	res, err := pause.Set(ctx, y, resume, c, *timeout)
	if res == nil {
		return err
	}
	if *asJSON {
		if jerr := cli.JSONLine(e.Stdout, res); jerr != nil && err == nil {
			err = jerr
		}
		return err
	}
	what := "the yard"
	if len(c.Imps) > 0 {
		what = strings.Join(c.Imps, ", ")
	}
	done := "paused"
	if resume {
		done = "resumed"
	}
	fmt.Fprintf(e.Stdout, "%s %s (%s %d)\n", done, what, name, res.State.Seq)
	switch {
	case len(res.Running) == 0:
		fmt.Fprintf(e.Stdout, "no impsup or impgw is running: nothing had to take it; each applies it when it starts\n")
	case len(res.Took) > 0:
		fmt.Fprintf(e.Stdout, "taken by %s\n", strings.Join(res.Took, ", "))
	}
	return err
}
