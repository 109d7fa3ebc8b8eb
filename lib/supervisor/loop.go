package supervisor

import (
	"context"
	"time"

	"github.com/impyard/impyard/lib/gate"
	"github.com/impyard/impyard/lib/pause"
	"github.com/impyard/impyard/lib/queue"
	"github.com/impyard/impyard/lib/state"
)

// Run recovers, then passes whenever the queue or the gates change (and on
// a slow timer, which also keeps schedules on time), until ctx ends. The
// watchers' scan at start brings the first pass, after which it calls
// Ready. Boxes
// still running then are left to containerd; the next start adopts them.
func (s *Supervisor) Run(ctx context.Context, rescan time.Duration) error {
	s.init()
	if err := s.Recover(ctx); err != nil {
		return err
	}
	first := true
	pass := func() {
		if _, err := s.Pass(ctx); err != nil {
			s.logf("%v", err)
		}
		if first && s.Ready != nil {
			s.Ready()
		}
		first = false
	}
	trigger := make(chan struct{}, 1)
	kick := func() {
		select {
		case trigger <- struct{}{}:
		default:
		}
	}
	go func() {
		for {
			select {
			case <-ctx.Done():
				return
			case <-s.wake:
				kick()
			}
		}
	}()
	warn := func(err error) { s.logf("watch: %v", err) }
	go queue.Watch(ctx, s.Yard, "", rescan, func(queue.Event) { kick() }, warn)
	// A pause or resume brings a pass, which applies it and acknowledges.
	go func() {
		if err := pause.Watch(ctx, s.Yard, rescan, func(*pause.State, error) { kick() }, warn); err != nil {
			warn(err)
		}
	}()
	go gate.Watch(ctx, s.Yard, rescan, gate.Handler{
		Gate: func(g *gate.Gate) {
			if g.State != state.Filed {
				kick()
			}
		},
		Rescan: kick,
		Error:  warn,
	})
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-trigger:
			// No settling delay: a pass is idempotent, and the events of a
			// burst that arrive while it runs wait in trigger's one slot
			// for a single pass after it, so a task added alone starts
			// at once.
			pass()
		}
	}
}

// Once recovers, makes one pass, waits for the boxes it watches to end
// and be accounted for, and settles what they left (reviews whose gates
// finished, continuations), starting nothing more: for cron and tests.
func (s *Supervisor) Once(ctx context.Context) (int, error) {
	s.init()
	if err := s.Recover(ctx); err != nil {
		return 0, err
	}
	n, err := s.Pass(ctx)
	s.Wait()
	s.reviews()
	return n, err
}
