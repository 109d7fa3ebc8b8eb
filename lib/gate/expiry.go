package gate

import (
	"errors"
	"fmt"
	"time"

	"github.com/impyard/impyard/lib/config"
	"github.com/impyard/impyard/lib/id"
	"github.com/impyard/impyard/lib/notify"
	"github.com/impyard/impyard/lib/state"
	"github.com/impyard/impyard/lib/store"
	"github.com/impyard/impyard/lib/yard"
)

// ErrExpired is an approval asked of a gate nobody decided before its
// deadline: it is expired, or would be now, and nothing is approved.
var ErrExpired = errors.New("expired undecided")

// ExpiredBy is the decider an expiry records: the deadline, not a person,
// so an expired gate is never taken for one someone denied.
const ExpiredBy = "deadline"

// Deadline is when g, still undecided, expires: the time set at filing
// (impgate file --expires) or else its filing plus its executor's
// expires in org (nil org: org.toml did not load). Zero when neither
// says, and the gate waits for ever.
func (g *Gate) Deadline(org *config.Org) time.Time {
	if g.Expires != nil {
		return *g.Expires
	}
	if org == nil {
		return time.Time{}
	}
	if exe := org.Executors[g.Intent]; exe != nil && exe.Expires.Duration > 0 {
		return g.Created.Add(exe.Expires.Duration)
	}
	return time.Time{}
}

// Due says whether the filed gate g is past its deadline at now.
func (g *Gate) Due(org *config.Org, now time.Time) bool {
	d := g.Deadline(org)
	return g.State == state.Filed && !d.IsZero() && !now.Before(d)
}

// ReminderDue is when the owner is reminded of g, remind before its
// deadline; zero for a gate that has no deadline, is decided, or whose
// reminder is made.
func (g *Gate) ReminderDue(org *config.Org) time.Time {
	d := g.Deadline(org)
	if d.IsZero() || g.State != state.Filed || g.Reminded != nil || org == nil {
		return time.Time{}
	}
	return d.Add(-org.Notify.Remind.Duration)
}

// Expire moves gateID to expired, by ExpiredBy with actor as the program,
// when it is still filed and past its deadline at now, read again under
// the gates lock; a gate decided meanwhile, or not yet due, is returned
// as it is. The move is a transition like any other (lib/transition):
// its journal and audit records and its durability are theirs.
func Expire(y *yard.Yard, gateID string, org *config.Org, now time.Time, actor string) (*Gate, error) {
	g, err := Get(y, gateID)
	if err != nil || !g.Due(org, now) {
		return g, err
	}
	notDue := errors.New("not due")
	g, _, err = move(y, gateID, Change{To: state.Expired, By: ExpiredBy, Actor: actor,
		Edit: func(g *Gate) error {
			if !g.Due(org, now) {
				return notDue
			}
			return nil
		},
		why: func(g *Gate) string {
			return fmt.Sprintf("undecided at its deadline %s (filed %s); nobody approved or denied it", stamp(g.Deadline(org)), stamp(g.Created))
		}}, false, nil)
	if errors.Is(err, notDue) || errors.Is(err, state.ErrIllegal) {
		return Get(y, gateID)
	}
	return g, err
}

// Remind writes the owner's gate-expiring notification of gateID once its
// reminder is due at now (see ReminderDue) and marks the gate reminded,
// in one transaction under the gates lock: the outbox entry first, whose
// id is the gate's and which is written only once, then the mark, so a
// crash between them and a reminder asked again after a restart still
// tell the owner once. It reports whether this call marked it.
func Remind(y *yard.Yard, gateID string, org *config.Org, now time.Time) (bool, error) {
	if err := id.Check(id.Gate, gateID); err != nil {
		return false, err
	}
	s, err := gates(y)
	if err != nil {
		return false, err
	}
	marked := false
	err = s.Dir.Update(func(tx *store.Tx) error {
		g, err := Get(y, gateID)
		if err != nil {
			return err
		}
		due := g.ReminderDue(org)
		if due.IsZero() || now.Before(due) {
			return nil
		}
		if _, err := notify.Expiring(y, g.Imp, g.ID, now, config.Notifies); err != nil {
			return fmt.Errorf("gate %s: its reminder: %w", g.ID, err)
		}
		at := state.Second(now)
		g.Reminded = &at
		marked = true
		return write(tx, g)
	})
	return marked, err
}
