package main

import (
	"errors"

	"github.com/impyard/impyard/lib/cli"
	"github.com/impyard/impyard/lib/status"
	"github.com/impyard/impyard/lib/yard"
)

const statusUsage = `usage: impsup status [--json] [--failures N] [--color WHEN] [--root DIR]

One screen of what needs the owner: first the pause in force, if any
(impsup pause), then tasks by state per imp, the gates
still pending and how long they have waited (and why an approved one
waits, when org.toml names no executor for it), today's spend against the
budgets in org.toml, whether impsup and impexec are running (their locks
in runs/ are held) and whether impgw answers at org.toml's gateway listen
address, and the most recent failed tasks and gates with their reason.
An authority file that every daemon refuses for its owner or mode
(org.toml, policies/gateway.json, an imp.toml; impyard-security(7)) is
named among the warnings. An org.toml that does not load is shown
first, and the rest of the yard still after it. It only reads; nothing in the yard is created or changed.

With --json, one JSON object with the parts paused (and pause, the
pause file, while anything is paused), daemons, tasks, gates, spend,
failures and warnings; times are RFC 3339, UTC, whole seconds.

Examples:
  impsup status
  impsup status --json | jq -r '.gates[] | select(.age_seconds > 86400) | .id'
`

func statusCmd(e *cli.Env, args []string) error {
	fs := e.FlagSet("status", statusUsage)
	root := cli.RootFlag(fs)
	asJSON := fs.Bool("json", false, "print one JSON object")
	failures := cli.PositiveInt(fs, "failures", status.DefaultFailures, "show the `N` most recent failures")
	color := cli.ColorFlag(fs)
	if err := cli.Parse(fs, args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return cli.Usagef("status: unexpected argument %q", fs.Arg(0))
	}
	y, err := yard.Open(*root)
	if err != nil {
		return err
	}
	s, err := status.Gather(y, status.Options{Failures: *failures})
	if err != nil {
		return err
	}
	for _, w := range s.Warnings {
		e.Warn(errors.New(w))
	}
	if *asJSON {
		return cli.JSONLine(e.Stdout, s)
	}
	return s.WriteText(e.Stdout, cli.Painter(cli.Colour(*color, e.Stdout)))
}
