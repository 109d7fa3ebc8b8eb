package main

import (
	"errors"
	"fmt"

	"github.com/impyard/impyard/lib/cli"
	"github.com/impyard/impyard/lib/complete"
	"github.com/impyard/impyard/lib/config"
	"github.com/impyard/impyard/lib/desk"
	"github.com/impyard/impyard/lib/gate"
	"github.com/impyard/impyard/lib/id"
	"github.com/impyard/impyard/lib/pause"
	"github.com/impyard/impyard/lib/state"
	"github.com/impyard/impyard/lib/yard"
)

const lsUsage = `usage: impgate ls [--all] [--imp NAME] [--json] [--color WHEN]

List pending gates, oldest first; with --all, decided gates too. A
pause in force (impsup pause) is shown first, one line each, on standard
error with --json; while it holds, its imps' approved gates wait. Files
that cannot be read are reported on standard error by name and the rest
are still listed. A gate whose state was edited by hand (a state no
transition writes, one its directory or its timeline disagrees with) is
listed, and named on standard error with what is wrong; --json adds
"problem" saying it. No executor acts on such a gate.

AGE is how long ago a gate was filed; LEFT, for a pending gate with a
deadline (see EXPIRY), how long it has before it expires undecided,
"expired" once past, "-" for none. --json adds age_seconds, deadline and
left_seconds (see impgate show).

The PAYLOAD column says whether each gate's payload still matches its
sha256: "ok", or "EDITED" for a payload changed on disk after filing,
which can never be approved or executed (deny it). --json prints each
gate file with "payload_matches" (true or false) added, and "short_id".

On a terminal the ID column shows each id's shortest unique
abbreviation (at least 4 characters after "g-"), which every command
that takes a gate id takes back; elsewhere, and in "short_id" with
--json, the whole id stays for scripts.

Examples:
  impgate ls
  impgate ls --all --imp yuko --json | jq -r '[.id,.state,.intent] | @tsv'
`

func ls(e *cli.Env, args []string) error {
	fs := e.FlagSet("ls", lsUsage)
	root := cli.RootFlag(fs)
	var f gate.Filter
	f.Edited = true
	fs.BoolVar(&f.All, "all", false, "include decided gates")
	fs.StringVar(&f.Imp, "imp", "", "only gates of imp `NAME`")
	e.Complete(fs, "imp", cli.Names(complete.Imp))
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
	// A pause comes first: it holds every approved gate of what it
	// pauses, and refuses new proposals.
	ps, perr := pause.Load(y)
	if perr != nil {
		e.Warn(perr)
	}
	for _, l := range ps.Lines() {
		l += "; its approved gates are held, not executed, until 'impsup resume'"
		if *asJSON {
			e.Warn(errors.New(l))
		} else {
			fmt.Fprintln(e.Stdout, cli.Printable(l))
		}
	}
	// Every cell of the STATE column, the header's too, is painted, so the
	// codes add the same width to each and the table stays aligned.
	p := cli.Painter(cli.Colour(*color, e.Stdout))
	now := state.Now()
	// org.toml gives the executors' deadlines; unreadable, only those set
	// at filing are shown, as impexec, which expires gates, then holds.
	org, _ := config.LoadOrg(y)
	// Abbreviations unique among every gate, listed or not, as
	// gate.Resolve takes them back.
	shortsOf := cli.Meanwhile(func() (map[string]string, error) {
		ids, err := gate.IDs(y)
		if err != nil {
			return nil, err
		}
		return id.Shortest(ids), nil
	})
	header := "ID\tIMP\tINTENT\t" + p.Paint(cli.Plain, "STATE") + "\tAGE\tLEFT\tSHA256\tPAYLOAD\tRATIONALE"
	return cli.List(e, *asJSON, header, func(g *listed) string {
		match := "ok"
		if !g.PayloadMatches {
			match = p.Paint(cli.Red, "EDITED")
		}
		return fmt.Sprintf("%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s", e.Abbrev(g.ID, g.shorts), cli.Cell(g.Imp), cli.Cell(g.Intent), p.Paint(cli.StateStyle(string(g.State)), string(g.State)), g.AgeText(), g.LeftText(), shortSHA(g.SHA256), match, cli.OneLine(g.Rationale, 50))
	}, func(render func(*listed) cli.Line, emit func(cli.Line) error) ([]error, error) {
		// A gate whose state was edited by hand is listed, and what is
		// wrong with it is warned of with the files that cannot be read.
		var edited []error
		bad, err := gate.EachListedAs(y, f, func(l *gate.Listed) *listedLine {
			shorts, err := shortsOf()
			if err != nil {
				return nil
			}
			l.ShortID = shorts[l.ID]
			return &listedLine{render(&listed{l, desk.Timing(l.Gate, org, now), shorts}), l.Problem}
		}, func(l *listedLine) error {
			if l == nil {
				return nil
			}
			if l.problem != "" {
				edited = append(edited, fmt.Errorf("%s; no executor acts on it until its state is what its timeline says", l.problem))
			}
			return emit(l.Line)
		})
		// Without the abbreviations nothing was printed, and the
		// listing fails as it did before reading any file.
		if _, serr := shortsOf(); serr != nil {
			return nil, serr
		}
		return append(bad, edited...), err
	})
}

// listedLine is a gate rendered as ls prints it, rendered where its file
// is read, and what is wrong with its state, if anything.
type listedLine struct {
	cli.Line
	problem string
}

// listed is a gate as ls prints it: the file, whether its payload
// matches, and its times (desk.Times), in --json too.
type listed struct {
	*gate.Listed
	desk.Times
	shorts map[string]string // every gate's, for the table
}

// shortSHA is a gate's sha256 as the listing shows it, its first 12
// digits: the file's text, so a hand-edited one, shorter or not hex, is
// shown as it is, escaped.
func shortSHA(s string) string {
	if r := []rune(s); len(r) > 12 {
		s = string(r[:12])
	}
	return cli.Cell(s)
}
