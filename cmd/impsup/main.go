// Command impsup is the supervisor: it runs an impyard yard's tasks in
// containerd boxes.
package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/impyard/impyard/lib/box"
	"github.com/impyard/impyard/lib/cli"
	"github.com/impyard/impyard/lib/complete"
	"github.com/impyard/impyard/lib/config"
	"github.com/impyard/impyard/lib/supervisor"
	"github.com/impyard/impyard/lib/yard"
)

const usage = `usage: impsup COMMAND [flags]

The supervisor of an impyard yard: fires schedules, runs waiting tasks in
containerd boxes that can reach nothing but impgw, briefs each box, turns
each exit into the task's outcome and files continuation tasks.

Commands:
  init     make a directory a yard, or finish one
  run      supervise until stopped
  once     one pass: start what may start, wait for those boxes, settle
  doctor   check every prerequisite, one line each
  status   what needs the owner: tasks, pending gates, spend, daemons, failures
  config   edit an authority file as visudo does (config edit FILE)
  pause    stop dispatch, schedules and the gateway for imps or the yard
  resume   lift a pause

Run 'impsup COMMAND --help' or 'impsup help COMMAND' for a command's flags.

Examples:
  impsup init /srv/yard
  impsup doctor
  impsup status
  impsup pause --reason 'away until Monday'
  impsup run
  */5 * * * * IMPYARD_ROOT=/srv/yard /usr/local/bin/impsup once   # crontab
`

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	os.Exit(run(ctx, os.Args[1:], os.Stdin, os.Stdout, os.Stderr))
}

func run(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	e := &cli.Env{Name: "impsup", Names: complete.Names, Stdin: stdin, Stdout: stdout, Stderr: stderr}
	return e.Dispatch(args, usage, map[string]func([]string) error{
		"init":   func(a []string) error { return initCmd(e, a) },
		"run":    func(a []string) error { return runCmd(ctx, e, a) },
		"once":   func(a []string) error { return onceCmd(ctx, e, a) },
		"doctor": func(a []string) error { return doctor(ctx, e, a) },
		"status": func(a []string) error { return statusCmd(e, a) },
		"config": func(a []string) error { return configCmd(e, a) },
		"pause":  func(a []string) error { return pauseCmd(ctx, e, a, false) },
		"resume": func(a []string) error { return pauseCmd(ctx, e, a, true) },
	})
}

// open builds a supervisor for the yard, holding the yard's supervisor
// lock until the returned close.
func open(ctx context.Context, e *cli.Env, root string) (*supervisor.Supervisor, func(), error) {
	y, err := yard.Open(root)
	if err != nil {
		return nil, nil, err
	}
	home, err := yard.Home()
	if err != nil {
		return nil, nil, err
	}
	org, err := config.LoadOrg(y)
	if err != nil {
		return nil, nil, err
	}
	unlock, err := supervisor.Lock(y)
	if err != nil {
		return nil, nil, err
	}
	r, err := box.New(ctx, org.Containerd.Address, org.Containerd.Namespace)
	if err != nil {
		unlock()
		return nil, nil, cli.WithHint(fmt.Errorf("%w (tasks stay waiting)", err), "start containerd, or set [containerd] address in org.toml")
	}
	s := &supervisor.Supervisor{Yard: y, Home: home, Runner: r, Logf: e.Logf}
	return s, func() { r.Close(); unlock() }, nil
}

const runUsage = `usage: impsup run [--rescan INTERVAL]

Supervise until SIGINT or SIGTERM. At start, boxes left by a previous
impsup are adopted, tasks whose box is gone fail with the reason, and
leftover containers are removed. Then every change to the queue or the
gates (inotify), every box's end, and a rescan every INTERVAL start a pass.
Boxes still running when it stops keep running; the next start adopts
them.

Examples:
  impsup run
`

func runCmd(ctx context.Context, e *cli.Env, args []string) error {
	fs := e.FlagSet("run", runUsage)
	root := cli.RootFlag(fs)
	rescan := cli.PositiveDuration(fs, "rescan", 10*time.Second, "full rescan `INTERVAL`")
	if err := cli.Parse(fs, args); err != nil {
		return err
	}
	s, done, err := open(ctx, e, *root)
	if err != nil {
		return err
	}
	defer done()
	s.Ready = e.Ready
	defer e.StoppingOn(ctx)()
	s.Logf("supervising %s", s.Yard.Root)
	return s.Run(ctx, *rescan)
}

const onceUsage = `usage: impsup once [--json]

One pass: adopt or settle what a previous impsup left, fire due
schedules, start the waiting tasks that may start now, wait for those
boxes to end, and settle the tasks they leave. Prints how many boxes it
started. Exits 111 when another impsup holds the yard or containerd or
impgw does not answer: the tasks stay waiting; try again later.

Examples:
  impsup once
`

func onceCmd(ctx context.Context, e *cli.Env, args []string) error {
	fs := e.FlagSet("once", onceUsage)
	e.TimeoutFlag(fs)
	root := cli.RootFlag(fs)
	asJSON := fs.Bool("json", false, `print {"started": N} as one JSON object`)
	if err := cli.Parse(fs, args); err != nil {
		return err
	}
	s, done, err := open(ctx, e, *root)
	if err != nil {
		return err
	}
	defer done()
	n, err := s.Once(ctx)
	if *asJSON {
		if jerr := cli.JSONLine(e.Stdout, map[string]int{"started": n}); jerr != nil && err == nil {
			err = jerr
		}
		return err
	}
	fmt.Fprintf(e.Stdout, "started %d\n", n)
	return err
}
