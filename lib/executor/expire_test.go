package executor

import (
	"context"
	"errors"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/impyard/impyard/internal/approvaltest"
	"github.com/impyard/impyard/internal/testclock"
	"github.com/impyard/impyard/lib/approval"
	"github.com/impyard/impyard/lib/gate"
	"github.com/impyard/impyard/lib/ledger"
	"github.com/impyard/impyard/lib/notify"
	"github.com/impyard/impyard/lib/state"
	"github.com/impyard/impyard/lib/store"
	"github.com/impyard/impyard/lib/yard/yardtest"
)

const expiringTOML = `[executors.message-user]
kind = "message-user"
expires = "1h"

[notify]
command = ["RECEIVE"]
on = ["gate-expiring"]
remind = "10m"
`

func fileMessage(t *testing.T, r *Runner, text string) *gate.Gate {
	t.Helper()
	g, err := gate.File(r.Yard, gate.FileOptions{Imp: "yuko", Intent: "message-user", Payload: []byte(`{"text":"` + text + `"}`), By: "yuko", Actor: "test"})
	if err != nil {
		t.Fatal(err)
	}
	return g
}

// eventsOf counts the imp's journal lines and audit lines of an event.
func eventsOf(t *testing.T, r *Runner, event, id string) (journal, audit int) {
	t.Helper()
	count := func(path string) int {
		b, _ := os.ReadFile(path)
		n := 0
		for _, line := range strings.Split(string(b), "\n") {
			if strings.Contains(line, `"event":"`+event+`"`) && strings.Contains(line, `"id":"`+id+`"`) {
				n++
			}
		}
		return n
	}
	return count(r.Yard.Path("journal", "yuko", "events.jsonl")), count(r.Yard.Path("runs", "decisions.jsonl"))
}

func expiringOf(ms []notify.Message) []notify.Message {
	var out []notify.Message
	for _, m := range ms {
		if m.Event == notify.GateExpiring {
			out = append(out, m)
		}
	}
	return out
}

// A filed gate is reminded of once, remind before its executor's
// deadline, by this runner or a restarted one, and becomes expired at
// the deadline: a transition by the deadline, in the journal and the
// audit log, which no approval then undoes and nothing executes.
func TestExpireOnce(t *testing.T) {
	t0 := testclock.Freeze(t, &state.Now)
	r, received, _, _ := notifyRunner(t, expiringTOML)
	g := fileMessage(t, r, "meeting tomorrow")
	ctx := context.Background()

	if next := r.ExpireOnce(t0); !next.Equal(state.Second(t0).Add(50 * time.Minute)) {
		t.Errorf("next wake %s, want the reminder at %s", next, state.Second(t0).Add(50*time.Minute))
	}
	r.NotifyOnce(ctx, t0)
	if got := expiringOf(receivedMessages(t, received)); len(got) != 0 {
		t.Fatalf("reminded 50m early: %+v", got)
	}
	at := state.Second(t0).Add(50 * time.Minute)
	if next := r.ExpireOnce(at); !next.Equal(state.Second(t0).Add(time.Hour)) {
		t.Errorf("next wake %s, want the deadline", next)
	}
	r.ExpireOnce(at.Add(time.Minute))
	for range 2 {
		if err := r.NotifyOnce(ctx, at.Add(time.Minute)); err != nil {
			t.Fatal(err)
		}
	}
	restarted := &Runner{Yard: r.Yard, Home: r.Home, Logf: t.Logf}
	restarted.ExpireOnce(at.Add(2 * time.Minute))
	restarted.NotifyOnce(ctx, at.Add(2*time.Minute))
	got := expiringOf(receivedMessages(t, received))
	if len(got) != 1 || got[0].Gate != g.ID || got[0].ID != g.ID+".expiring" || !strings.Contains(got[0].Reason, "expires undecided at ") || got[0].Approve == "" {
		t.Fatalf("gate-expiring messages %+v, want one for %s", got, g.ID)
	}
	if g, _ := gate.Get(r.Yard, g.ID); g.State != state.Filed || g.Reminded == nil {
		t.Fatalf("after the reminder: %+v", g)
	}

	state.Now = func() time.Time { return t0.Add(time.Hour) }
	if next := restarted.ExpireOnce(t0.Add(time.Hour)); !next.IsZero() {
		t.Errorf("next wake %s after the last deadline, want none", next)
	}
	e, err := gate.Get(r.Yard, g.ID)
	if err != nil || e.State != state.Expired {
		t.Fatalf("at the deadline: %v %v, want expired", e, err)
	}
	if h := e.History[len(e.History)-1]; h.By != gate.ExpiredBy || h.Actor != Actor || !strings.Contains(h.Why, "nobody approved or denied it") {
		t.Errorf("expiry recorded as %+v", h)
	}
	if j, a := eventsOf(t, r, "gate-expired", g.ID); j != 1 || a != 1 {
		t.Errorf("gate-expired in the journal %d times and the audit log %d, want once each", j, a)
	}

	key, err := approval.Generate("owner")
	if err != nil {
		t.Fatal(err)
	}
	_, _, err = gate.Decide(r.Yard, g.ID, gate.Change{To: state.Approved, By: "alice", Signer: key}, nil)
	if !errors.Is(err, gate.ErrExpired) || !strings.Contains(err.Error(), g.ID) {
		t.Errorf("approve of an expired gate: %v, want ErrExpired naming it", err)
	}
	if _, err := r.Execute(ctx, g.ID); err != nil {
		t.Logf("execute: %v", err)
	}
	if after, _ := gate.Get(r.Yard, g.ID); after.State != state.Expired || len(after.History) != len(e.History) || after.Approval != nil {
		t.Errorf("after approve and execute: %+v", after)
	}
	if n := notices(t, r); len(n) != 0 {
		t.Errorf("an expired gate was executed: %+v", n)
	}
}

// A deadline set at filing wins over the executor's; an approval past a
// deadline impexec has not acted on yet is refused all the same, and the
// gate stays filed for impexec to expire.
func TestApprovePastDeadline(t *testing.T) {
	t0 := testclock.Freeze(t, &state.Now)
	r := setup(t, "[executors.message-user]\nkind = \"message-user\"\nexpires = \"24h\"\n")
	g, err := gate.File(r.Yard, gate.FileOptions{Imp: "yuko", Intent: "message-user", Payload: []byte(`{"text":"x"}`), By: "yuko", Actor: "test", Expires: 2 * time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	org, err := r.Org()
	if err != nil {
		t.Fatal(err)
	}
	if d := g.Deadline(org); !d.Equal(state.Second(t0).Add(2 * time.Hour)) {
		t.Fatalf("deadline %s, want filing + 2h", d)
	}
	key, _ := approval.Generate("owner")
	state.Now = func() time.Time { return t0.Add(2 * time.Hour) }
	_, _, err = gate.Decide(r.Yard, g.ID, gate.Change{To: state.Approved, By: "alice", Signer: key, Deadline: func(g *gate.Gate) time.Time { return g.Deadline(org) }}, nil)
	if !errors.Is(err, gate.ErrExpired) {
		t.Fatalf("approve past the deadline: %v, want ErrExpired", err)
	}
	if after, _ := gate.Get(r.Yard, g.ID); after.State != state.Filed || after.Approval != nil || len(after.History) != 1 {
		t.Errorf("after the refused approval: %+v", after)
	}
	state.Now = func() time.Time { return t0.Add(time.Hour) }
	if _, _, err := gate.Decide(r.Yard, g.ID, gate.Change{To: state.Approved, By: "alice", Signer: key, Deadline: func(g *gate.Gate) time.Time { return g.Deadline(org) }}, nil); err != nil {
		t.Errorf("approve before the deadline: %v", err)
	}
}

// An approval signed at or after its gate's deadline is never executed,
// whoever made it: the desk, or an approver whose org.toml did not load,
// approves without looking at the deadline, and impexec compares the
// approval's signed time with the deadline counted from the signed filing
// time. A deadline set at filing is signed with the approval, so a writer
// of the yard who lengthens it afterwards breaks the approval instead.
func TestExecuteRefusesAnApprovalPastItsDeadline(t *testing.T) {
	t0 := testclock.Freeze(t, &state.Now)
	r := setup(t, "[executors.message-user]\nkind = \"message-user\"\nexpires = \"1h\"\n")
	ctx := context.Background()
	late := fileMessage(t, r, "meeting tomorrow")
	own, err := gate.File(r.Yard, gate.FileOptions{Imp: "yuko", Intent: "message-user", Payload: []byte(`{"text":"a week to decide"}`), By: "yuko", Actor: "test", Expires: 7 * 24 * time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	short, err := gate.File(r.Yard, gate.FileOptions{Imp: "yuko", Intent: "message-user", Payload: []byte(`{"text":"ninety minutes"}`), By: "yuko", Actor: "test", Expires: 90 * time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	state.Now = func() time.Time { return t0.Add(2 * time.Hour) }
	for _, g := range []*gate.Gate{late, own, short} {
		approvaltest.Approve(t, r.Yard, r.Home, g.ID)
	}
	// The writer of the yard gives the short gate the week the other has.
	edited, err := gate.Get(r.Yard, short.ID)
	if err != nil {
		t.Fatal(err)
	}
	week := state.Second(t0).Add(7 * 24 * time.Hour)
	edited.Expires = &week
	b, _ := store.Encode(edited)
	if err := os.WriteFile(r.Yard.Path("gates", "resolved", short.ID+".json"), b, 0o644); err != nil {
		t.Fatal(err)
	}

	out, err := r.Execute(ctx, late.ID)
	if err != nil || out.State != state.Failed || !strings.Contains(lastWhy(out), "deadline") || !strings.Contains(lastWhy(out), "nothing was sent") {
		t.Errorf("an approval two hours after a filing that expires in one: %v, %v; want failed past its deadline, nothing sent", out, err)
	}
	out, err = r.Execute(ctx, short.ID)
	if err != nil || out.State != state.Failed || !strings.Contains(lastWhy(out), "does not verify") {
		t.Errorf("a deadline lengthened after the approval: %v, %v; want failed, approval does not verify", out, err)
	}
	if n := notices(t, r); len(n) != 0 {
		t.Errorf("a late approval was executed: %+v", n)
	}
	out, err = r.Execute(ctx, own.ID)
	if err != nil || out.State != state.Executed {
		t.Errorf("an approval within the week its filing gave it: %v, %v; want executed", out, err)
	}
}

// Run expires at start a gate whose deadline passed while impexec was
// down, and later one whose deadline comes while it runs, woken by its
// timer (the rescan is an hour away).
func TestRunExpires(t *testing.T) {
	t0 := testclock.Freeze(t, &state.Now)
	r := setup(t, "[executors.message-user]\nkind = \"message-user\"\nexpires = \"1h\"\n")
	down := fileMessage(t, r, "filed before the weekend")
	state.Now = func() time.Time { return t0.Add(61 * time.Minute) }
	soon, err := gate.File(r.Yard, gate.FileOptions{Imp: "yuko", Intent: "message-user", Payload: []byte(`{"text":"soon"}`), By: "yuko", Actor: "test", Expires: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	began := time.Now()
	state.Now = func() time.Time { return t0.Add(61 * time.Minute).Add(time.Since(began)) }
	runUntil(t, r, time.Hour, 1, "both gates expired", func() bool {
		a, _ := gate.Get(r.Yard, down.ID)
		b, _ := gate.Get(r.Yard, soon.ID)
		return a != nil && a.State == state.Expired && b != nil && b.State == state.Expired
	})
}

// The budget warning is written once per imp and UTC day, when proactive
// spend passes warn of a cap, whoever asks again (a restarted impexec);
// the next day it can come again.
func TestWarnOncePerDay(t *testing.T) {
	now := testclock.Freeze(t, &ledger.Now)
	r, received, _, _ := notifyRunner(t, "[budget.yuko]\ntokens_daily = 1000\nwarn = 0.8\n\n[notify]\ncommand = [\"RECEIVE\"]\non = [\"budget-warning\"]\n")
	ctx := context.Background()
	spend := func(at time.Time, tokens int64) {
		t.Helper()
		if err := ledger.Debit(r.Yard, ledger.Entry{TS: at, Imp: "yuko", Kind: ledger.Tokens, Class: ledger.Proactive, InputTokens: tokens}); err != nil {
			t.Fatal(err)
		}
	}
	warnings := func() []notify.Message {
		var out []notify.Message
		for _, m := range receivedMessages(t, received) {
			if m.Event == notify.BudgetWarning {
				out = append(out, m)
			}
		}
		return out
	}
	spend(now, 790)
	r.NotifyOnce(ctx, now)
	if got := warnings(); len(got) != 0 {
		t.Fatalf("warned at 79%%: %+v", got)
	}
	spend(now, 20)
	for range 2 {
		r.NotifyOnce(ctx, now)
	}
	restarted := &Runner{Yard: r.Yard, Home: r.Home, Logf: t.Logf}
	spend(now, 100)
	restarted.NotifyOnce(ctx, now)
	got := warnings()
	if len(got) != 1 || got[0].Imp != "yuko" || !strings.Contains(got[0].Reason, "used 810 of its daily 1000 model tokens") || !strings.Contains(got[0].Reason, "81% of tokens_daily") {
		t.Fatalf("warnings %+v, want one at 81%%", got)
	}
	tomorrow := now.Add(24 * time.Hour)
	spend(tomorrow, 500)
	restarted.NotifyOnce(ctx, tomorrow)
	if got := warnings(); len(got) != 1 {
		t.Fatalf("warned at 50%% the next day: %+v", got)
	}
	spend(tomorrow, 400)
	restarted.NotifyOnce(ctx, tomorrow)
	if got := warnings(); len(got) != 2 || got[1].ID == got[0].ID {
		t.Errorf("warnings %+v, want a second on the next day", got)
	}
}

// BenchmarkExpireOnce is one pass of the expiry timer over 500 pending
// gates with deadlines, none due; BenchmarkListPending, the listing it
// rests on, is its baseline: the ratio says what the pass adds to it.
func BenchmarkExpireOnce(b *testing.B) {
	r, now := pendingYard(b, 500)
	b.ResetTimer()
	for range b.N {
		if next := r.ExpireOnce(now); next.IsZero() {
			b.Fatal("no deadline ahead")
		}
	}
}

func BenchmarkListPending(b *testing.B) {
	r, _ := pendingYard(b, 500)
	b.ResetTimer()
	for range b.N {
		if gates, _ := gate.List(r.Yard, gate.Filter{}); len(gates) != 500 {
			b.Fatal(len(gates))
		}
	}
}

func pendingYard(b *testing.B, n int) (*Runner, time.Time) {
	y := yardtest.New(b)
	os.WriteFile(y.Path("org.toml"), []byte("[executors.message-user]\nkind = \"message-user\"\nexpires = \"48h\"\n"), 0o640)
	r := &Runner{Yard: y, Home: b.TempDir()}
	for i := range n {
		if _, err := gate.File(y, gate.FileOptions{Imp: "yuko", Intent: "message-user", Payload: []byte(`{"text":"` + strconv.Itoa(i) + `"}`), By: "yuko", Actor: "bench"}); err != nil {
			b.Fatal(err)
		}
	}
	return r, time.Now()
}
