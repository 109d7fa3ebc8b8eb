package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/impyard/impyard/lib/cli"
	"github.com/impyard/impyard/lib/complete"
	"github.com/impyard/impyard/lib/desk"
	"github.com/impyard/impyard/lib/gate"
	"github.com/impyard/impyard/lib/yard"
)

const showUsage = `usage: impgate show [--json | --raw | --stat] [--color WHEN] GATE

Show a gate as the owner needs it before deciding: imp, intent, task, run,
where the payload will go if approved (the executor's kind and method and
URL, or the branch and remote of a push), which trust entry applied or why
it waits for a human, the sha256 of the frozen payload and whether the
payload still matches it, whether an approval (if any) verifies, the
payload itself, the timeline, and, for a pending gate, last, the exact
line that approves this payload and no other:

  impgate approve --sha <first 16 hex digits> GATE

A payload edited on disk after filing no longer matches its sha256: show
says so, does not print it, offers no approve line and exits 1.

A gate whose payload names a diff ("diff": "sha256:<hex>", as a
commit-and-push gate does) also shows the diff's stat and the diff itself,
read from blobs/sha256/ and checked against its hash; coloured on a
terminal, plain when piped. --stat prints only the stat.

A trust-promote gate also shows the [[trust]] entry it proposes, as it
will be appended to imps/<imp>/imp.toml, and each gate it rests on.

An approved gate's approval is checked as impexec checks it: signed by a
key in IMPYARD_HOME/keys/ over this gate id, payload sha256, decider and
time.

An approved gate that impexec cannot execute as org.toml stands (no
executor for its intent, or org.toml does not load) says that it waits
and why; it is executed once org.toml is fixed.

--json prints the gate file's fields and the same facts: payload_matches
(and payload_error), destination (kind, method, url; repo, remote, branch;
log; policy) or destination_error, waiting, trust_verdict, approval_verifies,
approval_key, approval_error, promotion (a trust-promote gate's entry,
toml and gates), approve_command, grant, and its times: age_seconds,
deadline and left_seconds (a gate with a deadline; see EXPIRY in
impgate(1)) and old (older than its executor's confirm_after).

Its age and, with a deadline, the time it has left are shown too; a
filed gate past its deadline offers no approve line: impexec marks it
expired, and an approval is refused.

An egress-grant gate also says how long the rule it grants holds and for
whom: "permanent", or its scope (task: only the runs of the gate's task)
and its expiry (a duration after approval, and once approved the time).

--raw prints exactly the frozen payload bytes (the bytes the sha256 is of)
and nothing else, so 'impgate show --raw G | sha256sum' matches.

Examples:
  impgate show g-01jf8k2m3nx4k9q2
  impgate show --raw g-01jf8k2m3nx4k9q2 | jq .
  impgate show --json g-01jf8k2m3nx4k9q2 | jq -r .approve_command
`

func show(e *cli.Env, args []string) error {
	fs := e.FlagSet("show", showUsage)
	e.Complete(fs, "", cli.Names(complete.Gate))
	root := cli.RootFlag(fs)
	asJSON := fs.Bool("json", false, "print the gate as one JSON object")
	raw := fs.Bool("raw", false, "print only the exact frozen payload bytes")
	statOnly := fs.Bool("stat", false, "for a gate with a diff, print only its stat")
	color := cli.ColorFlag(fs)
	g, err := oneGate(fs, args, root)
	if err != nil {
		return err
	}
	if *asJSON && *raw {
		return cli.Usagef("show: --json and --raw exclude each other")
	}
	if *statOnly || *raw {
		frozen, err := g.Frozen()
		if err != nil {
			return err
		}
		if *statOnly {
			return showDiff(e, *root, g, frozen, true, false)
		}
		_, err = e.Stdout.Write(frozen)
		return err
	}
	y, err := yard.Open(*root)
	if err != nil {
		return err
	}
	r, err := report(y, g)
	if err != nil {
		return err
	}
	if *asJSON {
		err = cli.JSONLine(e.Stdout, r)
	} else {
		err = printReport(e, *root, r, cli.Painter(cli.Colour(*color, e.Stdout)))
	}
	if err == nil && !r.PayloadMatches {
		err = errors.New(r.PayloadError)
	}
	return err
}

// printReport prints what the desk knows about a gate, for people: who
// and what, where the payload goes, the trust verdict, whether the payload
// matches its sha256 and an approval verifies, the payload (and diff),
// the timeline, and last the command that approves exactly this payload.
// A payload that no longer matches its sha256 is not shown.
func printReport(e *cli.Env, root string, r *desk.Report, p cli.Painter) error {
	g, w := r.Gate, e.Stdout
	// Every field but the id and the state is text whoever writes the
	// yard chose.
	fmt.Fprintf(w, "gate       %s\nimp        %s\nintent     %s\nstate      %s\n", g.ID, cli.Printable(g.Imp), cli.Printable(g.Intent), p.Paint(cli.StateStyle(string(g.State)), string(g.State)))
	if r.Waiting != "" {
		fmt.Fprintf(w, "waiting    %s\n", cli.Printable(r.Waiting))
	}
	if g.Task != "" {
		fmt.Fprintf(w, "task       %s\n", cli.Printable(g.Task))
	}
	if g.Run != "" {
		fmt.Fprintf(w, "run        %s\n", cli.Printable(g.Run))
	}
	fmt.Fprintf(w, "age        %s (filed %s)\n", r.AgeText(), g.Created.UTC().Format(time.RFC3339))
	if d := r.Times.Deadline; d != nil {
		fmt.Fprintf(w, "expires    %s, left %s\n", d.Format(time.RFC3339), r.LeftText())
	}
	if r.Old {
		fmt.Fprintf(w, "old        older than its executor's confirm_after: approving it asks again (--old from a script)\n")
	}
	if r.Destination != nil {
		fmt.Fprintf(w, "goes to    %s\n", r.Destination)
	} else {
		fmt.Fprintf(w, "goes to    UNKNOWN: %s\n", cli.Printable(r.DestinationError))
	}
	fmt.Fprintf(w, "trust      %s\n", cli.Printable(r.Verdict))
	if r.Grant != "" {
		fmt.Fprintf(w, "grant      %s\n", cli.Printable(r.Grant))
	}
	if r.PayloadMatches {
		fmt.Fprintf(w, "sha256     %s (the payload matches)\n", g.SHA256)
	} else {
		fmt.Fprintf(w, "sha256     %s DOES NOT MATCH the payload (edited after filing?)\n", cli.Printable(g.SHA256))
	}
	switch {
	case r.Verifies == nil:
	case *r.Verifies:
		fmt.Fprintf(w, "approval   verifies: signed by %s for %s at %s\n", r.Key, g.Approval.By, g.Approval.At.Format(time.RFC3339))
	default:
		fmt.Fprintf(w, "approval   DOES NOT VERIFY: %s\n", r.Error)
	}
	if g.Rationale != "" {
		fmt.Fprintf(w, "rationale  %s\n", cli.Printable(g.Rationale))
	}
	if r.PayloadMatches {
		frozen, err := g.Frozen()
		if err != nil {
			return err
		}
		var pretty bytes.Buffer
		if err := json.Indent(&pretty, frozen, "  ", "  "); err != nil {
			return err
		}
		fmt.Fprintf(w, "\npayload (%d bytes):\n  %s\n", len(frozen), cli.PrintableLines(pretty.String()))
		if err := showDiff(e, root, g, frozen, false, p); err != nil {
			return err
		}
	} else {
		fmt.Fprintf(w, "\npayload not shown: it is not what was filed, and it can never be approved or executed; 'impgate deny %s' discards the gate\n", g.ID)
	}
	printPromotion(w, r.Promotion)
	if len(g.Result) > 0 {
		fmt.Fprintf(w, "\nresult:\n  %s\n", cli.PrintableLines(string(g.Result)))
	}
	fmt.Fprintln(w, "\ntimeline:")
	for _, h := range g.History {
		fmt.Fprintln(w, "  "+cli.Timeline(h.At, h.From, h.To, h.By, h.Why))
	}
	if r.Approve != "" {
		fmt.Fprintf(w, "\napprove exactly this payload with:\n  %s\n", r.Approve)
	}
	return nil
}

// printPromotion shows what a trust-promote gate proposes: the entry as
// it will be written and each gate it rests on, as the owner decided it.
func printPromotion(w io.Writer, p *desk.Promotion) {
	if p == nil {
		return
	}
	if p.Error != "" {
		fmt.Fprintf(w, "\nproposed entry: UNREADABLE: %s\n", cli.Printable(p.Error))
		return
	}
	entry := strings.ReplaceAll(cli.PrintableLines(strings.TrimSuffix(p.TOML, "\n")), "\n", "\n  ")
	fmt.Fprintf(w, "\nproposed entry (appended to imp.toml on approval):\n  %s\n", entry)
	if len(p.Wide) > 0 {
		fmt.Fprintf(w, "\nWIDER than the approvals it rests on:\n")
		for _, wide := range p.Wide {
			fmt.Fprintf(w, "  %s\n", cli.Printable(wide))
		}
	}
	if p.NotDerived != "" {
		fmt.Fprintf(w, "\nNOT WHAT THE APPROVALS DERIVE (impexec will append nothing): %s\n", cli.Printable(p.NotDerived))
	}
	fmt.Fprintf(w, "\nrests on %d gate(s) the owner approved:\n", len(p.Gates))
	for _, rg := range p.Gates {
		if rg.Error != "" {
			fmt.Fprintf(w, "  %s  UNREADABLE: %s\n", rg.ID, cli.Printable(rg.Error))
			continue
		}
		fmt.Fprintf(w, "  %s  %-9s by %s at %s  %s\n", rg.ID, rg.State, cli.Printable(rg.By), rg.At.Format(time.RFC3339), cli.Printable(string(rg.Payload)))
	}
}

func oneGate(fs *flag.FlagSet, args []string, root *string) (*gate.Gate, error) {
	if err := cli.Parse(fs, args); err != nil {
		return nil, err
	}
	if fs.NArg() != 1 {
		return nil, cli.Usagef("want exactly one gate id")
	}
	y, err := yard.Open(*root)
	if err != nil {
		return nil, err
	}
	gateID, err := gate.Resolve(y, fs.Arg(0))
	if err != nil {
		return nil, err
	}
	return gate.Get(y, gateID)
}

// showDiff prints the stat and, unless statOnly, the diff (painted by
// colour) of a payload that names one; a payload without a diff prints
// nothing.
func showDiff(e *cli.Env, root string, g *gate.Gate, frozen []byte, statOnly bool, colour cli.Painter) error {
	y, err := yard.Open(root)
	if err != nil {
		return err
	}
	d, err := desk.DiffOf(y, frozen)
	if err != nil {
		return err
	}
	if d == nil {
		if statOnly {
			return fmt.Errorf("gate %s has no diff", g.ID)
		}
		return nil
	}
	diff := d.Text
	w := e.Stdout
	if statOnly {
		fmt.Fprintln(w, cli.PrintableLines(d.Stat))
		return nil
	}
	fmt.Fprintf(w, "\nstat:\n%s\n\ndiff (%s, %d bytes):\n", cli.PrintableLines(d.Stat), d.Name, len(diff))
	for _, line := range strings.SplitAfter(string(diff), "\n") {
		if line == "" {
			continue
		}
		text, nl := strings.CutSuffix(line, "\n")
		text = cli.Printable(text)
		switch {
		case strings.HasPrefix(line, "+++"), strings.HasPrefix(line, "---"):
			text = colour.Paint(cli.Bold, text)
		case strings.HasPrefix(line, "+"):
			text = colour.Paint(cli.Green, text)
		case strings.HasPrefix(line, "-"):
			text = colour.Paint(cli.Red, text)
		case strings.HasPrefix(line, "@@"):
			text = colour.Paint(cli.Cyan, text)
		}
		if nl {
			text += "\n"
		}
		fmt.Fprint(w, text)
	}
	if !strings.HasSuffix(string(diff), "\n") && len(diff) > 0 {
		fmt.Fprintln(w)
	}
	return nil
}
