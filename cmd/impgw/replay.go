package main

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"syscall"
	"time"

	"github.com/impyard/impyard/lib/cli"
	"github.com/impyard/impyard/lib/gateway"
	"github.com/impyard/impyard/lib/store"
	"github.com/impyard/impyard/lib/yard"
)

const replayUsage = `usage: impgw replay --policy FILE [--root DIR] [--json] [--check] [DECISIONS]

Re-judge every recorded decision in DECISIONS ('-' for standard input;
default runs/decisions.jsonl in the yard) under the candidate policy FILE
('-' for standard input, but not both) and list each one whose
verdict would flip, oldest first: what last week's traffic would have met
under the edit. Nothing is changed or sent. With --check it exits 1 when
any verdict would flip, so a script or CI can gate a policy edit on it.

Records the gateway refused on its own (domain fronting, no such host, a
body it cannot inspect, ...) and malformed requests it rejected do not
depend on the policy and are not re-judged. Recorded header values that
were redacted stay redacted, so a rule matching their content cannot be
replayed faithfully; a redacted query value counts as present. Bodies are
never recorded, but their size and lifted MCP calls are: a decision whose
first candidate rule reads the body (json, jsonAbsent, mcp.arguments) or
the task is listed as unknown rather than guessed. Rules that expire are
judged at each record's time.

Examples:
  impgw replay --policy candidate.json
  impgw replay --policy candidate.json --json | jq -r 'select(.new_verdict=="deny") | .url'
`

type flip struct {
	ID         string    `json:"decision_id"`
	Time       time.Time `json:"ts"`    // whole seconds, UTC
	TimeMS     int64     `json:"ts_ms"` // the same instant in unix milliseconds
	Method     string    `json:"method"`
	URL        string    `json:"url"`
	Imp        string    `json:"imp,omitempty"`
	OldVerdict string    `json:"old_verdict"`
	OldRule    string    `json:"old_rule"`
	NewVerdict string    `json:"new_verdict"`
	NewRule    string    `json:"new_rule"`
	NewReason  string    `json:"new_reason"`
	// ByNameOnly: no address was recorded (the old verdict came before any
	// lookup), so the new allow still awaits the address check.
	ByNameOnly bool `json:"by_name_only,omitempty"`
	// Unknown: the record cannot be re-judged, since the rule that would
	// decide reads what records do not hold; NewVerdict is then "unknown".
	Unknown bool `json:"unknown,omitempty"`
}

func replay(e *cli.Env, args []string) error {
	fs := e.FlagSet("replay", replayUsage)
	root := cli.RootFlag(fs)
	policy := fs.String("policy", "", "the candidate policy `FILE` ('-' for standard input; required)")
	asJSON := fs.Bool("json", false, "print each flip as one JSON object")
	check := fs.Bool("check", false, "exit 1 when any verdict would flip, as diff does")
	if err := cli.Parse(fs, args); err != nil {
		return err
	}
	if *policy == "" {
		return cli.Usagef("replay: --policy is required")
	}
	if fs.NArg() > 1 {
		return cli.Usagef("replay: at most one decisions file")
	}
	if err := cli.OneStdin(map[string]string{"--policy": *policy, "DECISIONS": fs.Arg(0)}); err != nil {
		return err
	}
	p, err := loadPolicy(e, *root, *policy)
	if err != nil {
		return err
	}
	path := fs.Arg(0)
	read := store.ReadJSONL
	if path == "" {
		y, err := yard.Open(*root)
		if err != nil {
			return err
		}
		path = y.Decisions()
	} else if path == cli.Stdin {
		path = "standard input"
		read = func(path string, fn func([]byte) error) ([]store.BadLine, error) {
			return store.ScanJSONL(e.Stdin, path, fn)
		}
	} else {
		// A file named on the command line must be there: a typo is not
		// a week without traffic. Read, it is a log like the yard's own,
		// so a symlink or a FIFO planted in its place is refused; the
		// probe does not block on a FIFO.
		f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NONBLOCK, 0)
		if err != nil {
			return err
		}
		f.Close()
	}
	var seen, judged, flips, skipped, unknown int
	bad, err := read(path, func(line []byte) error {
		r, err := gateway.ParseRecord(line)
		if errors.Is(err, gateway.ErrNotDecision) {
			return nil
		}
		seen++
		if err != nil {
			skipped++
			return nil
		}
		jr, ok := r.JudgeRequest()
		if !ok {
			skipped++
			return nil
		}
		d := gateway.Decide(p, jr)
		newVerdict := d.Verdict.String()
		if d.Unknown {
			unknown++
			newVerdict = "unknown"
		} else {
			judged++
			if newVerdict == r.Verdict {
				return nil
			}
			flips++
		}
		f := flip{
			ID: r.ID, Time: store.Second(r.Time), TimeMS: store.Millis(r.Time), Method: r.Request.Method, URL: r.URL(), Imp: r.Request.Imp,
			OldVerdict: r.Verdict, OldRule: r.Rule, NewVerdict: newVerdict, NewRule: d.Rule, NewReason: d.Reason,
			ByNameOnly: d.NeedsAddr, Unknown: d.Unknown,
		}
		if *asJSON {
			return cli.JSONLine(e.Stdout, f)
		}
		note := ""
		if f.ByNameOnly {
			note = " [if the resolved address passes]"
		}
		_, err = fmt.Fprintf(e.Stdout, "%s  %-6s -> %-6s  %s %s  (rule %s -> %s: %s)%s\n",
			f.Time.UTC().Format(time.RFC3339), f.OldVerdict, f.NewVerdict, cli.Printable(f.Method), cli.Printable(f.URL), cli.Printable(ruleName(f.OldRule)), cli.Printable(ruleName(f.NewRule)), cli.Printable(f.NewReason), note)
		return err
	})
	for _, b := range bad {
		e.Warn(b)
	}
	if err != nil {
		return err
	}
	fmt.Fprintf(e.Stderr, "impgw: %d decisions in %s: %d re-judged, %d would flip, %d not re-judged (rejects, the gateway's own refusals), %d unknown (the deciding rule reads a body or task records do not hold)\n",
		seen, path, judged, flips, skipped, unknown)
	if *check && flips > 0 {
		return fmt.Errorf("%w: %d under %s", errFlips, flips, *policy)
	}
	return nil
}

// errFlips is replay --check's failure: the candidate policy would flip
// recorded verdicts.
var errFlips = errors.New("verdicts would flip")

func ruleName(s string) string {
	if s == "" {
		return "(none)"
	}
	return strconv.Quote(s)
}
