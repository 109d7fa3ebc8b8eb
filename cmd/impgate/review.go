package main

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/impyard/impyard/lib/cli"
	"github.com/impyard/impyard/lib/complete"
	"github.com/impyard/impyard/lib/desk"
	"github.com/impyard/impyard/lib/gate"
	"github.com/impyard/impyard/lib/state"
	"github.com/impyard/impyard/lib/yard"
)

const reviewUsage = `usage: impgate review [--imp NAME] [--as NAME]
       impgate review --script FILE|- [--as NAME]

Walk the pending gates, oldest first, on a terminal: each is shown as
'impgate show' shows it (where it goes, why it waits, whether its payload
matches its sha256, the payload and any diff), then asks

  approve, deny, skip or quit? [a/d/s/q]

a approves exactly the payload shown: the approval is bound to its
sha256, as 'impgate approve --sha' binds it, and signed the same way.
d asks a reason and denies. s leaves the gate pending. q stops; so does
the end of input. A gate decided by someone else meanwhile is passed over.

Without a terminal on standard input review refuses (exit 2), unless
given --script FILE ('-' for standard input), a file of decisions, one a
line, blank lines and # comments ignored:

  approve GATE SHA       (SHA: at least 8 hex digits of the payload sha256)
  deny GATE REASON...
  skip GATE

GATE is a gate id or a unique prefix of one, as impgate ls shows it on a
terminal. The whole script is checked before anything is decided: a
mistake on any line (exit 2), or a prefix that names no gate or several
(exit 1, naming them), decides nothing. Each line then shows its gate and applies
its decision, in order; the first line refused (a sha that does not match
the payload, a gate already decided) stops the script with exit 1, and
that line and those after it decide nothing.

Examples:
  impgate review
  impgate review --imp yuko --as alice
  printf 'approve g-01jf8k2m3nx4k9q2 80706c860dd0bd10\n' | impgate review --script -
`

func review(e *cli.Env, args []string) error {
	fs := e.FlagSet("review", reviewUsage)
	e.TimeoutFlag(fs)
	root := cli.RootFlag(fs)
	script := fs.String("script", "", "take the decisions from `FILE` ('-' for standard input), not a terminal")
	imp := fs.String("imp", "", "only gates of imp `NAME`")
	e.Complete(fs, "imp", cli.Names(complete.Imp))
	as := fs.String("as", "", "the decider's `NAME` (default $USER)")
	if err := cli.Parse(fs, args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return cli.Usagef("review: unexpected argument %q", fs.Arg(0))
	}
	by := decider(*as)
	if *script == "" && !cli.IsTerminal(e.Stdin) {
		return cli.Usagef("review: standard input is not a terminal; to decide without one, give --script FILE ('-' for standard input) with lines 'approve GATE SHA', 'deny GATE REASON', 'skip GATE'")
	}
	if *script != "" && *imp != "" {
		return cli.Usagef("review: --imp is for walking the pending gates; a script names its gates")
	}
	if *script != "" {
		lines, err := readScript(e, *script)
		if err != nil {
			return err
		}
		return runScript(e, *root, by, lines)
	}
	return walk(e, *root, by, *imp, bufio.NewReader(e.Stdin))
}

func readScript(e *cli.Env, name string) ([]desk.Line, error) {
	r, _, err := e.OpenInput(name)
	if err != nil {
		return nil, err
	}
	defer r.Close()
	lines, err := desk.ParseScript(r)
	if err != nil {
		return nil, cli.Usagef("%v; nothing was decided", err)
	}
	return lines, nil
}

// inspect reads a gate afresh and reports on it as show does.
func inspect(root, gateID string) (*desk.Report, error) {
	y, err := yard.Open(root)
	if err != nil {
		return nil, err
	}
	g, err := gate.Get(y, gateID)
	if err != nil {
		return nil, err
	}
	return report(y, g)
}

// report is what the desk knows of g, approvals checked against the keys
// in IMPYARD_HOME.
func report(y *yard.Yard, g *gate.Gate) (*desk.Report, error) {
	home, err := yard.Home()
	if err != nil {
		return nil, err
	}
	return desk.Inspect(y, home, g), nil
}

// runScript shows and decides each line's gate in order, stopping at the
// first line refused.
func runScript(e *cli.Env, root, by string, lines []desk.Line) error {
	y, err := yard.Open(root)
	if err != nil {
		return err
	}
	// Every id, whole or a prefix, is resolved before anything is
	// decided: an ambiguous one stops the script whole.
	for i, l := range lines {
		if lines[i].Gate, err = gate.Resolve(y, l.Gate); err != nil {
			return fmt.Errorf("review script line %d: %w; nothing was decided", l.N, err)
		}
	}
	for i, l := range lines {
		if i > 0 {
			fmt.Fprintln(e.Stdout)
		}
		fmt.Fprintf(e.Stdout, "== line %d: %s %s\n", l.N, l.Action, l.Gate)
		r, err := inspect(root, l.Gate)
		if err == nil {
			err = printReport(e, root, r, cli.Painter(cli.Colour(cli.ColorAuto, e.Stdout)))
		}
		if err == nil {
			fmt.Fprintln(e.Stdout)
			switch l.Action {
			case desk.Approve:
				err = decide(e, []string{l.Gate}, root, false, false, gate.Change{To: state.Approved, By: by, Actor: "impgate", Why: "reviewed", SHA: l.SHA})
			case desk.Deny:
				err = decide(e, []string{l.Gate}, root, false, false, gate.Change{To: state.Denied, By: by, Actor: "impgate", Why: l.Reason})
			default:
				_, err = fmt.Fprintf(e.Stdout, "%s skipped\n", l.Gate)
			}
		}
		if err != nil {
			return fmt.Errorf("review script line %d: %w; this line and those after it decided nothing", l.N, err)
		}
	}
	return nil
}

// walk shows each pending gate, oldest first, and asks what to do with
// it, reading answers from in.
func walk(e *cli.Env, root, by, imp string, in *bufio.Reader) error {
	y, err := yard.Open(root)
	if err != nil {
		return err
	}
	gates, bad := gate.List(y, gate.Filter{Imp: imp})
	for _, err := range bad {
		e.Warn(err)
	}
	if len(gates) == 0 {
		_, err := fmt.Fprintln(e.Stdout, "no pending gates")
		return err
	}
	w := e.Stdout
	var approved, denied, skipped int
	defer func() {
		fmt.Fprintf(w, "\nreviewed: %d approved, %d denied, %d skipped, %d not reached\n", approved, denied, skipped,
			len(gates)-approved-denied-skipped)
	}()
	ask := func(prompt string) (string, bool) {
		fmt.Fprint(w, prompt)
		s, err := in.ReadString('\n')
		if err != nil && (s == "" || !errors.Is(err, io.EOF)) {
			fmt.Fprintln(w)
			return "", false
		}
		return strings.TrimSpace(s), true
	}
	for i, g := range gates {
		r, err := inspect(root, g.ID)
		if err != nil {
			e.Warn(err)
			skipped++
			continue
		}
		if r.State != state.Filed {
			fmt.Fprintf(w, "\n%s was %s meanwhile; passed over\n", g.ID, r.State)
			skipped++
			continue
		}
		fmt.Fprintf(w, "\n[%d/%d]\n", i+1, len(gates))
		if err := printReport(e, root, r, cli.Painter(cli.Colour(cli.ColorAuto, e.Stdout))); err != nil {
			return err
		}
	answer:
		for {
			a, ok := ask("\napprove, deny, skip or quit? [a/d/s/q] ")
			if !ok {
				return nil
			}
			switch strings.ToLower(a) {
			case "a", "approve":
				if !r.PayloadMatches {
					fmt.Fprintf(w, "%s cannot be approved: %s\n", g.ID, r.PayloadError)
					continue
				}
				// Bound to the sha256 of the payload just shown.
				err := decide(e, []string{g.ID}, root, false, false, gate.Change{To: state.Approved, By: by, Actor: "impgate", Why: "reviewed", SHA: r.SHA256})
				if err != nil {
					e.Warn(err)
					skipped++
				} else {
					approved++
				}
				break answer
			case "d", "deny":
				reason, ok := ask("reason: ")
				if !ok {
					return nil
				}
				if reason == "" {
					fmt.Fprintln(w, "a denial needs a reason; nothing was decided")
					continue
				}
				if err := decide(e, []string{g.ID}, root, false, false, gate.Change{To: state.Denied, By: by, Actor: "impgate", Why: reason}); err != nil {
					e.Warn(err)
					skipped++
				} else {
					denied++
				}
				break answer
			case "s", "skip":
				skipped++
				break answer
			case "q", "quit":
				return nil
			default:
				fmt.Fprintln(w, "answer a (approve), d (deny), s (skip) or q (quit)")
			}
		}
	}
	return nil
}
