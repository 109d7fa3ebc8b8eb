package ledger

import (
	"errors"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/impyard/impyard/lib/config"
	"github.com/impyard/impyard/lib/yard/yardtest"
)

// A damaged ledger line (not JSON, or JSON that is not an entry) is
// reported with its file and line, and counted as reaching every cap of
// proactive work whatever the day asked for, since its day and cost
// cannot be read: it never lowers the spend. Owner work, and an imp
// without a budget, are not held by it.
func TestDamagedLineHoldsCaps(t *testing.T) {
	y := yardtest.New(t)
	now := time.Now()
	if err := Debit(y, Entry{Imp: "yuko", Kind: Bytes, Bytes: 10, Class: Proactive}); err != nil {
		t.Fatal(err)
	}
	p := y.Path("ledger", "yuko.jsonl")
	f, err := os.OpenFile(p, os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Fatal(err)
	}
	f.WriteString("{\"schema\":\"impyard.ledger/1\",\"ts\":\"2026-1\n{\"schema\":\"impyard.ledger/1\",\"ts\":7,\"cost\":\"a lot\"}\n")
	f.Close()
	if err := Debit(y, Entry{Imp: "yuko", Kind: Bytes, Bytes: 5, Class: Proactive}); err != nil {
		t.Fatal(err)
	}
	for _, b := range []config.Budget{{Daily: 100}, {Bytes: 1 << 20}, {TokensDaily: 1 << 20}} {
		org := &config.Org{Budget: map[string]config.Budget{"yuko": b}}
		for _, at := range []time.Time{now, now.Add(-72 * time.Hour)} {
			err := Check(y, org, "yuko", true, at)
			if !errors.Is(err, ErrOverBudget) || !strings.Contains(err.Error(), p+":2") || !strings.Contains(err.Error(), "2 damaged line(s)") {
				t.Errorf("budget %+v on %s with damaged lines 2 and 3: %v, want over budget naming %s:2", b, at.Format(time.DateOnly), err, p)
			}
		}
		if err := Check(y, org, "yuko", false, now); err != nil {
			t.Errorf("owner work held by a damaged line: %v", err)
		}
	}
	spent, err := Spent(y, "yuko", now)
	if err != nil {
		t.Fatal(err)
	}
	if got := spent[Proactive]; got.Bytes != 15 || got.Damaged != 2 || got.DamagedAt != p+":2" {
		t.Errorf("proactive %+v, want the 15 bytes read and 2 damaged lines from %s:2", got, p)
	}
	if got := spent[Owner]; got != (Totals{}) {
		t.Errorf("owner %+v, want nothing", got)
	}
	if err := Check(y, &config.Org{}, "yuko", true, now); err != nil {
		t.Errorf("an imp without a budget held: %v", err)
	}
}

// A model call of proactive work is opened with a line synced to the
// ledger before it is forwarded; the line costs nothing.
func TestOpenWritesACallLine(t *testing.T) {
	y := yardtest.New(t)
	m := NewMeter(y, func(err error) { t.Error(err) })
	if err := m.Open(Entry{Imp: "yuko"}); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(y.Path("ledger", "yuko.jsonl"))
	if err != nil || !strings.Contains(string(b), `"kind":"call"`) {
		t.Fatalf("ledger %q, %v; want a call line", b, err)
	}
	spent, err := Spent(y, "yuko", time.Now())
	if err != nil {
		t.Fatal(err)
	}
	for class, got := range spent {
		if got != (Totals{}) {
			t.Errorf("%s: a call line counted %+v", class, got)
		}
	}
	n := 0
	since, until := Day(time.Now())
	Read(y, "yuko", since, until, func(Entry) { n++ })
	if n != 0 {
		t.Errorf("Read passed %d call line(s), which cost nothing", n)
	}
	if err := m.Open(Entry{Imp: "../x"}); err == nil {
		t.Error("a call opened for a bad imp name")
	}
}

// Over holds every cap, and only a cap that is set, for damaged lines.
func TestOverDamaged(t *testing.T) {
	damaged := Totals{Damaged: 1, DamagedAt: "ledger/yuko.jsonl:4"}
	for _, b := range []config.Budget{{Daily: 1}, {Bytes: 1}, {TokensDaily: 1}} {
		if got := Over(b, damaged); !strings.Contains(got, "1 damaged line(s) in its ledger, the first at ledger/yuko.jsonl:4") {
			t.Errorf("Over(%+v) = %q", b, got)
		}
	}
	if got := Over(config.Budget{}, damaged); got != "" {
		t.Errorf("no budget: %q", got)
	}
	var sum Totals
	sum.Merge(Totals{Damaged: 2, DamagedAt: "a:1"})
	sum.Merge(Totals{Damaged: 1, DamagedAt: "b:9"})
	if sum.Damaged != 3 || sum.DamagedAt != "a:1" {
		t.Errorf("merged %+v, want 3 from a:1", sum)
	}
}
