package executor

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/impyard/impyard/lib/gate"
	"github.com/impyard/impyard/lib/pause"
	"github.com/impyard/impyard/lib/state"
)

// Run executes approved gates as they appear, until ctx is done: gate.Watch
// reports each gate written, a rescan every rescan interval catches anything
// missed, and at start it takes up every gate still approved or left
// executing by a dead executor, then calls Ready. At most workers gates
// run at once. Beside them it keeps the filed gates' deadlines (expire):
// the gates past theirs become expired, at start too, and the reminders
// due are written.
func (r *Runner) Run(ctx context.Context, rescan time.Duration, workers int) error {
	if workers < 1 {
		workers = 1
	}
	sem := make(chan struct{}, workers)
	var mu sync.Mutex
	inflight := map[string]bool{}
	var wg sync.WaitGroup
	defer wg.Wait()
	start := func(gateID string) {
		mu.Lock()
		if inflight[gateID] {
			mu.Unlock()
			return
		}
		inflight[gateID] = true
		mu.Unlock()
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() { mu.Lock(); delete(inflight, gateID); mu.Unlock() }()
			select {
			case sem <- struct{}{}:
			case <-ctx.Done():
				return
			}
			defer func() { <-sem }()
			if _, err := r.Execute(ctx, gateID); err != nil && !errors.Is(err, ErrBusy) {
				r.logf("gate %s: %v", gateID, err)
			}
		}()
	}
	r.recordSigners()
	wake := make(chan struct{}, 1)
	poke := func() {
		select {
		case wake <- struct{}{}:
		default:
		}
	}
	wg.Add(1)
	go func() { defer wg.Done(); r.expire(ctx, wake) }()
	// A resume releases the gates a pause held: take up every approved
	// gate again at once rather than at the next rescan.
	go func() {
		seen := -1
		err := pause.Watch(ctx, r.Yard, rescan, func(ps *pause.State, _ error) {
			if ps.Seq == seen {
				return
			}
			seen = ps.Seq
			gates, _ := gate.List(r.Yard, gate.Filter{All: true})
			for _, g := range gates {
				if g.State == state.Approved && ps.Of(g.Imp) == nil {
					start(g.ID)
				}
			}
		}, func(err error) { r.logf("watch: %v", err) })
		if err != nil {
			r.logf("watch: %v", err)
		}
	}()
	var ready sync.Once
	return gate.Watch(ctx, r.Yard, rescan, gate.Handler{
		Gate: func(g *gate.Gate) {
			if g.State == state.Approved || g.State == state.Executing {
				start(g.ID)
			}
			if g.State == state.Filed {
				poke()
			}
		},
		Rescan: func() {
			if err := gate.Repair(r.Yard); err != nil {
				r.logf("%v", err)
			}
			if org, err := r.Org(); err == nil {
				r.earnedAll(org)
			}
			r.recordSigners()
			r.sweepGrants()
			poke()
		},
		Scanned: func() {
			if r.Ready != nil {
				ready.Do(r.Ready)
			}
		},
		Error: func(err error) { r.logf("watch: %v", err) },
	})
}
