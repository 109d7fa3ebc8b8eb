// Package ledger meters spend: ledger/<imp>.jsonl holds one line per cost,
// the configured cost of each executed action, the bytes each imp moves
// through the gateway and the model tokens its calls use, each classed as
// owner or proactive work by the task it was done for. Budgets read the
// proactive class to soft-deny an imp's proactive work once its daily cap
// is spent; owner tasks always run.
package ledger

import (
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"path/filepath"
	"sync"
	"time"

	"github.com/impyard/impyard/lib/config"
	"github.com/impyard/impyard/lib/id"
	"github.com/impyard/impyard/lib/queue"
	"github.com/impyard/impyard/lib/store"
	"github.com/impyard/impyard/lib/yard"
)

// Entry kinds.
const (
	Action = "action"
	Bytes  = "bytes"
	Tokens = "tokens"
	// Call is written, and synced, before a model call of proactive work
	// is forwarded: it costs nothing, and a ledger that cannot take it
	// cannot take the call's usage either, so the call is refused. It
	// holds the call's reservation (its likely tokens, cost and bytes),
	// counted as spent until an entry with the same Entry.Call settles
	// it: the call's Tokens entry, or a Settle entry when it had no
	// usage. A call cut off by a crash is never settled and stays counted
	// at its reservation for its day.
	Call = "call"
	// Settle closes a Call entry's reservation that no Tokens entry
	// settles (a refused or failed call); it costs nothing.
	Settle = "settle"
)

// Classes of spend: work done for a proactive task, and everything else.
const (
	Owner     = "owner"
	Proactive = "proactive"
)

// Entry is one metered cost.
type Entry struct {
	Schema string    `json:"schema"`
	TS     time.Time `json:"ts"`
	Imp    string    `json:"imp"`
	Kind   string    `json:"kind"`
	// Class is Owner or Proactive; Debit fills it from Task when empty.
	// An entry written before classes counts as proactive, as every
	// entry counted against the budget then.
	Class  string  `json:"class,omitempty"`
	Intent string  `json:"intent,omitempty"`
	Gate   string  `json:"gate,omitempty"`
	Task   string  `json:"task,omitempty"`
	Cost   float64 `json:"cost,omitempty"`
	Bytes  int64   `json:"bytes,omitempty"`
	// A Tokens entry: the model the response named, its tokens, and
	// whether the response carried no usage the gateway could read. An
	// entry of unknown usage is also of unknown cost when its model is
	// priced, or unnamed while some model is.
	Model        string `json:"model,omitempty"`
	InputTokens  int64  `json:"input_tokens,omitempty"`
	OutputTokens int64  `json:"output_tokens,omitempty"`
	UnknownUsage bool   `json:"unknown_usage,omitempty"`
	UnknownCost  bool   `json:"unknown_cost,omitempty"`
	// Call names the model call a Call entry reserved for and the entry
	// that settles it: the gateway's decision record id.
	Call string `json:"call,omitempty"`
}

// Totals sums entries.
type Totals struct {
	Cost         float64 `json:"cost"`
	Bytes        int64   `json:"bytes"`
	InputTokens  int64   `json:"input_tokens"`
	OutputTokens int64   `json:"output_tokens"`
	// UnknownUsage counts metered calls whose usage could not be read,
	// UnknownCost those of them whose cost it would have set.
	UnknownUsage int64 `json:"unknown_usage"`
	UnknownCost  int64 `json:"unknown_cost"`
	// Damaged counts ledger lines that could not be read, DamagedAt
	// names the first as file:line. Spent counts them as proactive spend
	// on every day, as neither their day nor their cost can be read.
	Damaged   int64  `json:"damaged,omitempty"`
	DamagedAt string `json:"damaged_at,omitempty"`
	// Open counts model calls counted at their reservation: in flight,
	// or cut off by a crash before they were settled.
	Open int64 `json:"open_calls,omitempty"`
}

// Add counts e.
func (t *Totals) Add(e Entry) {
	if e.Kind == Call && e.Call != "" {
		t.Open++
	}
	t.Cost += e.Cost
	t.Bytes += e.Bytes
	t.InputTokens += e.InputTokens
	t.OutputTokens += e.OutputTokens
	if e.UnknownUsage {
		t.UnknownUsage++
	}
	if e.UnknownCost {
		t.UnknownCost++
	}
}

// Merge counts o.
func (t *Totals) Merge(o Totals) {
	t.Cost += o.Cost
	t.Bytes += o.Bytes
	t.InputTokens += o.InputTokens
	t.OutputTokens += o.OutputTokens
	t.UnknownUsage += o.UnknownUsage
	t.UnknownCost += o.UnknownCost
	t.Open += o.Open
	t.Damaged += o.Damaged
	if t.DamagedAt == "" {
		t.DamagedAt = o.DamagedAt
	}
}

// sub takes back what Add counted of a Call entry, when it is settled.
func (t *Totals) sub(e Entry) {
	t.Open--
	t.Cost -= e.Cost
	t.Bytes -= e.Bytes
	t.InputTokens -= e.InputTokens
	t.OutputTokens -= e.OutputTokens
}

// Tokens is input plus output tokens, what tokens_daily caps.
func (t Totals) Tokens() int64 { return t.InputTokens + t.OutputTokens }

// ClassOf is the class of work done for task: Proactive when the task is
// proactive, Owner for any other task and for none. A task that cannot
// be read is owner work: only a task known to be proactive is capped.
func ClassOf(y *yard.Yard, task string) string {
	if task == "" {
		return Owner
	}
	if t, err := queue.Get(y, task); err == nil && t.Proactive {
		return Proactive
	}
	return Owner
}

// ErrOverBudget is the soft-deny of proactive work past its daily cap.
var ErrOverBudget = errors.New("over budget")

func path(y *yard.Yard, imp string) (string, error) {
	if err := id.CheckName(imp); err != nil {
		return "", err
	}
	d, err := store.MkdirAll(y.Root, "ledger")
	if err != nil {
		return "", err
	}
	return filepath.Join(d, imp+".jsonl"), nil
}

// Now is the ledger's clock: entries are stamped with it, and the
// daemons that ask for today's spend read today from it, so a test can
// put them all on one day, or just before its end.
var Now = time.Now

// Debit appends e to the imp's ledger.
func Debit(y *yard.Yard, e Entry) error {
	p, err := path(y, e.Imp)
	if err != nil {
		return err
	}
	e.Schema = store.Schema("ledger", 1)
	if e.Class == "" {
		e.Class = ClassOf(y, e.Task)
	}
	if e.TS.IsZero() {
		e.TS = Now()
	}
	e.TS = store.Second(e.TS)
	return store.AppendJSONL(p, e)
}

// Read calls f with each of the imp's entries from since until before
// until. An action is read once per gate: an executor that resumes after
// a crash may debit the same gate again. An entry without a class is
// given Proactive. Call and Settle entries, which are not spend, and
// damaged lines are not passed (Spent counts the damaged ones and the
// reservations).
func Read(y *yard.Yard, imp string, since, until time.Time, f func(Entry)) error {
	if err := id.CheckName(imp); err != nil {
		return err
	}
	gates := map[string]bool{}
	_, err := store.ReadJSONL(file(y, imp), func(line []byte) error {
		e, err := decode(line)
		if err != nil || e.Kind == Call || e.Kind == Settle {
			return nil
		}
		if e, ok := keep(e, since, until, gates); ok {
			f(e)
		}
		return nil
	})
	return err
}

// file is the imp's ledger; reading makes nothing, and a missing ledger/
// has no entries.
func file(y *yard.Yard, imp string) string { return filepath.Join(y.Path("ledger"), imp+".jsonl") }

// decode reads one ledger line; an error means it is damaged.
func decode(line []byte) (Entry, error) {
	var e Entry
	err := json.Unmarshal(line, &e)
	return e, err
}

// keep says whether e counts: false when it is not an entry from since
// until before until, or an action of a gate already in gates.
func keep(e Entry, since, until time.Time, gates map[string]bool) (Entry, bool) {
	if e.TS.Before(since) || !e.TS.Before(until) {
		return e, false
	}
	if e.Gate != "" {
		if gates[e.Gate] {
			return e, false
		}
		gates[e.Gate] = true
	}
	if e.Class == "" {
		e.Class = Proactive
	}
	return e, true
}

// Day is the UTC day of at, from its midnight to the next.
func Day(at time.Time) (since, until time.Time) {
	since = at.UTC().Truncate(24 * time.Hour)
	return since, since.Add(24 * time.Hour)
}

// Spent sums the imp's spend on the UTC day of at, by class.
//
// A damaged line (one that is not JSON, such as a line torn by a power
// cut, or JSON that is not an entry) is counted in the proactive class's
// Damaged, with its file and line in DamagedAt, whatever the day: its
// day and cost cannot be read, and counting it as nothing could let
// proactive work past its caps (see Over).
//
// The reservation of a model call (a Call entry with an Entry.Call) is
// counted as spent until the entry that settles it, which takes it back
// and counts what the call used instead: so calls in flight, and calls a
// crash cut off, count against the caps.
//
// A process keeps, per ledger, the day it last asked for and where it
// stopped reading, and reads only what was appended since: impgw asks
// before every proactive model call and impsup at every pass, and a
// ledger holds every day the imp has worked.
func Spent(y *yard.Yard, imp string, at time.Time) (map[string]Totals, error) {
	if err := id.CheckName(imp); err != nil {
		return nil, err
	}
	since, until := Day(at)
	p := file(y, imp)
	days.Lock()
	defer days.Unlock()
	d := days.m[p]
	if d == nil || !d.since.Equal(since) {
		d = &day{since: since, tail: store.Tail{Path: p}}
		d.clear()
		days.m[p] = d
	}
	bad, err := d.tail.Next(d.clear, func(line []byte, n int) {
		e, err := decode(line)
		if err != nil {
			d.damage(store.BadLine{Path: p, Line: n, Err: err})
			return
		}
		if e, ok := keep(e, since, until, d.gates); ok {
			d.count(e)
		}
	})
	for _, b := range bad {
		d.damage(b)
	}
	if err != nil {
		delete(days.m, p)
		return nil, err
	}
	return maps.Clone(d.totals), nil
}

// days is what Spent has read of each ledger.
var days = struct {
	sync.Mutex
	m map[string]*day
}{m: map[string]*day{}}

// day is one UTC day of a ledger as read so far.
type day struct {
	since  time.Time
	tail   store.Tail
	totals map[string]Totals
	gates  map[string]bool
	open   map[string]Entry // reservations not yet settled, by call
	first  int              // the line number of the first damaged line, 0 for none
}

// clear forgets what was read: the ledger is read again from its start.
func (d *day) clear() {
	d.totals, d.gates, d.open, d.first = map[string]Totals{}, map[string]bool{}, map[string]Entry{}, 0
}

// count adds e to the day's totals. A reservation is remembered until
// the entry settling it comes, which takes it back; a settling entry
// whose reservation is not of this day (the call crossed midnight)
// counts alone.
func (d *day) count(e Entry) {
	if e.Call != "" {
		if e.Kind == Call {
			d.open[e.Call] = e
		} else if r, ok := d.open[e.Call]; ok {
			delete(d.open, e.Call)
			t := d.totals[r.Class]
			t.sub(r)
			d.totals[r.Class] = t
		}
	}
	t := d.totals[e.Class]
	t.Add(e)
	d.totals[e.Class] = t
}

// damage counts a damaged line as proactive spend of unknown size.
func (d *day) damage(b store.BadLine) {
	t := d.totals[Proactive]
	t.Damaged++
	if d.first == 0 || b.Line < d.first {
		d.first = b.Line
		t.DamagedAt = fmt.Sprintf("%s:%d", b.Path, b.Line)
	}
	d.totals[Proactive] = t
}

// Over says which cap of b the proactive spend of a day reached, "" when
// none did; a budget of zero caps nothing. A model call whose usage could
// not be read counts as reaching the caps it would have counted toward:
// tokens_daily, and daily when its cost is unknown too. Counted as zero,
// calls that hide their usage (an event stream asked for without usage,
// say) would pass any cap. A damaged ledger line reaches every cap: its
// spend is unknown, and so is its day.
func Over(b config.Budget, proactive Totals) string {
	switch {
	case proactive.Damaged > 0 && (b.Daily > 0 || b.Bytes > 0 || b.TokensDaily > 0):
		return fmt.Sprintf("has %d damaged line(s) in its ledger, the first at %s, whose day and spend cannot be read, so its daily caps cannot be held until they are repaired or removed", proactive.Damaged, proactive.DamagedAt)
	case b.Daily > 0 && proactive.Cost >= b.Daily:
		return fmt.Sprintf("spent %.4g of its daily %.4g on proactive work%s", proactive.Cost, b.Daily, reserved(proactive))
	case b.Bytes > 0 && proactive.Bytes >= b.Bytes:
		return fmt.Sprintf("moved %d of its daily %d bytes on proactive work%s", proactive.Bytes, b.Bytes, reserved(proactive))
	case b.TokensDaily > 0 && proactive.Tokens() >= b.TokensDaily:
		return fmt.Sprintf("used %d of its daily %d model tokens on proactive work%s", proactive.Tokens(), b.TokensDaily, reserved(proactive))
	case b.TokensDaily > 0 && proactive.UnknownUsage > 0:
		return fmt.Sprintf("made %d model call(s) on proactive work whose usage could not be read, so its daily %d model tokens cannot be held", proactive.UnknownUsage, b.TokensDaily)
	case b.Daily > 0 && proactive.UnknownCost > 0:
		return fmt.Sprintf("made %d priced model call(s) on proactive work whose usage could not be read, so its daily %.4g cannot be held", proactive.UnknownCost, b.Daily)
	}
	return ""
}

// Share is the largest share of a cap of b that proactive spend of a day
// has used (1 is the cap reached), with the cap's key and its figures in
// words; 0 and "" when b caps nothing. Calls in flight count at what they
// reserved, as they do for Over.
func Share(b config.Budget, proactive Totals) (share float64, key, used string) {
	consider := func(s float64, k, u string) {
		if s > share || key == "" {
			share, key, used = s, k, u
		}
	}
	if b.Daily > 0 {
		consider(proactive.Cost/b.Daily, "daily", fmt.Sprintf("spent %.4g of its daily %.4g", proactive.Cost, b.Daily))
	}
	if b.Bytes > 0 {
		consider(float64(proactive.Bytes)/float64(b.Bytes), "bytes", fmt.Sprintf("moved %d of its daily %d bytes", proactive.Bytes, b.Bytes))
	}
	if b.TokensDaily > 0 {
		consider(float64(proactive.Tokens())/float64(b.TokensDaily), "tokens_daily", fmt.Sprintf("used %d of its daily %d model tokens", proactive.Tokens(), b.TokensDaily))
	}
	return share, key, used
}

// reserved says how many calls proactive counts at their reservation,
// for a refusal's reason; "" for none.
func reserved(proactive Totals) string {
	if proactive.Open == 0 {
		return ""
	}
	return fmt.Sprintf(" (%d call(s) in flight or cut off counted at what they reserved)", proactive.Open)
}

// Passes says which cap of b proactive spend would pass with the
// reservation r (a Call entry) counted too, "" when none would; a cap
// already reached is Over's.
func Passes(b config.Budget, proactive Totals, r Entry) string {
	if why := Over(b, proactive); why != "" {
		return why
	}
	open := reserved(proactive)
	switch {
	case b.Daily > 0 && proactive.Cost+r.Cost > b.Daily:
		return fmt.Sprintf("spent %.4g of its daily %.4g on proactive work%s, and this call reserves %.4g more", proactive.Cost, b.Daily, open, r.Cost)
	case b.Bytes > 0 && proactive.Bytes+r.Bytes > b.Bytes:
		return fmt.Sprintf("moved %d of its daily %d bytes on proactive work%s, and this call reserves %d more", proactive.Bytes, b.Bytes, open, r.Bytes)
	case b.TokensDaily > 0 && proactive.Tokens()+r.InputTokens+r.OutputTokens > b.TokensDaily:
		return fmt.Sprintf("used %d of its daily %d model tokens on proactive work%s, and this call reserves %d more", proactive.Tokens(), b.TokensDaily, open, r.InputTokens+r.OutputTokens)
	}
	return ""
}

// Check returns ErrOverBudget (wrapped, with the figures) when proactive
// work of imp has spent its daily cap. Owner work is never refused.
func Check(y *yard.Yard, org *config.Org, imp string, proactive bool, at time.Time) error {
	if !proactive || org == nil {
		return nil
	}
	b := org.Budget[imp]
	if !b.Capped() {
		return nil
	}
	spent, err := Spent(y, imp, at)
	if err != nil {
		return err
	}
	if why := Over(b, spent[Proactive]); why != "" {
		return fmt.Errorf("%w: imp %s %s", ErrOverBudget, imp, why)
	}
	return nil
}

// Meter records what each imp spends through the gateway: bytes and
// model tokens. It keeps one group-commit log per imp, so metering costs
// a request no system call of its own, and the class of each task it has
// seen.
type Meter struct {
	y       *yard.Yard
	report  func(error)
	mu      sync.Mutex
	logs    map[string]*store.Log
	classes map[string]string
}

// NewMeter returns a Meter for the yard; report hears write failures.
func NewMeter(y *yard.Yard, report func(error)) *Meter {
	return &Meter{y: y, report: report, logs: map[string]*store.Log{}, classes: map[string]string{}}
}

// Class is the class of work for task, read once per task: a task's
// proactive mark never changes.
func (m *Meter) Class(task string) string {
	m.mu.Lock()
	c, ok := m.classes[task]
	m.mu.Unlock()
	if ok {
		return c
	}
	c = ClassOf(m.y, task)
	m.mu.Lock()
	m.classes[task] = c
	m.mu.Unlock()
	return c
}

// Add debits e, its class filled from its task. The subject "org" is the
// trusted side and is not metered.
func (m *Meter) Add(e Entry) {
	if id.CheckName(e.Imp) != nil {
		return
	}
	if e.Class == "" {
		e.Class = m.Class(e.Task)
	}
	if err := m.append(e, false); err != nil {
		m.report(err)
	}
}

// Open writes r, the reservation of a model call of r.Imp's r.Task
// named r.Call, as a Call entry and returns once it is synced, with the
// error if it was not: then the ledger cannot take the call's usage
// either, and the call must not go out.
func (m *Meter) Open(r Entry) error {
	if err := id.CheckName(r.Imp); err != nil {
		return err
	}
	r.Kind, r.Class = Call, m.Class(r.Task)
	return m.append(r, true)
}

// append stamps e and appends it to its imp's ledger, through one
// group-commit log per imp; with wait it returns once e is synced.
func (m *Meter) append(e Entry, wait bool) error {
	m.mu.Lock()
	l := m.logs[e.Imp]
	if l == nil {
		p, err := path(m.y, e.Imp)
		if err != nil {
			m.mu.Unlock()
			return err
		}
		l = store.NewLog(p, func(err error) {
			if err != nil {
				m.report(err)
			}
		})
		m.logs[e.Imp] = l
	}
	m.mu.Unlock()
	e.Schema, e.TS = store.Schema("ledger", 1), store.Second(Now())
	line, err := store.Line(e)
	if err != nil {
		return err
	}
	return l.Append(line, wait)
}

// Sync waits until every metered entry is written.
func (m *Meter) Sync() {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, l := range m.logs {
		l.Sync()
	}
}
