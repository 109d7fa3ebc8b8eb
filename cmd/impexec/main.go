// Command impexec performs approved gates with credentials no box holds.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/impyard/impyard/lib/cli"
	"github.com/impyard/impyard/lib/complete"
	"github.com/impyard/impyard/lib/config"
	"github.com/impyard/impyard/lib/executor"
	"github.com/impyard/impyard/lib/gate"
	runs "github.com/impyard/impyard/lib/run"
	"github.com/impyard/impyard/lib/state"
	"github.com/impyard/impyard/lib/yard"
)

const usage = `usage: impexec COMMAND [flags]

Performs approved gates: sends the frozen payload with the real credential
(HTTP actions go through impgw as the org subject), records the result in
the gate, the journal, the audit log and the ledger.

Commands:
  run    execute approved gates as they appear, until stopped
  once   execute one gate now

Run 'impexec COMMAND --help' or 'impexec help COMMAND' for a command's flags.

Examples:
  impexec run
  impexec once g-01m8nfx70pjmyn2n
`

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	os.Exit(run(ctx, os.Args[1:], os.Stdin, os.Stdout, os.Stderr))
}

func run(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	e := &cli.Env{Name: "impexec", Names: complete.Names, Stdin: stdin, Stdout: stdout, Stderr: stderr}
	return e.Dispatch(args, usage, map[string]func([]string) error{
		"run":  func(a []string) error { return runCmd(ctx, e, a) },
		"once": func(a []string) error { return once(ctx, e, a) },
	})
}

func runner(e *cli.Env, root string) (*executor.Runner, error) {
	y, err := yard.Open(root)
	if err != nil {
		return nil, err
	}
	home, err := yard.Home()
	if err != nil {
		return nil, err
	}
	return &executor.Runner{Yard: y, Home: home, Logf: e.Logf}, nil
}

const runUsage = `usage: impexec run [--rescan INTERVAL] [--workers N]

Execute approved gates as they appear (inotify on gates/, with a
rescan every INTERVAL). At start it takes up every gate still approved, and
every gate a dead executor left executing: an idempotent executor resumes
it, any other fails it with "outcome unknown". Every second it delivers
the notifications due in outbox/ to the receivers org.toml [notify] names,
retrying a failed one with backoff. Stops on SIGINT or SIGTERM.

Examples:
  impexec run
  impexec run --workers 8 --rescan 10s
`

// notifyPoll is how often run looks for notifications due.
const notifyPoll = time.Second

func runCmd(ctx context.Context, e *cli.Env, args []string) error {
	fs := e.FlagSet("run", runUsage)
	root := cli.RootFlag(fs)
	rescan := cli.PositiveDuration(fs, "rescan", 30*time.Second, "full rescan `INTERVAL`")
	workers := cli.PositiveInt(fs, "workers", 4, "`N` gates executed at once")
	if err := cli.Parse(fs, args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return cli.Usagef("run: unexpected argument %q", fs.Arg(0))
	}
	r, err := runner(e, *root)
	if err != nil {
		return err
	}
	// Held while it runs, shared with other executors: impsup status
	// tells from it that an executor is running.
	release, err := runs.Present(r.Yard, "impexec")
	if err != nil {
		return err
	}
	defer release()
	// An executor acts on org.toml's executors: one that a writer of
	// the yard could have written leaves it nothing to start on.
	if _, err := r.Org(); errors.Is(err, config.ErrUnsafe) {
		return err
	}
	r.Ready = e.Ready
	defer e.StoppingOn(ctx)()
	r.Logf("watching %s", gate.Dir(r.Yard))
	nctx, stopNotify := context.WithCancel(ctx)
	notified := make(chan struct{})
	go func() { defer close(notified); r.Notify(nctx, notifyPoll) }()
	defer func() { stopNotify(); <-notified }()
	return r.Run(ctx, *rescan, *workers)
}

const onceUsage = `usage: impexec once [--json] GATE

Execute one gate now and print its final state. A gate that is already
executed, failed or denied is left alone. Exits 1 when the gate ends
failed, and when it is left as it was, nothing sent, for what the owner
can fix: no executor for its intent in org.toml, an approval signed by a
key not in IMPYARD_HOME/keys/, an audit log that cannot be written; 111,
leaving the gate as it was, when another executor is working on it or
impgw does not answer for an http executor: try again later.

Examples:
  impexec once g-01m8nfx70pjmyn2n
`

func once(ctx context.Context, e *cli.Env, args []string) error {
	fs := e.FlagSet("once", onceUsage)
	e.Complete(fs, "", cli.Names(complete.Kind(complete.Gate, state.Approved)))
	e.TimeoutFlag(fs)
	root := cli.RootFlag(fs)
	asJSON := fs.Bool("json", false, "print the gate as one JSON object")
	if err := cli.Parse(fs, args); err != nil {
		return err
	}
	if fs.NArg() != 1 {
		return cli.Usagef("once: want exactly one gate id")
	}
	r, err := runner(e, *root)
	if err != nil {
		return err
	}
	gateID, err := gate.Resolve(r.Yard, fs.Arg(0))
	if err != nil {
		return err
	}
	g, err := r.Execute(ctx, gateID)
	if err != nil {
		return err
	}
	if *asJSON {
		if err := cli.JSONLine(e.Stdout, g); err != nil {
			return err
		}
	} else {
		fmt.Fprintf(e.Stdout, "%s %s\n", g.ID, g.State)
	}
	if g.State == state.Failed {
		return fmt.Errorf("gate %s failed: %s", g.ID, g.History[len(g.History)-1].Why)
	}
	return nil
}
