package main

import (
	"fmt"
	"sort"
	"text/tabwriter"
	"time"

	"github.com/impyard/impyard/lib/cli"
	"github.com/impyard/impyard/lib/config"
	"github.com/impyard/impyard/lib/ledger"
	"github.com/impyard/impyard/lib/yard"
)

const spendUsage = `usage: impq spend [--imp NAME] [--day YYYY-MM-DD] [--json]

Show what each imp spent on a UTC day (default today), from
ledger/<imp>.jsonl: the cost of executed actions and the bytes moved
through the gateway, beside its daily budget from org.toml. Proactive work
past its budget is refused until the next day; owner tasks always run.

Examples:
  impq spend
  impq spend --json | jq 'select(.cost > .daily)'
`

// spendRow is one imp's spend.
type spendRow struct {
	Imp        string  `json:"imp"`
	Day        string  `json:"day"`
	Cost       float64 `json:"cost"`
	Bytes      int64   `json:"bytes"`
	Daily      float64 `json:"daily,omitempty"`
	DailyBytes int64   `json:"daily_bytes,omitempty"`
}

func spend(e *cli.Env, args []string) error {
	fs := e.FlagSet("spend", spendUsage)
	root := cli.RootFlag(fs)
	imp := fs.String("imp", "", "only imp `NAME`")
	day := fs.String("day", "", "the UTC `DAY`, YYYY-MM-DD (default today)")
	asJSON := fs.Bool("json", false, "print one JSON object per line")
	if err := cli.Parse(fs, args); err != nil {
		return err
	}
	at := time.Now().UTC()
	if *day != "" {
		t, err := time.Parse("2006-01-02", *day)
		if err != nil {
			return cli.Usagef("spend: --day: want YYYY-MM-DD")
		}
		at = t
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
	var rows []spendRow
	for n := range names {
		cost, bytes, err := ledger.Spent(y, n, at)
		if err != nil {
			return err
		}
		b := org.Budget[n]
		rows = append(rows, spendRow{Imp: n, Day: at.Format("2006-01-02"), Cost: cost, Bytes: bytes, Daily: b.Daily, DailyBytes: b.Bytes})
	}
	sort.Slice(rows, func(i, j int) bool { return rows[i].Imp < rows[j].Imp })
	if *asJSON {
		for _, r := range rows {
			if err := cli.JSONLine(e.Stdout, r); err != nil {
				return err
			}
		}
		return nil
	}
	tw := tabwriter.NewWriter(e.Stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "IMP\tDAY\tCOST\tBUDGET\tBYTES\tBYTE BUDGET")
	for _, r := range rows {
		fmt.Fprintf(tw, "%s\t%s\t%.4g\t%s\t%d\t%s\n", r.Imp, r.Day, r.Cost, orNone(r.Daily > 0, fmt.Sprintf("%.4g", r.Daily)), r.Bytes, orNone(r.DailyBytes > 0, fmt.Sprint(r.DailyBytes)))
	}
	return tw.Flush()
}

func orNone(ok bool, s string) string {
	if ok {
		return s
	}
	return "-"
}
