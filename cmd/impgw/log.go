package main

import (
	"context"
	"fmt"
	"time"

	"github.com/impyard/impyard/lib/cli"
	"github.com/impyard/impyard/lib/complete"
	"github.com/impyard/impyard/lib/gateway"
	"github.com/impyard/impyard/lib/store"
	"github.com/impyard/impyard/lib/yard"
)

const logUsage = `usage: impgw log [--since DURATION|TIME] [--imp NAME] [--verdict V]
                 [--host H] [--rule R] [-f] [--json] [--color WHEN] [--root DIR]

List the request decisions in runs/decisions.jsonl, oldest first, each
completed by its outcome (status, bytes): a table for people, or with
--json one JSON object per decision, as recorded, for jq. The gate and
task events that share the file are not decisions and are not listed.

Filters combine: --since keeps decisions at or after a time (a duration
back from now such as 15m, 2h or 7d, an RFC 3339 time, or a date);
--imp, --verdict (allow, deny, tunnel, gate, reject) and --rule match exactly,
--host without regard to case.

With -f, keep reading as the gateway appends (the file is polled four
times a second) until interrupted. A forwarded request is listed once its
outcome is written, so a tunnel appears when it closes; on interrupt the
ones still open are listed as they stand.

Examples:
  impgw log --since 1h --verdict deny
  impgw log -f --imp yuko
  impgw log --since 7d --json | jq -r '.request.host' | sort | uniq -c
`

// followEvery is how often -f polls the file.
var followEvery = 250 * time.Millisecond

func logCmd(ctx context.Context, e *cli.Env, args []string) error {
	fs := e.FlagSet("log", logUsage)
	root := cli.RootFlag(fs)
	since := fs.String("since", "", "only decisions at or after `DURATION|TIME` (15m, 2h, 7d, 2026-07-01T10:00:00Z, 2026-07-01)")
	var f gateway.Filter
	fs.StringVar(&f.Imp, "imp", "", "only the imp `NAME`'s requests")
	e.Complete(fs, "imp", cli.Names(complete.Imp))
	fs.StringVar(&f.Verdict, "verdict", "", "only verdict `V`: allow, deny, tunnel, gate or reject")
	e.Complete(fs, "verdict", cli.Words("allow", "deny", "tunnel", "gate", "reject"))
	fs.StringVar(&f.Host, "host", "", "only requests to host `H`")
	fs.StringVar(&f.Rule, "rule", "", "only decisions by rule `R`")
	follow := fs.Bool("f", false, "follow: keep listing decisions as they are written")
	asJSON := fs.Bool("json", false, "print each decision as one JSON object")
	color := cli.ColorFlag(fs)
	if err := cli.Parse(fs, args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return cli.Usagef("log: unexpected argument %q", fs.Arg(0))
	}
	if *since != "" {
		t, err := cli.ParseSince(*since, time.Now())
		if err != nil {
			return cli.Usagef("log: %v", err)
		}
		f.Since = t
	}
	if f.Verdict != "" {
		if err := gateway.CheckVerdict(f.Verdict); err != nil {
			return cli.Usagef("log: --verdict: %v", err)
		}
	}
	y, err := yard.Open(*root)
	if err != nil {
		return err
	}
	p := cli.Painter(cli.Colour(*color, e.Stdout))
	l := &gateway.LogReader{Path: y.Decisions()}
	header := false
	show := func(recs []*gateway.Record, bad []store.BadLine) error {
		for _, b := range bad {
			e.Warn(b)
		}
		for _, r := range recs {
			if !f.Match(r) {
				continue
			}
			if *asJSON {
				if err := cli.JSONLine(e.Stdout, r); err != nil {
					return err
				}
				continue
			}
			if !header {
				header = true
				if _, err := fmt.Fprintf(e.Stdout, "%-20s  %-7s %-6s %-12s %-24s %s\n", "TIME", "VERDICT", "STATUS", "IMP", "RULE", "REQUEST"); err != nil {
					return err
				}
			}
			if _, err := fmt.Fprintln(e.Stdout, logLine(r, p)); err != nil {
				return err
			}
		}
		return nil
	}
	for {
		recs, bad, err := l.Next()
		if err != nil {
			return err
		}
		if err := show(recs, bad); err != nil {
			return err
		}
		if !*follow {
			break
		}
		select {
		case <-ctx.Done():
			return show(l.Flush())
		case <-time.After(followEvery):
		}
	}
	return show(l.Flush())
}

// logLine is a decision as one line of the table, its verdict painted
// after padding so the columns stay aligned.
func logLine(r *gateway.Record, p cli.Painter) string {
	status := "-"
	if r.Status != 0 {
		status = fmt.Sprint(r.Status)
	}
	imp, rule := orDash(r.Request.Imp), orDash(r.Rule)
	if r.RefusedBy != "" {
		rule = "(" + r.RefusedBy + ")"
	}
	req := r.Request.Method + " " + r.URL()
	if r.Request.Host == "" {
		req = r.Request.Method + " (malformed: " + cli.OneLine(r.Reason, 60) + ")"
	}
	verdict := fmt.Sprintf("%-7s", r.Verdict)
	return fmt.Sprintf("%-20s  %s %-6s %-12s %-24s %s",
		r.Time.UTC().Format(time.RFC3339), p.Paint(cli.StateStyle(string(r.Verdict)), verdict), status, cli.Printable(imp), cli.Printable(rule), cli.Printable(req))
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
