package ledger

import (
	"testing"
	"time"

	"github.com/impyard/impyard/lib/config"
	"github.com/impyard/impyard/lib/yard/yardtest"
)

// A call's reservation counts as spent from its Call entry until the
// entry settling it, which counts what the call used instead; a call
// never settled (cut off by a crash) stays counted at its reservation,
// and Passes counts a new reservation on top of them all.
func TestReservationsCount(t *testing.T) {
	y := yardtest.New(t)
	m := NewMeter(y, func(err error) { t.Error(err) })
	open := func(call string, in, out int64) {
		t.Helper()
		if err := m.Open(Entry{Imp: "yuko", Task: "", Call: call, InputTokens: in, OutputTokens: out, Bytes: 7}); err != nil {
			t.Fatal(err)
		}
	}
	spent := func() Totals {
		t.Helper()
		m.Sync()
		s, err := Spent(y, "yuko", time.Now())
		if err != nil {
			t.Fatal(err)
		}
		// An empty task is owner work: the class the entries took.
		return s[Owner]
	}
	open("a", 10, 1000)
	open("b", 10, 1000)
	open("c", 10, 1000)
	if s := spent(); s.Tokens() != 3030 || s.Bytes != 21 || s.Open != 3 {
		t.Fatalf("three open calls: %+v", s)
	}
	m.Add(Entry{Imp: "yuko", Kind: Tokens, Call: "a", InputTokens: 12, OutputTokens: 300})
	m.Add(Entry{Imp: "yuko", Kind: Settle, Call: "b"})
	m.Add(Entry{Imp: "yuko", Kind: Settle, Call: "unknown"}) // its call is of another day
	if s := spent(); s.Tokens() != 312+1010 || s.Bytes != 7 || s.Open != 1 {
		t.Fatalf("one settled by its usage, one without, one open: %+v", s)
	}
	b := config.Budget{TokensDaily: 2000}
	if why := Passes(b, spent(), Entry{InputTokens: 10, OutputTokens: 668}); why != "" {
		t.Errorf("1322 + 678 of 2000 refused: %s", why)
	}
	if why := Passes(b, spent(), Entry{InputTokens: 10, OutputTokens: 669}); why == "" {
		t.Errorf("1322 + 679 of 2000 passed")
	}
	var read []string
	since, until := Day(time.Now())
	if err := Read(y, "yuko", since, until, func(e Entry) { read = append(read, e.Kind) }); err != nil {
		t.Fatal(err)
	}
	if len(read) != 1 || read[0] != Tokens {
		t.Errorf("Read passed %q, want the one tokens entry: reservations are not spend", read)
	}
}
