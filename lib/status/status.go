// Package status assembles the owner's overview of a yard (impsup
// status): tasks by state per imp, pending gates and their age, today's
// spend against budget, which daemons are running, and the last failures.
// It only reads: every part comes from the package that owns it, and
// nothing in the yard is created or changed.
package status

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/impyard/impyard/lib/cli"
	"github.com/impyard/impyard/lib/config"
	"github.com/impyard/impyard/lib/gate"
	"github.com/impyard/impyard/lib/health"
	"github.com/impyard/impyard/lib/ledger"
	"github.com/impyard/impyard/lib/mcpserv"
	"github.com/impyard/impyard/lib/notify"
	"github.com/impyard/impyard/lib/pause"
	"github.com/impyard/impyard/lib/queue"
	"github.com/impyard/impyard/lib/run"
	"github.com/impyard/impyard/lib/state"
	"github.com/impyard/impyard/lib/yard"
)

// Time marshals as RFC 3339, UTC, whole seconds.
type Time struct{ time.Time }

// MarshalJSON writes t as RFC 3339, UTC, whole seconds.
func (t Time) MarshalJSON() ([]byte, error) { return json.Marshal(t.String()) }

func (t Time) String() string { return t.UTC().Truncate(time.Second).Format(time.RFC3339) }

// Status is the overview. Its JSON form is impsup status --json.
type Status struct {
	Yard string `json:"yard"`
	At   Time   `json:"at"`
	// Paused is the pause in force, one line each, the yard first;
	// PauseFile is the pause file itself when anything is paused.
	Paused    []string     `json:"paused"`
	PauseFile *pause.State `json:"pause,omitempty"`
	Daemons   []Daemon     `json:"daemons"`
	Tasks     []ImpTasks   `json:"tasks"`
	Gates     []Pending    `json:"gates"`
	Spend     []Spend      `json:"spend"`
	Failures  []Failure    `json:"failures"`
	// Notifications are those the outbox still owes the owner.
	Notifications Notifications `json:"notifications"`
	// MCPServers are org.toml's [mcp.<name>] and their processes, as the
	// gateway last wrote them (mcp/servers.json).
	MCPServers []mcpserv.State `json:"mcp_servers"`
	// OrgError is why org.toml does not load, when it does not (other
	// than for its owner or mode, a warning): shown first, and what
	// org.toml would add (its imps' rows, budgets) is missing.
	OrgError string `json:"org_error,omitempty"`
	// Warnings are the parts that could not be read (a damaged task or
	// gate file, an unreadable ledger); the rest is still shown.
	Warnings []string `json:"warnings"`
}

// Daemon is whether one of the yard's daemons is running.
type Daemon struct {
	Name    string `json:"name"`
	Running bool   `json:"running"`
	// By is how it was told: "lock" (its lock in runs/ is held) or
	// "health" (it answered at its address).
	By     string `json:"by"`
	Detail string `json:"detail"`
}

// ImpTasks counts one imp's tasks by state; every task state is present.
type ImpTasks struct {
	Imp    string         `json:"imp"`
	States map[string]int `json:"states"`
}

// TaskStates are the task states in the order a table shows them.
var TaskStates = []string{state.Waiting, state.Running, state.NeedsReview, state.Done, state.Failed, state.Cancelled}

// Pending is a gate not yet resolved: filed (awaiting the owner),
// approved or executing (awaiting an executor).
type Pending struct {
	ID         string `json:"id"`
	Imp        string `json:"imp"`
	Intent     string `json:"intent"`
	State      string `json:"state"`
	Created    Time   `json:"created"`
	AgeSeconds int64  `json:"age_seconds"`
	// Waiting says why impexec leaves an approved or executing gate as it
	// is: no executor in org.toml for its intent, or a pause of its imp.
	Waiting string `json:"waiting,omitempty"`
}

// Spend is one imp's spend on the UTC day against its budget in org.toml
// (0: no budget).
type Spend struct {
	Imp        string  `json:"imp"`
	Day        string  `json:"day"`
	Cost       float64 `json:"cost"`
	Daily      float64 `json:"daily"`
	Bytes      int64   `json:"bytes"`
	DailyBytes int64   `json:"daily_bytes"`
	Over       bool    `json:"over"`
	// Share is the largest share of a cap (daily, bytes, tokens_daily)
	// that proactive work has used today, 1 at the cap, ShareOf that
	// cap's key; 0 and "" for an imp without caps. Warn is its
	// [budget.<imp>] warn, past which the owner is told once a day.
	Share   float64 `json:"share"`
	ShareOf string  `json:"share_of,omitempty"`
	Warn    float64 `json:"warn,omitempty"`
}

// Failure is a failed task or gate.
type Failure struct {
	Kind   string `json:"kind"` // "task" or "gate"
	ID     string `json:"id"`
	Imp    string `json:"imp"`
	At     Time   `json:"at"`
	Reason string `json:"reason"`
}

// Notifications counts the outbox entries not yet delivered and lists
// those whose delivery failed at least once.
type Notifications struct {
	Pending int            `json:"pending"`
	Failing []Notification `json:"failing"`
}

// Notification is one entry whose delivery failed: how often, what the
// last attempt said, and when the next begins.
type Notification struct {
	ID        string `json:"id"`
	Event     string `json:"event"`
	Imp       string `json:"imp"`
	Attempts  int    `json:"attempts"`
	Next      Time   `json:"next"`
	LastError string `json:"last_error"`
}

// Options tune Gather.
type Options struct {
	Now time.Time
	// Failures is how many of the most recent failures to show.
	Failures int
	// GatewayUp checks impgw at its address; health.GatewayUp when nil.
	GatewayUp func(listen string) error
}

// DefaultFailures is how many failures Gather shows by default.
const DefaultFailures = 5

// waiting says why impexec leaves the approved or executing gate g as it
// is under org and ps: no executor for its intent, or, approved, a pause
// of its imp; "" when nothing holds it.
func waiting(org *config.Org, ps *pause.State, g *gate.Gate) string {
	if g.Intent != config.TrustPromote {
		if _, err := org.Executor(g.Intent); err != nil {
			return err.Error()
		}
	}
	if g.State == state.Approved {
		// impexec holds it, approved, until resume.
		if why := ps.Why(g.Imp); why != "" {
			return "held: " + why
		}
	}
	return ""
}

// Waiting says why no executor will run the approved gate g now, or ""
// when one will: org.toml does not load, it names no executor for the
// gate's intent, a pause holds its imp, or impexec run is not running.
func Waiting(y *yard.Yard, g *gate.Gate) string {
	org, err := config.LoadOrg(y)
	if err != nil {
		return err.Error()
	}
	ps, err := pause.Load(y)
	if err != nil {
		return err.Error()
	}
	if why := waiting(org, ps, g); why != "" {
		return why
	}
	if up, err := run.DaemonUp(y, "impexec"); err != nil {
		return err.Error()
	} else if !up {
		return "impexec run is not running (" + run.DaemonLock(y, "impexec") + " not held); 'impexec once " + g.ID + "' executes it now"
	}
	return ""
}

// Gather reads the overview of y. A part that cannot be read, org.toml
// included, is a warning and the rest is still gathered.
func Gather(y *yard.Yard, o Options) (*Status, error) {
	if o.Now.IsZero() {
		o.Now = time.Now()
	}
	if o.Failures <= 0 {
		o.Failures = DefaultFailures
	}
	if o.GatewayUp == nil {
		o.GatewayUp = health.GatewayUp
	}
	org, orgErr := config.LoadOrg(y)
	unsafeOrg := errors.Is(orgErr, config.ErrUnsafe)
	s := &Status{Yard: y.Root, At: Time{o.Now}, Daemons: []Daemon{}, Tasks: []ImpTasks{}, Gates: []Pending{}, Spend: []Spend{}, Failures: []Failure{}, Warnings: []string{}}
	warn := func(err error) { s.Warnings = append(s.Warnings, err.Error()) }
	if orgErr != nil && !unsafeOrg {
		// A broken org.toml is what the owner most needs to see, so it
		// comes first; the rest of the yard is still worth seeing.
		s.OrgError = orgErr.Error()
		warn(fmt.Errorf("%w; the imps and budgets shown are what the rest of the yard says, the gateway is not checked", orgErr))
	}
	if orgErr != nil {
		org = config.Default()
	}
	ps, err := pause.Load(y)
	if err != nil {
		warn(err)
	}
	s.Paused = ps.Lines()
	if s.Paused == nil {
		s.Paused = []string{}
	}
	if ps.Any() {
		s.PauseFile = ps
	}
	for _, err := range config.Unsafe(y) {
		warn(fmt.Errorf("%w; every daemon refuses it", err))
	}
	if unsafeOrg {
		warn(errors.New("org.toml is refused: the daemons and budgets shown are at their defaults"))
	}

	for _, name := range []string{"impsup", "impexec"} {
		up, err := run.DaemonUp(y, name)
		if err != nil {
			warn(err)
		}
		d := Daemon{Name: name, Running: up, By: "lock", Detail: "runs/." + name + ".lock not held"}
		if up {
			d.Detail = "runs/." + name + ".lock held"
		}
		s.Daemons = append(s.Daemons, d)
	}
	gw := Daemon{Name: "impgw", By: "health", Detail: "answers at " + org.Gateway.Listen}
	if s.OrgError != "" {
		gw.Detail = "not checked: org.toml, which names its address, does not load"
	} else if err := o.GatewayUp(org.Gateway.Listen); err != nil {
		gw.Detail = "does not answer at " + org.Gateway.Listen
	} else {
		gw.Running = true
	}
	s.Daemons = append(s.Daemons, gw)
	s.MCPServers = mcpServers(y, org, gw.Running, warn)

	byImp := map[string]map[string]int{}
	for imp := range org.Imps {
		byImp[imp] = map[string]int{}
	}
	var fails []Failure
	bad, _ := queue.Each(y, queue.Filter{}, func(t *queue.Task) error {
		if byImp[t.Imp] == nil {
			byImp[t.Imp] = map[string]int{}
		}
		byImp[t.Imp][t.State]++
		if t.State == state.Failed {
			why := t.Reason
			if why == "" {
				why = lastWhy(t.History)
			}
			fails = append(fails, Failure{Kind: "task", ID: t.ID, Imp: t.Imp, At: Time{t.Updated}, Reason: why})
		}
		return nil
	})
	for _, err := range bad {
		warn(err)
	}
	for _, imp := range slices.Sorted(maps.Keys(byImp)) {
		counts := byImp[imp]
		for _, st := range TaskStates {
			counts[st] += 0
		}
		s.Tasks = append(s.Tasks, ImpTasks{Imp: imp, States: counts})
	}

	bad, _ = gate.Each(y, gate.Filter{All: true}, func(g *gate.Gate) error {
		switch g.State {
		case state.Filed, state.Approved, state.Executing:
			p := Pending{ID: g.ID, Imp: g.Imp, Intent: g.Intent, State: g.State,
				Created: Time{g.Created}, AgeSeconds: int64(o.Now.Sub(g.Created) / time.Second)}
			if g.State != state.Filed {
				p.Waiting = waiting(org, ps, g)
			}
			s.Gates = append(s.Gates, p)
		case state.Failed:
			fails = append(fails, Failure{Kind: "gate", ID: g.ID, Imp: g.Imp, At: Time{g.Updated}, Reason: lastWhy(g.History)})
		}
		return nil
	})
	for _, err := range bad {
		warn(err)
	}
	// Oldest first: the longest wait is the first to see.
	// Times are whole seconds; ids, which sort by the millisecond they
	// were made, break ties.
	sort.SliceStable(s.Gates, func(i, j int) bool {
		a, b := s.Gates[i], s.Gates[j]
		if !a.Created.Equal(b.Created.Time) {
			return a.Created.Before(b.Created.Time)
		}
		return a.ID[2:] < b.ID[2:]
	})

	// Most recent first.
	sort.SliceStable(fails, func(i, j int) bool {
		a, b := fails[i], fails[j]
		if !a.At.Equal(b.At.Time) {
			return a.At.After(b.At.Time)
		}
		return a.ID[2:] > b.ID[2:]
	})
	if len(fails) > o.Failures {
		fails = fails[:o.Failures]
	}
	s.Failures = append(s.Failures, fails...)

	s.Notifications = notifications(y, warn)

	names := map[string]bool{}
	for imp := range org.Budget {
		names[imp] = true
	}
	imps, err := ledger.Imps(y)
	if err != nil {
		warn(err)
	}
	for _, imp := range imps {
		names[imp] = true
	}
	day := o.Now.UTC().Format(time.DateOnly)
	for _, imp := range slices.Sorted(maps.Keys(names)) {
		spent, err := ledger.Spent(y, imp, o.Now)
		if err != nil {
			warn(fmt.Errorf("ledger of %s: %w", imp, err))
			continue
		}
		var all ledger.Totals
		for _, t := range spent {
			all.Merge(t)
		}
		b := org.Budget[imp]
		share, of, _ := ledger.Share(b, spent[ledger.Proactive])
		s.Spend = append(s.Spend, Spend{Imp: imp, Day: day, Cost: all.Cost, Daily: b.Daily, Bytes: all.Bytes, DailyBytes: b.Bytes,
			Over: ledger.Over(b, spent[ledger.Proactive]) != "", Share: share, ShareOf: of, Warn: b.Warn})
	}
	return s, nil
}

func notifications(y *yard.Yard, warn func(error)) Notifications {
	entries, bad := notify.Pending(y)
	for _, err := range bad {
		warn(err)
	}
	n := Notifications{Pending: len(entries), Failing: []Notification{}}
	for _, en := range entries {
		if en.Attempts > 0 {
			n.Failing = append(n.Failing, Notification{ID: en.ID, Event: en.Event, Imp: en.Imp, Attempts: en.Attempts, Next: Time{en.Next}, LastError: en.LastError})
		}
	}
	return n
}

// lastWhy is the reason of the last transition that gave one.
func lastWhy(h []state.Transition) string {
	for i := len(h) - 1; i >= 0; i-- {
		if h[i].Why != "" {
			return h[i].Why
		}
	}
	return ""
}

// WriteText writes s for people: one section per part, an empty part
// said in words; p paints the daemons' and gates' states.
func (s *Status) WriteText(w io.Writer, p cli.Painter) error {
	ew := &errWriter{w: w}
	tw := tabwriter.NewWriter(ew, 0, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "yard %s at %s\n", s.Yard, s.At)
	if s.OrgError != "" {
		fmt.Fprintln(tw, p.Paint(cli.Red, "org.toml does not load: "+cli.Printable(s.OrgError)))
	}
	for _, l := range s.Paused {
		fmt.Fprintln(tw, p.Paint(cli.Red, cli.Printable(l)))
	}

	fmt.Fprintln(tw, "\nDAEMONS")
	for _, d := range s.Daemons {
		// Both states painted: the codes widen every cell of the column
		// alike, and tabwriter keeps it aligned.
		up := p.Paint(cli.Red, "not running")
		if d.Running {
			up = p.Paint(cli.Green, "running")
		}
		fmt.Fprintf(tw, "  %s\t%s\t(%s)\n", d.Name, up, d.Detail)
	}
	tw.Flush()

	fmt.Fprintln(tw, "\nTASKS")
	if len(s.Tasks) == 0 {
		fmt.Fprintln(tw, "  none")
	} else {
		fmt.Fprintf(tw, "  IMP\t%s\n", strings.ToUpper(strings.Join(TaskStates, "\t")))
		for _, t := range s.Tasks {
			fmt.Fprintf(tw, "  %s", t.Imp)
			for _, st := range TaskStates {
				fmt.Fprintf(tw, "\t%d", t.States[st])
			}
			fmt.Fprintln(tw)
		}
	}
	tw.Flush()

	fmt.Fprintln(tw, "\nPENDING GATES")
	if len(s.Gates) == 0 {
		fmt.Fprintln(tw, "  none")
	} else {
		fmt.Fprintf(tw, "  ID\tIMP\tINTENT\t%s\tAGE\n", p.Paint(cli.Plain, "STATE"))
		for _, g := range s.Gates {
			// A gate's imp and intent are whatever the yard's writer put.
			fmt.Fprintf(tw, "  %s\t%s\t%s\t%s\t%s\n", g.ID, cli.Cell(g.Imp), cli.Cell(g.Intent), p.Paint(cli.StateStyle(string(g.State)), string(g.State)), cli.Age(s.At.Time, g.Created.Time))
		}
		// After the table, so that a long reason does not widen it; it
		// names the intent, as the yard's writer put it.
		for _, g := range s.Gates {
			if g.Waiting != "" {
				fmt.Fprintf(tw, "  %s waits: %s\n", g.ID, cli.Cell(g.Waiting))
			}
		}
	}
	tw.Flush()

	fmt.Fprintf(tw, "\nSPEND (%s UTC)\n", s.At.UTC().Format(time.DateOnly))
	if len(s.Spend) == 0 {
		fmt.Fprintln(tw, "  none")
	} else {
		fmt.Fprintln(tw, "  IMP\tCOST\tBUDGET\tBYTES\tBYTE BUDGET\tUSED")
		for _, sp := range s.Spend {
			over := ""
			switch {
			case sp.Over:
				over = "\t" + p.Paint(cli.Red, "over budget")
			case sp.Warn > 0 && sp.Share >= sp.Warn:
				over = "\t" + p.Paint(cli.Amber, "past warn")
			}
			fmt.Fprintf(tw, "  %s\t%.4g\t%s\t%d\t%s\t%s%s\n", sp.Imp, sp.Cost, orDash(sp.Daily > 0, fmt.Sprintf("%.4g", sp.Daily)),
				sp.Bytes, orDash(sp.DailyBytes > 0, fmt.Sprint(sp.DailyBytes)), orDash(sp.ShareOf != "", fmt.Sprintf("%.0f%% of %s", 100*sp.Share, sp.ShareOf)), over)
		}
	}
	tw.Flush()

	fmt.Fprintln(tw, "\nLAST FAILURES")
	if len(s.Failures) == 0 {
		fmt.Fprintln(tw, "  none")
	} else {
		for _, f := range s.Failures {
			fmt.Fprintf(tw, "  %s\t%s\t%s\t%s\t%s\n", f.At, f.Kind, f.ID, cli.Cell(f.Imp), reason(f.Reason))
		}
	}
	tw.Flush()

	fmt.Fprintln(tw, "\nMCP SERVERS")
	if len(s.MCPServers) == 0 {
		fmt.Fprintln(tw, "  none")
	} else {
		fmt.Fprintln(tw, "  SERVER\tIMP\tISOLATION\tSTATE\tRESTARTS\tLAST ERROR")
		for _, m := range s.MCPServers {
			fmt.Fprintf(tw, "  %s\t%s\t%s\t%s\t%d\t%s\n", m.Server, orDash(m.Imp != "", m.Imp), m.Isolation, m.State, m.Restarts, reason(m.LastError))
		}
	}
	tw.Flush()

	fmt.Fprintln(tw, "\nNOTIFICATIONS")
	fmt.Fprintf(tw, "  %d waiting to be delivered\n", s.Notifications.Pending)
	for _, n := range s.Notifications.Failing {
		fmt.Fprintf(tw, "  %s\t%s\t%s\tfailed %d time(s), next at %s\t%s\n", n.ID, cli.Cell(n.Event), cli.Cell(n.Imp), n.Attempts, n.Next, reason(n.LastError))
	}
	tw.Flush()

	if len(s.Warnings) > 0 {
		fmt.Fprintln(tw, "\nNOT READ")
		for _, wn := range s.Warnings {
			fmt.Fprintf(tw, "  %s\n", wn)
		}
	}
	tw.Flush()
	return ew.err
}

// mcpServers lists each configured server's processes as the gateway
// last wrote them; one it never started, or any while the gateway is
// down, is stopped.
func mcpServers(y *yard.Yard, org *config.Org, gatewayUp bool, warn func(error)) []mcpserv.State {
	written, err := mcpserv.ReadStatus(y)
	if err != nil {
		warn(err)
		written = &mcpserv.Status{}
	}
	out := []mcpserv.State{}
	for _, name := range slices.Sorted(maps.Keys(org.MCP)) {
		spec := org.MCP[name]
		n := len(out)
		for _, st := range written.Servers {
			if st.Server == name {
				if !gatewayUp {
					st.State, st.PID = mcpserv.StateStopped, 0
				}
				out = append(out, st)
			}
		}
		if len(out) == n {
			out = append(out, mcpserv.State{Server: name, Isolation: spec.Isolation, State: mcpserv.StateStopped})
		}
	}
	return out
}

func reason(s string) string {
	if strings.TrimSpace(s) == "" {
		return "(no reason recorded)"
	}
	return cli.OneLine(s, 100)
}

func orDash(ok bool, s string) string {
	if ok {
		return s
	}
	return "-"
}

// errWriter keeps the first write error.
type errWriter struct {
	w   io.Writer
	err error
}

func (e *errWriter) Write(b []byte) (int, error) {
	if e.err != nil {
		return 0, e.err
	}
	n, err := e.w.Write(b)
	if err != nil {
		e.err = err
	}
	return n, err
}
