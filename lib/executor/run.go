package executor

import (
	"context"
	"errors"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/impyard/impyard/lib/gate"
	"github.com/impyard/impyard/lib/id"
	"github.com/impyard/impyard/lib/state"
	"github.com/impyard/impyard/lib/watch"
)

// Run executes approved gates as they appear, until ctx is done: fsnotify on
// gates/resolved/ wakes it, a rescan every rescan interval catches anything
// missed, and at start it takes up every gate still approved or left
// executing by a dead executor. At most workers gates run at once.
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
	gatesDir := r.Yard.Path("gates")
	resolvedDir := filepath.Join(gatesDir, "resolved")
	return watch.Run(ctx, rescan, watch.Handler{
		Dirs: func() []string { return []string{r.Yard.Root, gatesDir, resolvedDir} },
		File: func(path string) {
			name := strings.TrimSuffix(filepath.Base(path), ".json")
			if filepath.Dir(path) != resolvedDir || id.Check(id.Gate, name) != nil {
				return
			}
			if g, err := gate.Get(r.Yard, name); err == nil && (g.State == state.Approved || g.State == state.Executing) {
				start(name)
			}
		},
		Rescan: func() {
			gates, bad := gate.List(r.Yard, gate.Filter{All: true})
			for _, err := range bad {
				r.logf("%v", err)
			}
			if err := gate.Repair(r.Yard); err != nil {
				r.logf("%v", err)
			}
			for _, g := range gates {
				if g.State == state.Approved || g.State == state.Executing {
					start(g.ID)
				}
			}
		},
		Error: func(err error) { r.logf("watch: %v", err) },
	})
}
