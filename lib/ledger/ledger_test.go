package ledger

import (
	"errors"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/impyard/impyard/internal/testclock"
	"github.com/impyard/impyard/lib/config"
	"github.com/impyard/impyard/lib/queue"
	"github.com/impyard/impyard/lib/yard/yardtest"
)

func TestBudget(t *testing.T) {
	y := yardtest.New(t)
	now := testclock.Freeze(t, &Now)
	org := &config.Org{Budget: map[string]config.Budget{"yuko": {Daily: 1.0}}}
	for _, e := range []Entry{
		{Imp: "yuko", Kind: Action, Gate: "g-0000000000000001", Cost: 0.6, Class: Proactive},
		{Imp: "yuko", Kind: Action, Gate: "g-0000000000000004", Cost: 5},
		{Imp: "yuko", Kind: Action, Gate: "g-0000000000000001", Cost: 0.6, Class: Proactive}, // a resumed execution
		{Imp: "yuko", Kind: Action, Gate: "g-0000000000000002", Cost: 0.3, TS: now.Add(-48 * time.Hour), Class: Proactive},
		{Imp: "yuko", Kind: Bytes, Bytes: 100, Class: Proactive},
	} {
		if err := Debit(y, e); err != nil {
			t.Fatal(err)
		}
	}
	spent, err := Spent(y, "yuko", now)
	if p := spent[Proactive]; err != nil || p.Cost != 0.6 || p.Bytes != 100 || spent[Owner].Cost != 5 {
		t.Fatalf("spent %+v %v, want 0.6 and 100 proactive, 5 owner (an entry without a task)", spent, err)
	}
	if err := Check(y, org, "yuko", true, now); err != nil {
		t.Errorf("under budget refused: %v", err)
	}
	Debit(y, Entry{Imp: "yuko", Kind: Action, Gate: "g-0000000000000003", Cost: 0.5, Class: Proactive})
	if err := Check(y, org, "yuko", true, now); !errors.Is(err, ErrOverBudget) {
		t.Errorf("over budget: %v", err)
	}
	if err := Check(y, org, "yuko", false, now); err != nil {
		t.Errorf("owner task refused: %v", err)
	}
	if err := Check(y, org, "rex", true, now); err != nil {
		t.Errorf("imp without budget refused: %v", err)
	}
}

func TestTokensBudget(t *testing.T) {
	y := yardtest.New(t)
	now := testclock.Freeze(t, &Now)
	owner, _, err := queue.Add(y, queue.AddOptions{Imp: "yuko", Text: "asked"})
	if err != nil {
		t.Fatal(err)
	}
	pro, _, err := queue.Add(y, queue.AddOptions{Imp: "yuko", Text: "digest", Proactive: true})
	if err != nil {
		t.Fatal(err)
	}
	org := &config.Org{Budget: map[string]config.Budget{"yuko": {TokensDaily: 1000}}}
	m := NewMeter(y, func(err error) { t.Error(err) })
	m.Add(Entry{Imp: "yuko", Kind: Tokens, Task: owner, Model: "gpt-5", InputTokens: 5000, OutputTokens: 5000})
	m.Add(Entry{Imp: "yuko", Kind: Tokens, Task: pro, Model: "gpt-5", InputTokens: 400, OutputTokens: 500})
	m.Add(Entry{Imp: "yuko", Kind: Tokens, Task: owner, UnknownUsage: true, UnknownCost: true})
	m.Sync()
	if err := Check(y, org, "yuko", true, now); err != nil {
		t.Errorf("900 proactive tokens of 1000 refused (owner tokens counted?): %v", err)
	}
	m.Add(Entry{Imp: "yuko", Kind: Tokens, Task: pro, Model: "gpt-5", InputTokens: 60, OutputTokens: 40})
	m.Sync()
	err = Check(y, org, "yuko", true, now)
	if !errors.Is(err, ErrOverBudget) || !strings.Contains(err.Error(), "used 1000 of its daily 1000 model tokens") {
		t.Errorf("1000 proactive tokens of 1000: %v", err)
	}
	if err := Check(y, org, "yuko", false, now); err != nil {
		t.Errorf("owner work refused: %v", err)
	}
	m.Add(Entry{Imp: "yuko", Kind: Tokens, Task: pro, UnknownUsage: true})
	m.Sync()
	spent, err := Spent(y, "yuko", now)
	if err != nil {
		t.Fatal(err)
	}
	if p, o := spent[Proactive], spent[Owner]; p.Tokens() != 1000 || p.UnknownUsage != 1 || o.Tokens() != 10000 || o.UnknownUsage != 1 || o.UnknownCost != 1 {
		t.Errorf("spent %+v", spent)
	}
	if err := Check(y, org, "yuko", true, now.Add(24*time.Hour)); err != nil {
		t.Errorf("the next UTC day refused: %v", err)
	}
}

func TestOver(t *testing.T) {
	for _, tc := range []struct {
		b    config.Budget
		p    Totals
		want string
	}{
		{config.Budget{}, Totals{Cost: 100, Bytes: 1 << 40, InputTokens: 1 << 40}, ""},
		{config.Budget{Daily: 1}, Totals{Cost: 0.99}, ""},
		{config.Budget{Daily: 1}, Totals{Cost: 1}, "spent 1 of its daily 1 on proactive work"},
		{config.Budget{Bytes: 10}, Totals{Bytes: 10}, "moved 10 of its daily 10 bytes on proactive work"},
		{config.Budget{TokensDaily: 10}, Totals{InputTokens: 4, OutputTokens: 5}, ""},
		{config.Budget{TokensDaily: 10}, Totals{InputTokens: 5, OutputTokens: 5}, "used 10 of its daily 10 model tokens on proactive work"},
		{config.Budget{TokensDaily: 10}, Totals{InputTokens: 4, UnknownUsage: 2}, "made 2 model call(s) on proactive work whose usage could not be read, so its daily 10 model tokens cannot be held"},
		{config.Budget{TokensDaily: 10}, Totals{InputTokens: 10, UnknownUsage: 2}, "used 10 of its daily 10 model tokens on proactive work"},
		{config.Budget{Daily: 1, Bytes: 10}, Totals{Cost: 0.5, Bytes: 5, UnknownUsage: 3}, ""},
		{config.Budget{Daily: 1}, Totals{Cost: 0.5, UnknownUsage: 3, UnknownCost: 1}, "made 1 priced model call(s) on proactive work whose usage could not be read, so its daily 1 cannot be held"},
		{config.Budget{Bytes: 10}, Totals{Bytes: 5, UnknownUsage: 3, UnknownCost: 3}, ""},
	} {
		if got := Over(tc.b, tc.p); got != tc.want {
			t.Errorf("Over(%+v, %+v) = %q, want %q", tc.b, tc.p, got, tc.want)
		}
	}
}

// A proactive model call whose usage could not be read holds the imp's
// tokens_daily as reached, and its daily when the call's cost is unknown
// too: counted as zero, such calls would pass any cap. Owner work is not
// held by it, nor are caps it could not have counted toward.
func TestUnknownUsageHoldsCaps(t *testing.T) {
	y := yardtest.New(t)
	now := testclock.Freeze(t, &Now)
	pro, _, err := queue.Add(y, queue.AddOptions{Imp: "yuko", Text: "digest", Proactive: true})
	if err != nil {
		t.Fatal(err)
	}
	tokens := &config.Org{Budget: map[string]config.Budget{"yuko": {TokensDaily: 1000}}}
	daily := &config.Org{Budget: map[string]config.Budget{"yuko": {Daily: 1, Bytes: 1 << 20}}}
	m := NewMeter(y, func(err error) { t.Error(err) })
	m.Add(Entry{Imp: "yuko", Kind: Tokens, Task: pro, Model: "gpt-5", InputTokens: 10, OutputTokens: 10})
	m.Sync()
	if err := Check(y, tokens, "yuko", true, now); err != nil {
		t.Fatalf("20 tokens of 1000: %v", err)
	}
	m.Add(Entry{Imp: "yuko", Kind: Tokens, Task: pro, Model: "local", UnknownUsage: true})
	m.Sync()
	if err := Check(y, tokens, "yuko", true, now); !errors.Is(err, ErrOverBudget) || !strings.Contains(err.Error(), "imp yuko made 1 model call(s) on proactive work whose usage could not be read") {
		t.Errorf("tokens_daily after a call of unknown usage: %v", err)
	}
	if err := Check(y, daily, "yuko", true, now); err != nil {
		t.Errorf("daily after a call of an unpriced model of unknown usage: %v", err)
	}
	m.Add(Entry{Imp: "yuko", Kind: Tokens, Task: pro, Model: "gpt-5", UnknownUsage: true, UnknownCost: true})
	m.Sync()
	if err := Check(y, daily, "yuko", true, now); !errors.Is(err, ErrOverBudget) || !strings.Contains(err.Error(), "made 1 priced model call(s)") {
		t.Errorf("daily after a priced call of unknown usage: %v", err)
	}
	if err := Check(y, tokens, "yuko", false, now); err != nil {
		t.Errorf("owner work held: %v", err)
	}
	if err := Check(y, tokens, "yuko", true, now.Add(24*time.Hour)); err != nil {
		t.Errorf("the next UTC day held: %v", err)
	}
}

// Spent, asked again and again in one process, reads what was appended
// since it last looked (an action of a gate already counted stays counted
// once), and reads again from the start a ledger replaced, or one cut
// short, and a day it was not following.
func TestSpentFollowsTheLedger(t *testing.T) {
	y := yardtest.New(t)
	now := testclock.Freeze(t, &Now)
	debit := func(e Entry) {
		t.Helper()
		e.Imp, e.Class = "yuko", Proactive
		if err := Debit(y, e); err != nil {
			t.Fatal(err)
		}
	}
	spent := func(at time.Time) Totals {
		t.Helper()
		s, err := Spent(y, "yuko", at)
		if err != nil {
			t.Fatal(err)
		}
		return s[Proactive]
	}
	if got := spent(now); got != (Totals{}) {
		t.Fatalf("no ledger: %+v", got)
	}
	debit(Entry{Kind: Action, Gate: "g-0000000000000001", Cost: 1})
	debit(Entry{Kind: Bytes, Bytes: 10, TS: now.Add(-24 * time.Hour)})
	if got := spent(now); got.Cost != 1 || got.Bytes != 0 {
		t.Fatalf("first look: %+v", got)
	}
	debit(Entry{Kind: Action, Gate: "g-0000000000000001", Cost: 1})
	debit(Entry{Kind: Action, Gate: "g-0000000000000002", Cost: 2})
	debit(Entry{Kind: Bytes, Bytes: 5})
	if got := spent(now); got.Cost != 3 || got.Bytes != 5 {
		t.Fatalf("after appends: %+v, want cost 3 (gate 1 once) and 5 bytes", got)
	}
	if got := spent(now.Add(-24 * time.Hour)); got.Cost != 0 || got.Bytes != 10 {
		t.Fatalf("yesterday: %+v", got)
	}
	if got := spent(now); got.Cost != 3 || got.Bytes != 5 {
		t.Fatalf("today again: %+v", got)
	}

	// Replaced by hand with a longer ledger: what it holds now.
	p := y.Path("ledger", "yuko.jsonl")
	line := `{"schema":"impyard.ledger/1","ts":"` + now.UTC().Format(time.RFC3339) + `","imp":"yuko","kind":"bytes","class":"proactive","bytes":7}` + "\n"
	if err := os.WriteFile(p+".new", []byte(strings.Repeat(line, 20)), 0o640); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(p+".new", p); err != nil {
		t.Fatal(err)
	}
	if got := spent(now); got.Cost != 0 || got.Bytes != 140 {
		t.Fatalf("after the ledger was replaced: %+v", got)
	}
	// Cut short in place.
	if err := os.Truncate(p, int64(len(line))); err != nil {
		t.Fatal(err)
	}
	if got := spent(now); got.Bytes != 7 {
		t.Fatalf("after the ledger was cut short: %+v", got)
	}
}
