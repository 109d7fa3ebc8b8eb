package main

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/impyard/impyard/lib/cli"
	"github.com/impyard/impyard/lib/complete"
	"github.com/impyard/impyard/lib/config"
	"github.com/impyard/impyard/lib/ledger"
	"github.com/impyard/impyard/lib/yard"
)

const spendUsage = `usage: impq spend [--imp NAME] [--since WHEN] [--until WHEN] [--day YYYY-MM-DD] [--json]

Show what each imp spent, from ledger/<imp>.jsonl: the cost of executed
actions and of model tokens, the bytes moved through the gateway and the
model tokens metered there, per class (owner or proactive work) and per
model, with each imp's total beside its daily budgets from org.toml.
--since takes what every command's --since takes: a duration back from
now (30m, 2h, 7d), an RFC 3339 time or a date, YYYY-MM-DD, from its
start; --until takes a date (through its end) or an RFC 3339 time. The
default is today, UTC, and --day D is --since D --until D.
Budgets cap proactive work per UTC day: past one it is refused until the
next day; owner tasks always run. An imp without a budget is never over.

Examples:
  impq spend
  impq spend --since 2026-11-01 --until 2026-11-30
  impq spend --json | jq 'select(.over) | .imp'
`

// spendImp is one imp's spend in the window.
type spendImp struct {
	Imp     string                 `json:"imp"`
	Since   time.Time              `json:"since"`
	Until   time.Time              `json:"until"`
	Total   ledger.Totals          `json:"total"`
	Classes map[string]*spendClass `json:"classes"`
	// The imp's budgets, and the one its proactive work reached on the
	// window's last day, if any.
	Daily       float64 `json:"daily,omitempty"`
	DailyBytes  int64   `json:"daily_bytes,omitempty"`
	TokensDaily int64   `json:"tokens_daily,omitempty"`
	Over        string  `json:"over,omitempty"`
}

// spendClass is a class's spend, and its tokens per model.
type spendClass struct {
	ledger.Totals
	Models map[string]*ledger.Totals `json:"models,omitempty"`
}

// unknownModel names the model of a metered response without usage.
const unknownModel = "(unknown)"

func spend(e *cli.Env, args []string) error {
	fs := e.FlagSet("spend", spendUsage)
	root := cli.RootFlag(fs)
	imp := fs.String("imp", "", "only imp `NAME`")
	e.Complete(fs, "imp", cli.Names(complete.Imp))
	sinceFlag := fs.String("since", "", "from `DURATION|TIME` (30m, 2h, 7d, 2026-07-01T10:00:00Z, 2026-07-01; default today, UTC)")
	untilFlag := fs.String("until", "", "until `WHEN`, YYYY-MM-DD (through its end) or RFC 3339 (default now)")
	day := fs.String("day", "", "the UTC `DAY`, YYYY-MM-DD: --since DAY --until DAY")
	asJSON := fs.Bool("json", false, "print one JSON object per imp")
	if err := cli.Parse(fs, args); err != nil {
		return err
	}
	if *day != "" {
		if *sinceFlag != "" || *untilFlag != "" {
			return cli.Usagef("spend: --day is --since and --until in one")
		}
		if _, err := time.Parse(time.DateOnly, *day); err != nil {
			return cli.Usagef("spend: --day %q: want a date, YYYY-MM-DD", *day)
		}
		*sinceFlag, *untilFlag = *day, *day
	}
	now := time.Now().UTC()
	since, _ := ledger.Day(now)
	// Whole seconds, as every time the yard prints: now's second
	// included.
	until := now.Truncate(time.Second).Add(time.Second)
	var err error
	if *sinceFlag != "" {
		if since, err = cli.ParseSince(*sinceFlag, now); err != nil {
			return cli.Usagef("spend: %v", err)
		}
		since = since.UTC().Truncate(time.Second)
	}
	if *untilFlag != "" {
		if _, until, err = when(*untilFlag); err != nil {
			return cli.Usagef("spend: --until: %v", err)
		}
	}
	if !since.Before(until) {
		return cli.Usagef("spend: --since %s is not before --until %s", since.Format(time.RFC3339), until.Format(time.RFC3339))
	}
	y, err := yard.Open(*root)
	if err != nil {
		return err
	}
	org, err := config.LoadOrg(y)
	if err != nil {
		return err
	}
	names := map[string]bool{}
	if *imp != "" {
		names[*imp] = true
	} else {
		for n := range org.Budget {
			names[n] = true
		}
		imps, err := ledger.Imps(y)
		if err != nil {
			return err
		}
		for _, n := range imps {
			names[n] = true
		}
	}
	var rows []*spendImp
	for _, n := range slices.Sorted(maps.Keys(names)) {
		row, err := spendOf(y, org, n, since, until)
		if err != nil {
			return err
		}
		rows = append(rows, row)
	}
	if *asJSON {
		for _, r := range rows {
			if err := cli.JSONLine(e.Stdout, r); err != nil {
				return err
			}
		}
		return nil
	}
	tw := tabwriter.NewWriter(e.Stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "# %s to %s\n", since.Format(time.RFC3339), until.Format(time.RFC3339))
	fmt.Fprintln(tw, "IMP\tCLASS\tMODEL\tCOST\tBYTES\tINPUT\tOUTPUT\tUNKNOWN\tBUDGET")
	line := func(imp, class, model string, t ledger.Totals, budget string) {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%.4g\t%d\t%d\t%d\t%d\t%s\n", imp, cli.Cell(class), cli.Cell(model), t.Cost, t.Bytes, t.InputTokens, t.OutputTokens, t.UnknownUsage, budget)
	}
	for _, r := range rows {
		for _, class := range slices.Sorted(maps.Keys(r.Classes)) {
			c := r.Classes[class]
			line(r.Imp, class, "-", c.Totals, "")
			for _, m := range slices.Sorted(maps.Keys(c.Models)) {
				line(r.Imp, class, m, *c.Models[m], "")
			}
		}
		line(r.Imp, "total", "-", r.Total, budgetText(r))
	}
	return tw.Flush()
}

// spendOf sums an imp's ledger in the window.
func spendOf(y *yard.Yard, org *config.Org, imp string, since, until time.Time) (*spendImp, error) {
	b := org.Budget[imp]
	r := &spendImp{Imp: imp, Since: since, Until: until, Classes: map[string]*spendClass{},
		Daily: b.Daily, DailyBytes: b.Bytes, TokensDaily: b.TokensDaily}
	err := ledger.Read(y, imp, since, until, func(e ledger.Entry) {
		r.Total.Add(e)
		c := r.Classes[e.Class]
		if c == nil {
			c = &spendClass{Models: map[string]*ledger.Totals{}}
			r.Classes[e.Class] = c
		}
		c.Add(e)
		if e.Kind != ledger.Tokens {
			return
		}
		m := e.Model
		if m == "" {
			m = unknownModel
		}
		if c.Models[m] == nil {
			c.Models[m] = &ledger.Totals{}
		}
		c.Models[m].Add(e)
	})
	if err != nil {
		return nil, err
	}
	last, err := ledger.Spent(y, imp, until.Add(-time.Nanosecond))
	if err != nil {
		return nil, err
	}
	r.Over = ledger.Over(b, last[ledger.Proactive])
	return r, nil
}

// when reads an --until: a UTC day, from its start to its end, or an
// instant.
func when(s string) (start, end time.Time, err error) {
	if t, err := time.Parse(time.DateOnly, s); err == nil {
		start, end = ledger.Day(t)
		return start, end, nil
	}
	t, err := time.Parse(time.RFC3339, s)
	if err != nil {
		return t, t, fmt.Errorf("%q: want YYYY-MM-DD or an RFC 3339 time", s)
	}
	t = t.UTC().Truncate(time.Second)
	return t, t, nil
}

// budgetText shows an imp's budgets, and which one its proactive work
// reached.
func budgetText(r *spendImp) string {
	var parts []string
	if r.Daily > 0 {
		parts = append(parts, fmt.Sprintf("%.4g/day", r.Daily))
	}
	if r.DailyBytes > 0 {
		parts = append(parts, fmt.Sprintf("%d bytes/day", r.DailyBytes))
	}
	if r.TokensDaily > 0 {
		parts = append(parts, fmt.Sprintf("%d tokens/day", r.TokensDaily))
	}
	if len(parts) == 0 {
		return "-"
	}
	out := strings.Join(parts, ", ")
	if r.Over != "" {
		out += " OVER: " + r.Over
	}
	return out
}
