package gatewayd

import (
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/impyard/impyard/internal/testclock"
	"github.com/impyard/impyard/lib/config"
	"github.com/impyard/impyard/lib/gateway"
	"github.com/impyard/impyard/lib/ledger"
	"github.com/impyard/impyard/lib/queue"
	"github.com/impyard/impyard/lib/yard"
	"github.com/impyard/impyard/lib/yard/yardtest"
)

// Model calls of proactive work are admitted while under budget, refused
// past it and while org.toml does not load; owner work always passes.
// Tokens are priced and classed as they are metered.
func TestSpendAndAdmit(t *testing.T) {
	y := yardtest.New(t)
	now := testclock.Freeze(t, &ledger.Now)
	var ids []string
	for _, proactive := range []bool{false, true} {
		id, _, err := queue.Add(y, queue.AddOptions{Imp: "yuko", Text: "work", Proactive: proactive})
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, id)
	}
	owner, pro := ids[0], ids[1]
	writeOrg := func(s string) {
		if err := os.WriteFile(y.Path("org.toml"), []byte(s), 0o640); err != nil {
			t.Fatal(err)
		}
	}
	writeOrg("[budget.yuko]\ntokens_daily = 1000\n[prices.\"gpt-5\"]\ninput = 1.0\noutput = 2.0\n")
	var logged []string
	m := ledger.NewMeter(y, func(err error) { t.Error(err) })
	meter := spend(loadOrg(y), m, func(f string, a ...any) { logged = append(logged, f) })
	ok := admitter(y, m)
	if err := ok("yuko", pro); err != nil {
		t.Fatalf("under budget: %v", err)
	}
	meter(gateway.Spend{Subject: "yuko", Task: owner, Bytes: 10, Usage: &gateway.Usage{Model: "gpt-5", InputTokens: 5000, OutputTokens: 5000}})
	meter(gateway.Spend{Subject: "yuko", Task: pro, Usage: &gateway.Usage{Model: "gpt-5", InputTokens: 600, OutputTokens: 400}})
	if err := ok("yuko", pro); !errors.Is(err, ledger.ErrOverBudget) {
		t.Errorf("1000 proactive tokens of 1000: %v", err)
	}
	if err := ok("yuko", owner); err != nil {
		t.Errorf("owner work refused: %v", err)
	}
	writeOrg("[budget.yuko]\ntokens_dialy = 1000\n")
	if err := ok("yuko", pro); err == nil || !strings.Contains(err.Error(), "org.toml does not load") {
		t.Errorf("proactive work with a broken org.toml: %v", err)
	}
	if err := ok("yuko", owner); err != nil {
		t.Errorf("owner work refused for a broken org.toml: %v", err)
	}
	// A broken org.toml prices nothing, and loses no tokens.
	meter(gateway.Spend{Subject: "yuko", Task: pro, Usage: &gateway.Usage{Model: "gpt-5", InputTokens: 1, OutputTokens: 1}})
	m.Sync()
	if len(logged) != 1 || !strings.Contains(logged[0], "pricing") {
		t.Errorf("logged %q", logged)
	}
	var got []string
	since, until := ledger.Day(now)
	if err := ledger.Read(y, "yuko", since, until, func(e ledger.Entry) {
		got = append(got, fmt.Sprintf("%s/%s/%g", e.Kind, e.Class, e.Cost))
	}); err != nil {
		t.Fatal(err)
	}
	if want := "bytes/owner/0 tokens/owner/0.015 tokens/proactive/0.0014 tokens/proactive/0"; strings.Join(got, " ") != want {
		t.Errorf("ledger %s, want %s", strings.Join(got, " "), want)
	}
}

// A metered call whose usage the gateway could not read is of unknown
// cost when its model is priced, or unnamed while some model is; past
// one such proactive call, a daily cap refuses the next.
func TestUnknownUsageCost(t *testing.T) {
	y := yardtest.New(t)
	now := testclock.Freeze(t, &ledger.Now)
	pro, _, err := queue.Add(y, queue.AddOptions{Imp: "yuko", Text: "work", Proactive: true})
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(y.Path("org.toml"), []byte("[budget.yuko]\ndaily = 5.0\n[prices.\"gpt-5\"]\ninput = 1.0\noutput = 2.0\n"), 0o640); err != nil {
		t.Fatal(err)
	}
	m := ledger.NewMeter(y, func(err error) { t.Error(err) })
	meter := spend(loadOrg(y), m, func(f string, a ...any) { t.Errorf(f, a...) })
	ok := admitter(y, m)
	meter(gateway.Spend{Subject: "yuko", Task: pro, Usage: &gateway.Usage{Model: "local", Unknown: true}})
	if err := ok("yuko", pro); err != nil {
		t.Fatalf("after an unpriced call of unknown usage: %v", err)
	}
	meter(gateway.Spend{Subject: "yuko", Task: pro, Usage: &gateway.Usage{Unknown: true}})
	meter(gateway.Spend{Subject: "yuko", Task: pro, Usage: &gateway.Usage{Model: "gpt-5", Unknown: true}})
	if err := ok("yuko", pro); !errors.Is(err, ledger.ErrOverBudget) || !strings.Contains(err.Error(), "made 2 priced model call(s)") {
		t.Errorf("after priced calls of unknown usage: %v", err)
	}
	var got []string
	since, until := ledger.Day(now)
	if err := ledger.Read(y, "yuko", since, until, func(e ledger.Entry) {
		got = append(got, fmt.Sprintf("%s:%t:%t", e.Model, e.UnknownUsage, e.UnknownCost))
	}); err != nil {
		t.Fatal(err)
	}
	if want := "local:true:false :true:true gpt-5:true:true"; strings.Join(got, " ") != want {
		t.Errorf("ledger %s, want %s", strings.Join(got, " "), want)
	}
}

// admitter asks a fresh admission about calls without a body, ending
// each admitted one at once.
func admitter(y *yard.Yard, m *ledger.Meter) func(imp, task string) error {
	a := &admission{y: y, org: loadOrg(y), meter: m, now: ledger.Now, imps: map[string]*inflight{}}
	n := 0
	return func(imp, task string) error {
		n++
		end, err := a.admit(gateway.Call{Subject: imp, Task: task, ID: fmt.Sprintf("call-%d", n)})
		if end != nil {
			end()
		}
		return err
	}
}

// Calls admitted at once under tokens_daily pass only while their
// reservations fit; past inflight calls out, one more is refused until a
// call ends. A refusal that calls in flight can lift retries in 5s; one
// they cannot, at the next UTC midnight.
func TestAdmitReserves(t *testing.T) {
	y := yardtest.New(t)
	pro, _, err := queue.Add(y, queue.AddOptions{Imp: "yuko", Text: "work", Proactive: true})
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(y.Path("org.toml"), []byte("[budget.yuko]\ntokens_daily = 1000\ninflight = 2\n"), 0o640); err != nil {
		t.Fatal(err)
	}
	now := time.Date(2026, 12, 2, 10, 0, 0, 0, time.UTC)
	a := &admission{y: y, org: loadOrg(y), meter: ledger.NewMeter(y, func(err error) { t.Error(err) }), now: func() time.Time { return now }, imps: map[string]*inflight{}}
	call := func(id string, max int) (func(), error) {
		return a.admit(gateway.Call{Subject: "yuko", Task: pro, ID: id, Body: []byte(fmt.Sprintf(`{"max_tokens":%d}`, max))})
	}
	retry := func(err error) time.Duration {
		t.Helper()
		at, ok := gateway.RetryTime(err)
		if !ok {
			t.Fatalf("no Retry-After: %v", err)
		}
		return at.Sub(now)
	}
	end1, err := call("c1", 400) // 400 + 5 for its 18 bytes
	if err != nil {
		t.Fatal(err)
	}
	if _, err := call("c2", 600); !errors.Is(err, ledger.ErrOverBudget) || retry(err) != 5*time.Second {
		t.Fatalf("405 + 605 of 1000 with a call in flight: %v", err)
	}
	end2, err := call("c3", 500)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := call("c4", 1); !errors.Is(err, ErrInflight) || retry(err) != 5*time.Second {
		t.Fatalf("a third call with inflight 2: %v", err)
	}
	end1()
	end2()
	// Never settled (a crash cut them off): 910 stays counted.
	if _, err := call("c5", 100); !errors.Is(err, ledger.ErrOverBudget) || retry(err) != 14*time.Hour {
		t.Fatalf("910 + 105 of 1000 with nothing in flight: %v", err)
	}
}

// TestPricingLogOneLine: the model a pricing error names is the
// upstream's word; it is logged escaped, on the error's one line.
func TestPricingLogOneLine(t *testing.T) {
	y := yardtest.New(t)
	if err := os.WriteFile(y.Path("org.toml"), []byte("not toml ["), 0o640); err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	m := ledger.NewMeter(y, func(err error) { t.Error(err) })
	spend(loadOrg(y), m, lineLogger(&b))(gateway.Spend{Subject: "yuko", Usage: &gateway.Usage{Model: "gpt\r\x1b[2Kimpgw: policy loaded again\nimpgw: ok", InputTokens: 1}})
	m.Sync()
	got := b.String()
	if strings.Count(got, "\n") != 1 || strings.ContainsAny(got, "\r\x1b") ||
		!strings.HasPrefix(got, `impgw: error: pricing gpt\r\x1b[2Kimpgw: policy loaded again\nimpgw: ok tokens of yuko: `) {
		t.Errorf("logged %q, want one escaped line", got)
	}
}

// loadOrg reads y's org.toml afresh each time, as a Keeper does while the
// file is safe.
func loadOrg(y *yard.Yard) func() (*config.Org, error) {
	return func() (*config.Org, error) { return config.LoadOrg(y) }
}
