package ledger

import (
	"errors"
	"testing"
	"time"

	"github.com/impyard/impyard/lib/config"
	"github.com/impyard/impyard/lib/yard/yardtest"
)

func TestBudget(t *testing.T) {
	y := yardtest.New(t)
	org := &config.Org{Budget: map[string]config.Budget{"yuko": {Daily: 1.0}}}
	now := time.Now()
	for _, e := range []Entry{
		{Imp: "yuko", Kind: Action, Gate: "g-0000000000000001", Cost: 0.6},
		{Imp: "yuko", Kind: Action, Gate: "g-0000000000000001", Cost: 0.6}, // a resumed execution
		{Imp: "yuko", Kind: Action, Gate: "g-0000000000000002", Cost: 0.3, TS: now.Add(-48 * time.Hour)},
		{Imp: "yuko", Kind: Bytes, Bytes: 100},
	} {
		if err := Debit(y, e); err != nil {
			t.Fatal(err)
		}
	}
	cost, bytes, err := Spent(y, "yuko", now)
	if err != nil || cost != 0.6 || bytes != 100 {
		t.Fatalf("spent %v %v %v, want 0.6 and 100", cost, bytes, err)
	}
	if err := Check(y, org, "yuko", true, now); err != nil {
		t.Errorf("under budget refused: %v", err)
	}
	Debit(y, Entry{Imp: "yuko", Kind: Action, Gate: "g-0000000000000003", Cost: 0.5})
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
