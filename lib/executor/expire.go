package executor

import (
	"context"
	"time"

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
