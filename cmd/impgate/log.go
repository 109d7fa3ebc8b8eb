package main

import (
	"fmt"

	"github.com/impyard/impyard/lib/cli"
	"github.com/impyard/impyard/lib/complete"
)

const logUsage = `usage: impgate log [--json] GATE

Print a gate's timeline: filed, decided (by whom, when, why), executing,
executed or failed, one transition per line.

Examples:
  impgate log g-01jf8k2m3nx4k9q2
  impgate log --json g-01jf8k2m3nx4k9q2 | jq -r .by
`

func logCmd(e *cli.Env, args []string) error {
	fs := e.FlagSet("log", logUsage)
	e.Complete(fs, "", cli.Names(complete.Gate))
	root := cli.RootFlag(fs)
	asJSON := fs.Bool("json", false, "print one JSON object per transition")
	g, err := oneGate(fs, args, root)
	if err != nil {
		return err
	}
	for _, h := range g.History {
		if *asJSON {
			err = cli.JSONLine(e.Stdout, h)
		} else {
			_, err = fmt.Fprintln(e.Stdout, cli.Timeline(h.At, h.From, h.To, h.By, h.Why))
		}
		if err != nil {
			return err
		}
	}
	return nil
}
