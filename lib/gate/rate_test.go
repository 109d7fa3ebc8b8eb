package gate

import (
	"strings"
	"testing"
	"time"

	"github.com/impyard/impyard/lib/config"
	"github.com/impyard/impyard/lib/rate"
	"github.com/impyard/impyard/lib/state"
)

// An auto entry's rate counts the gates it approved of the imp in its
// period: past its N, the next gate is filed for a human, saying why;
// another entry's approvals, and gates a human approved, do not count.
func TestRateGatesForAHuman(t *testing.T) {
	y := newYard(t)
	auto := func(entry, payload string) *Gate {
		t.Helper()
		g, err := File(y, FileOptions{Imp: "yuko", Intent: "email-send", Payload: []byte(payload), By: "trust", Actor: "test",
			Approved: true, Signer: testKey, Trust: &Trust{Level: config.Auto, Entry: entry, Why: "trusted"},
			Rate: rate.Limit{N: 2, Period: time.Hour}})
		if err != nil {
			t.Fatal(err)
		}
		return g
	}
	human := file(t, y, `{"n":0}`)
	if _, err := Move(y, human.ID, Change{To: state.Approved, Signer: testKey, By: "alice"}); err != nil {
		t.Fatal(err)
	}
	auto("trust.toml:9", `{"n":9}`)
	for i, payload := range []string{`{"n":1}`, `{"n":2}`} {
		if g := auto("trust.toml:3", payload); g.State != state.Approved {
			t.Fatalf("auto-approval %d within the rate: %s", i+1, g.State)
		}
	}
	held := auto("trust.toml:3", `{"n":3}`)
	if held.State != state.Filed || held.Trust == nil || held.Trust.Level != config.Gate || held.Trust.Reason != RateReason ||
		!strings.Contains(held.Trust.Why, "2 auto-approvals of yuko") || held.Approval != nil {
		t.Errorf("third auto-approval in the hour: %s %+v", held.State, held.Trust)
	}
}
