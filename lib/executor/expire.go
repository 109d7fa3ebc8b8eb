package executor

import (
	"context"
	"fmt"
	"time"

	"github.com/impyard/impyard/lib/config"
	"github.com/impyard/impyard/lib/gate"
	"github.com/impyard/impyard/lib/state"
)

// expire keeps the filed gates' deadlines until ctx is done: every gate
// past its deadline becomes expired and every reminder due is written
// (gate.Expire, gate.Remind), and then it sleeps on one timer until the
// earliest deadline or reminder still ahead, or until wake says a gate
// or org.toml changed. It reads the clock through state.Now, so a gate
// that expired while impexec was down is expired at the first pass.
func (r *Runner) expire(ctx context.Context, wake <-chan struct{}) {
	timer := time.NewTimer(0)
	defer timer.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-timer.C:
		case <-wake:
		}
		next := r.ExpireOnce(state.Now())
		timer.Stop()
		if !next.IsZero() {
			timer.Reset(max(next.Sub(state.Now()), 0))
		}
	}
}

// ExpireOnce expires every filed gate past its deadline at now and writes
// every reminder due, and returns the earliest deadline or reminder still
// ahead (zero for none). Without a readable org.toml only the deadlines
// set at filing count.
func (r *Runner) ExpireOnce(now time.Time) (next time.Time) {
	org, err := r.Org()
	if err != nil {
		org = nil
	}
	gates, bad := gate.List(r.Yard, gate.Filter{})
	for _, err := range bad {
		r.logf("expiry: %v", err)
	}
	later := func(t time.Time) {
		if !t.IsZero() && (next.IsZero() || t.Before(next)) {
			next = t
		}
	}
	for _, g := range gates {
		if g.Due(org, now) {
			ng, err := gate.Expire(r.Yard, g.ID, org, now, Actor)
			if err != nil {
				r.logf("gate %s: expiring it: %v", g.ID, err)
				later(now.Add(time.Second))
			} else if ng.State == state.Expired {
				r.logf("gate %s expired undecided", g.ID)
			}
			continue
		}
		if due := g.ReminderDue(org); !due.IsZero() && !now.Before(due) {
			if _, err := gate.Remind(r.Yard, g.ID, org, now); err != nil {
				r.logf("gate %s: %v", g.ID, err)
				later(now.Add(time.Second))
			}
		} else {
			later(due)
		}
		later(g.Deadline(org))
	}
	return next
}

// late says why g's verified approval is not executed: it was signed at
// or after the gate's deadline, counted from the signed filing time by
// the executor's expires in org, or the deadline set at filing, which the
// approval signs as well. "" when it was in time. An approver that
// checks the deadline never makes such an approval; one that did not
// look (an impgate whose org.toml did not load) is caught here, on fields
// a writer of the yard cannot change.
func late(g *gate.Gate, org *config.Org) string {
	d := g.Deadline(org)
	if d.IsZero() || g.Approval == nil || g.Approval.At.Before(d) {
		return ""
	}
	return fmt.Sprintf("%s: approved at %s, at or after its deadline %s (filed %s)", gate.ErrExpired,
		g.Approval.At.UTC().Format(time.RFC3339), d.UTC().Format(time.RFC3339), g.Created.UTC().Format(time.RFC3339))
}
