package gate

import (
	"errors"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/impyard/impyard/internal/testclock"
	"github.com/impyard/impyard/lib/config"
	"github.com/impyard/impyard/lib/id"
	"github.com/impyard/impyard/lib/notify"
	"github.com/impyard/impyard/lib/state"
	"github.com/impyard/impyard/lib/yard"
)

// expiringOrg gives email-send gates an hour and asks to hear of them
// ten minutes before.
func expiringOrg(t *testing.T, y *yard.Yard) *config.Org {
	t.Helper()
	toml := "[executors.email-send]\nkind = \"message-user\"\nexpires = \"1h\"\n\n" +
		"[notify]\ncommand = [\"true\"]\non = [\"gate-expiring\"]\nremind = \"10m\"\n"
	if err := os.WriteFile(config.OrgPath(y), []byte(toml), 0o640); err != nil {
		t.Fatal(err)
	}
	org, err := config.LoadOrg(y)
	if err != nil {
		t.Fatal(err)
	}
	return org
}

// A deadline set at filing wins over the executor's; an executor without
// expires, an intent without an executor and an org.toml that did not
// load leave a gate waiting for ever, and so without a reminder.
func TestDeadline(t *testing.T) {
	t0 := testclock.Freeze(t, &state.Now)
	y := newYard(t)
	org := expiringOrg(t, y)
	g := file(t, y, `{"n":1}`)
	created := state.Second(t0)
	if d := g.Deadline(org); !d.Equal(created.Add(time.Hour)) {
		t.Errorf("executor's deadline %s, want %s", d, created.Add(time.Hour))
	}
	if r := g.ReminderDue(org); !r.Equal(created.Add(50 * time.Minute)) {
		t.Errorf("reminder due %s, want ten minutes before the deadline", r)
	}
	if d, r := g.Deadline(nil), g.ReminderDue(nil); !d.IsZero() || !r.IsZero() {
		t.Errorf("no org: deadline %s, reminder %s; want none", d, r)
	}

	set, err := File(y, FileOptions{Imp: "yuko", Intent: "email-send", Payload: []byte(`{"n":2}`), By: "yuko", Actor: "test", Expires: 3 * time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range []*config.Org{org, nil} {
		if d := set.Deadline(o); !d.Equal(created.Add(3 * time.Hour)) {
			t.Errorf("deadline set at filing, org %v: %s, want %s", o != nil, d, created.Add(3*time.Hour))
		}
	}
	if r := set.ReminderDue(nil); !r.IsZero() {
		t.Errorf("no org, so no [notify]: reminder due %s, want none", r)
	}

	org.Executors["email-send"].Expires.Duration = 0
	other, err := File(y, FileOptions{Imp: "yuko", Intent: "post", Payload: []byte(`{"n":3}`), By: "yuko", Actor: "test"})
	if err != nil {
		t.Fatal(err)
	}
	for name, g := range map[string]*Gate{"executor without expires": g, "intent without executor": other} {
		if d, r := g.Deadline(org), g.ReminderDue(org); !d.IsZero() || !r.IsZero() {
			t.Errorf("%s: deadline %s, reminder %s; want none", name, d, r)
		}
		if g.Due(org, created.Add(1000*time.Hour)) {
			t.Errorf("%s: due", name)
		}
	}
}

// A filed gate is due at its deadline to the second, not before, and a
// gate decided or already reminded has no reminder due.
func TestDueAtTheDeadline(t *testing.T) {
	t0 := testclock.Freeze(t, &state.Now)
	y := newYard(t)
	org := expiringOrg(t, y)
	g := file(t, y, `{"n":1}`)
	deadline := state.Second(t0).Add(time.Hour)
	if g.Due(org, deadline.Add(-time.Nanosecond)) {
		t.Errorf("due before its deadline")
	}
	if !g.Due(org, deadline) || !g.Due(org, deadline.Add(time.Hour)) {
		t.Errorf("not due at or after its deadline")
	}

	reminded := *g
	at := state.Second(t0)
	reminded.Reminded = &at
	if r := reminded.ReminderDue(org); !r.IsZero() {
		t.Errorf("reminded gate: reminder due %s", r)
	}
	a, err := Move(y, g.ID, Change{To: state.Approved, Signer: testKey, By: "alice"})
	if err != nil {
		t.Fatal(err)
	}
	if a.Due(org, deadline) || !a.ReminderDue(org).IsZero() {
		t.Errorf("approved gate: due %v, reminder %s", a.Due(org, deadline), a.ReminderDue(org))
	}
}

// Expire leaves a gate not yet due, or decided, as it is, and moves a
// due one to expired by the deadline, recorded with its reason; an
// approval then names the expiry.
func TestExpire(t *testing.T) {
	t0 := testclock.Freeze(t, &state.Now)
	y := newYard(t)
	org := expiringOrg(t, y)
	g := file(t, y, `{"n":1}`)
	deadline := state.Second(t0).Add(time.Hour)

	if _, err := Expire(y, "g-nonsense", org, deadline, "test"); err == nil {
		t.Errorf("expire of a malformed id succeeded")
	}
	early, err := Expire(y, g.ID, org, deadline.Add(-time.Second), "test")
	if err != nil || early.State != state.Filed || len(early.History) != 1 {
		t.Fatalf("a second early: %+v, %v; want it filed", early, err)
	}
	e, err := Expire(y, g.ID, org, deadline, "impexec")
	if err != nil || e.State != state.Expired {
		t.Fatalf("at the deadline: %+v, %v; want expired", e, err)
	}
	h := e.History[len(e.History)-1]
	if h.By != ExpiredBy || h.Actor != "impexec" || !strings.Contains(h.Why, "nobody approved or denied it") {
		t.Errorf("expiry recorded as %+v", h)
	}
	if got, _ := Get(y, g.ID); got.State != state.Expired {
		t.Errorf("stored as %s", got.State)
	}
	again, err := Expire(y, g.ID, org, deadline.Add(time.Hour), "impexec")
	if err != nil || len(again.History) != len(e.History) {
		t.Errorf("expired again: %+v, %v", again, err)
	}
	_, err = Move(y, g.ID, Change{To: state.Approved, Signer: testKey, By: "alice"})
	if !errors.Is(err, ErrExpired) || !strings.Contains(err.Error(), g.ID) || !strings.Contains(err.Error(), h.Why) {
		t.Errorf("approval of an expired gate: %v, want ErrExpired with its reason", err)
	}

	d := file(t, y, `{"n":2}`)
	if _, err := Move(y, d.ID, Change{To: state.Denied, By: "alice"}); err != nil {
		t.Fatal(err)
	}
	if got, err := Expire(y, d.ID, org, deadline, "impexec"); err != nil || got.State != state.Denied {
		t.Errorf("expire of a denied gate: %+v, %v", got, err)
	}
}

// Remind writes the gate's one reminder once it is due and marks the
// gate; asked again, or too early, it writes nothing.
func TestRemind(t *testing.T) {
	t0 := testclock.Freeze(t, &state.Now)
	y := newYard(t)
	org := expiringOrg(t, y)
	g := file(t, y, `{"n":1}`)
	due := state.Second(t0).Add(50 * time.Minute)

	if marked, err := Remind(y, g.ID, org, due.Add(-time.Second)); err != nil || marked {
		t.Fatalf("a second early: %v, %v", marked, err)
	}
	if p, _ := notify.Pending(y); len(p) != 0 {
		t.Fatalf("reminded early: %+v", p)
	}
	marked, err := Remind(y, g.ID, org, due)
	if err != nil || !marked {
		t.Fatalf("when due: %v, %v", marked, err)
	}
	p, _ := notify.Pending(y)
	if len(p) != 1 || p[0].Event != notify.GateExpiring || p[0].Subject != g.ID {
		t.Fatalf("outbox %+v, want the gate's reminder", p)
	}
	if got, _ := Get(y, g.ID); got.Reminded == nil || !got.Reminded.Equal(due) || got.State != state.Filed {
		t.Errorf("after the reminder: %+v", got)
	}
	if marked, err := Remind(y, g.ID, org, due.Add(time.Minute)); err != nil || marked {
		t.Errorf("asked again: %v, %v", marked, err)
	}
	if p, _ := notify.Pending(y); len(p) != 1 {
		t.Errorf("outbox after asking again: %d entries", len(p))
	}
}

// Remind refuses a malformed or unknown id, and a reminder that cannot
// be written leaves the gate unmarked, to be reminded when it can.
func TestRemindRefuses(t *testing.T) {
	t0 := testclock.Freeze(t, &state.Now)
	y := newYard(t)
	org := expiringOrg(t, y)
	due := state.Second(t0).Add(50 * time.Minute)
	if _, err := Remind(y, "../x", org, due); err == nil {
		t.Errorf("malformed id reminded")
	}
	g := file(t, y, `{"n":1}`)
	missing := id.New(id.Gate)
	if _, err := Remind(y, missing, org, due); err == nil {
		t.Errorf("unknown gate %s reminded", missing)
	}

	if err := os.WriteFile(y.Path("outbox"), []byte("in the way"), 0o640); err != nil {
		t.Fatal(err)
	}
	marked, err := Remind(y, g.ID, org, due)
	if err == nil || marked || !strings.Contains(err.Error(), g.ID) {
		t.Errorf("outbox unwritable: %v, %v; want an error naming the gate", marked, err)
	}
	if got, _ := Get(y, g.ID); got.Reminded != nil {
		t.Errorf("marked reminded with no reminder written: %+v", got)
	}
	os.Remove(y.Path("outbox"))
	if marked, err := Remind(y, g.ID, org, due); err != nil || !marked {
		t.Errorf("once the outbox can be written: %v, %v", marked, err)
	}
}
