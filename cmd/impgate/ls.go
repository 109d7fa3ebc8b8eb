package main

import (
	"fmt"
	"text/tabwriter"
	"time"

	"github.com/impyard/impyard/lib/cli"
	"github.com/impyard/impyard/lib/gate"
	"github.com/impyard/impyard/lib/yard"
)

const lsUsage = `usage: impgate ls [--all] [--imp NAME] [--json] [--color WHEN]

List pending gates, oldest first; with --all, decided gates too. Files
that cannot be read are reported on standard error by name and the rest
are still listed.

The PAYLOAD column says whether each gate's payload still matches its
sha256: "ok", or "EDITED" for a payload changed on disk after filing,
which can never be approved or executed (deny it). --json prints each
gate file with "payload_matches" (true or false) added.

Examples:
  impgate ls
  impgate ls --all --imp yuko --json | jq -r '[.id,.state,.intent] | @tsv'
`

func ls(e *cli.Env, args []string) error {
	fs := e.FlagSet("ls", lsUsage)
	root := cli.RootFlag(fs)
	var f gate.Filter
	fs.BoolVar(&f.All, "all", false, "include decided gates")
	fs.StringVar(&f.Imp, "imp", "", "only gates of imp `NAME`")
	asJSON := fs.Bool("json", false, "print one JSON object per line")
	color := cli.ColorFlag(fs)
	if err := cli.Parse(fs, args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return cli.Usagef("ls: unexpected argument %q", fs.Arg(0))
	}
	y, err := yard.Open(*root)
	if err != nil {
		return err
	}
	gates, bad := gate.List(y, f)
	for _, err := range bad {
		e.Warn(err)
	}
	if *asJSON {
		for _, g := range gates {
			if err := cli.JSONLine(e.Stdout, listed{g, g.Matches()}); err != nil {
				return err
			}
		}
		return nil
	}
	// Every cell of the STATE column, the header's too, is painted, so
	// the codes add the same width to each and tabwriter keeps it aligned.
	p := cli.Painter(cli.Colour(*color, e.Stdout))
	tw := tabwriter.NewWriter(e.Stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "ID\tIMP\tINTENT\t%s\tAGE\tSHA256\tPAYLOAD\tRATIONALE\n", p.Paint(cli.Plain, "STATE"))
	now := time.Now()
	for _, g := range gates {
		match := "ok"
		if !g.Matches() {
			match = p.Paint(cli.Red, "EDITED")
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", g.ID, g.Imp, g.Intent, p.Paint(cli.StateStyle(string(g.State)), string(g.State)), cli.Age(now, g.Created), g.SHA256[:12], match, cli.OneLine(g.Rationale, 50))
	}
	return tw.Flush()
}

// listed is a gate as ls --json prints it: the gate file and whether its
// payload still matches its sha256.
type listed struct {
	*gate.Gate
	PayloadMatches bool `json:"payload_matches"`
}
