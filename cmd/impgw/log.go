package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/impyard/impyard/lib/cli"
	"github.com/impyard/impyard/lib/complete"
	"github.com/impyard/impyard/lib/gateway"
	"github.com/impyard/impyard/lib/proposal"
	"github.com/impyard/impyard/lib/store"
	"github.com/impyard/impyard/lib/yard"
)

const logUsage = `usage: impgw log [--since DURATION|TIME] [--imp NAME] [--verdict V]
                 [--host H] [--rule R] [-f [--all]] [--json] [--color WHEN] [--root DIR]

List the decisions in runs/decisions.jsonl, oldest first: each request
the gateway judged, completed by its outcome (status, bytes), and each
proposal it refused (by the trust ladder, the payload's type checks, a
budget, ...). A table for people, with the judge's or the refusal's
reason last, or with --json one JSON object per decision, as recorded
(impyard.decision/1 or impyard.proposal/1), for jq. The gate and task
events that share the file are not decisions and are not listed.

Filters combine: --since keeps decisions at or after a time (a duration
back from now such as 30m, 2h or 7d, an RFC 3339 time, or a date);
--imp and --verdict (allow, deny, tunnel, gate, reject, or refused for
a proposal) match exactly, --rule a request's rule or a refused
proposal's kind (trust-deny, payload-refused, ...), --host a request's
host without regard to case.

With -f, list the decisions written from now on, as tail -f does, until
interrupted; -f --all lists the whole file first, then follows. The file
is polled four times a second; once it is read to its end a note on
standard error says it follows. A forwarded request is listed once its
outcome is written, so a tunnel appears when it closes; on interrupt the
ones still open are listed as they stand.

Examples:
  impgw log --since 1h --verdict deny
  impgw log --verdict refused --imp yuko
  impgw log -f --imp yuko
  impgw log --since 7d --json | jq -r '.request.host' | sort | uniq -c
`

// followEvery is how often -f polls the file.
var followEvery = 250 * time.Millisecond

// logVerdicts are what --verdict takes: a request's verdicts and a
// refused proposal's.
var logVerdicts = append(slices.Clone(gateway.Verdicts), proposal.Refused.String())

func logCmd(ctx context.Context, e *cli.Env, args []string) error {
	fs := e.FlagSet("log", logUsage)
	root := cli.RootFlag(fs)
	since := fs.String("since", "", "only decisions at or after `DURATION|TIME` (30m, 2h, 7d, 2026-07-01T10:00:00Z, 2026-07-01)")
	var f gateway.Filter
	fs.StringVar(&f.Imp, "imp", "", "only the imp `NAME`'s decisions")
	e.Complete(fs, "imp", cli.Names(complete.Imp))
	fs.StringVar(&f.Verdict, "verdict", "", "only verdict `V`: "+strings.Join(logVerdicts, ", "))
	e.Complete(fs, "verdict", cli.Words(logVerdicts...))
	fs.StringVar(&f.Host, "host", "", "only requests to host `H`")
	fs.StringVar(&f.Rule, "rule", "", "only decisions by rule `R`, or proposals refused as R")
	follow := fs.Bool("f", false, "follow: list the decisions written from now on")
	all := fs.Bool("all", false, "with -f, list the whole file first")
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
	if f.Verdict != "" && !slices.Contains(logVerdicts, f.Verdict) {
		return cli.Usagef("log: --verdict: unknown verdict %q (want %s)", f.Verdict, strings.Join(logVerdicts, ", "))
	}
	y, err := yard.Open(*root)
	if err != nil {
		return err
	}
	p := cli.Painter(cli.Colour(*color, e.Stdout))
	l := &gateway.LogReader{Path: y.Decisions(), Other: refusedProposal}
	header := false
	show := func(entries []gateway.Entry, bad []store.BadLine) error {
		for _, b := range bad {
			e.Warn(b)
		}
		for _, en := range entries {
			pr, _ := en.Other.(*proposal.Record)
			var v json.Marshaler
			switch {
			case en.Record != nil && f.Match(en.Record):
				v = en.Record
			case pr != nil && matchProposal(&f, pr):
				v = pr
			default:
				continue
			}
			if *asJSON {
				if err := cli.JSONLine(e.Stdout, v); err != nil {
					return err
				}
				continue
			}
			if !header {
				header = true
				if _, err := fmt.Fprintf(e.Stdout, "%-20s  %-7s %-6s %-12s %-24s %-*s  %s\n", "TIME", "VERDICT", "STATUS", "IMP", "RULE", requestWidth, "REQUEST", "REASON"); err != nil {
					return err
				}
			}
			line := ""
			if pr != nil {
				line = proposalLine(pr, p)
			} else {
				line = logLine(en.Record, p)
			}
			if _, err := fmt.Fprintln(e.Stdout, line); err != nil {
				return err
			}
		}
		return nil
	}
	if *follow && !*all {
		if err := l.Skip(); err != nil {
			return err
		}
	}
	for first := true; ; first = false {
		entries, bad, err := l.Next()
		if err != nil {
			return err
		}
		if err := show(entries, bad); err != nil {
			return err
		}
		if !*follow {
			break
		}
		if first {
			// Everything before this line is history: a script that
			// appends after reading it sees its records listed.
			fmt.Fprintf(e.Stderr, "%s: note: following %s; interrupt to stop\n", e.Name, l.Path)
		}
		select {
		case <-ctx.Done():
			// What was appended before the interrupt is listed too.
			entries, bad, err := l.Next()
			if err != nil {
				return err
			}
			if err := show(entries, bad); err != nil {
				return err
			}
			return show(l.Flush())
		case <-time.After(followEvery):
		}
	}
	return show(l.Flush())
}

// refusedProposal is the LogReader's Other: the records of refused
// proposals, which share the log; every other line is passed over.
func refusedProposal(line []byte) (any, error) {
	r, err := proposal.ParseRecord(line)
	switch {
	case errors.Is(err, proposal.ErrNotProposal):
		return nil, nil
	case err != nil:
		return nil, err
	case r.Verdict != proposal.Refused:
		return nil, nil
	}
	return r, nil
}

// matchProposal is gateway.Filter.Match for a refused proposal: it has no
// host, and its rule is its kind of refusal or the trust entry that
// refused it.
func matchProposal(f *gateway.Filter, r *proposal.Record) bool {
	switch {
	case !f.Since.IsZero() && r.Time.Before(f.Since):
		return false
	case f.Imp != "" && r.Imp != f.Imp:
		return false
	case f.Verdict != "" && r.Verdict.String() != f.Verdict:
		return false
	case f.Host != "":
		return false
	case f.Rule != "" && r.Refusal.String() != f.Rule && r.Entry != f.Rule:
		return false
	}
	return true
}

// requestWidth is the REQUEST column's width; a longer request pushes its
// reason to the right.
const requestWidth = 48

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
		req = r.Request.Method + " (malformed)"
	}
	return row(r.Time, r.Verdict, status, imp, rule, req, r.Reason, p)
}

// proposalLine is a refused proposal as one line of the table: PROPOSE
// and its intent where a request has its method and URL, its kind of
// refusal as its rule.
func proposalLine(r *proposal.Record, p cli.Painter) string {
	return row(r.Time, r.Verdict.String(), "-", orDash(r.Imp), "("+r.Refusal.String()+")", "PROPOSE "+r.Intent, r.Reason, p)
}

func row(at time.Time, verdict, status, imp, rule, req, reason string, p cli.Painter) string {
	return fmt.Sprintf("%-20s  %s %-6s %-12s %-24s %-*s  %s",
		at.UTC().Format(time.RFC3339), p.Paint(cli.StateStyle(verdict), fmt.Sprintf("%-7s", verdict)), status,
		cli.Printable(imp), cli.Printable(rule), requestWidth, cli.Printable(req), cli.OneLine(orDash(reason), 200))
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
