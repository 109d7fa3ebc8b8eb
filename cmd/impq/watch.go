package main

import (
	"context"
	"time"

	"github.com/impyard/impyard/lib/cli"
	"github.com/impyard/impyard/lib/complete"
	"github.com/impyard/impyard/lib/queue"
	"github.com/impyard/impyard/lib/yard"
)

const watchUsage = `usage: impq watch [--imp NAME] [--rescan INTERVAL] [--json]

Print every task transition that happens from now on, one JSON object per
line: {"id","imp","from","to","by","at","why"}. Runs until interrupted.
Lost file events (an inotify overflow) are recovered by rescanning.

Examples:
  impq watch --imp yuko
  impq watch | jq -r 'select(.to=="needs-review") | .id' | while read id; do notify-send "$id"; done
`

func watchCmd(ctx context.Context, e *cli.Env, args []string) error {
	fs := e.FlagSet("watch", watchUsage)
	root := cli.RootFlag(fs)
	imp := fs.String("imp", "", "only tasks of imp `NAME`")
	e.Complete(fs, "imp", cli.Names(complete.Imp))
	rescan := cli.PositiveDuration(fs, "rescan", 10*time.Second, "slow full rescan `INTERVAL`")
	// Accepted so that --json works on every command that prints: watch
	// prints JSON lines either way.
	fs.Bool("json", false, "print one JSON object per transition (always so)")
	if err := cli.Parse(fs, args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return cli.Usagef("watch: unexpected argument %q", fs.Arg(0))
	}
	y, err := yard.Open(*root)
	if err != nil {
		return err
	}
	// A reader that goes away (impq watch | head -1) ends the watch.
	ctx, stop := context.WithCancel(ctx)
	defer stop()
	var werr error
	err = queue.Watch(ctx, y, *imp, *rescan, func(ev queue.Event) {
		if werr == nil {
			if werr = cli.JSONLine(e.Stdout, ev); werr != nil {
				stop()
			}
		}
	}, e.Warn)
	if werr != nil {
		return werr
	}
	return err
}
