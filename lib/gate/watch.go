package gate

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/impyard/impyard/lib/id"
	"github.com/impyard/impyard/lib/watch"
	"github.com/impyard/impyard/lib/yard"
)

// Handler receives what Watch sees.
type Handler struct {
	// Gate is called with a gate as it is on disk: after its file in
	// gates/pending/ or gates/resolved/ was written, and for every gate at
	// each rescan. Calls come one at a time, never concurrently.
	Gate func(g *Gate)
	// Rescan, when set, is called before a rescan's gates are reported:
	// at start, after a lost event, and every rescan period.
	Rescan func()
	// Scanned, when set, is called after a rescan's gates were all
	// reported: after the first call, every gate on disk at start has
	// been seen.
	Scanned func()
	// Error is called with unreadable gates and watcher errors, which are
	// survived.
	Error func(err error)
}

// debounce is how long Watch lets a burst of writes settle before it
// reads the gates they named, so a gate written twice is read once.
const debounce = 20 * time.Millisecond

// watchRun is watch.Run; a test replaces it to lose events on purpose.
var watchRun = watch.Run

// Watch reports gates to h until ctx is done. inotify only wakes it: a
// woken Watch reads the gate from disk, and a rescan at start, after an
// inotify overflow and every rescan period re-lists every gate, so a lost
// event delays a report but never loses it. A gates directory that is a
// symlink is refused as List and Get refuse it: its gates are never
// reported, and the refusal goes to h.Error.
func Watch(ctx context.Context, y *yard.Yard, rescan time.Duration, h Handler) error {
	gates := y.Path("gates")
	wheres := map[string]bool{filepath.Join(gates, pending): true, filepath.Join(gates, resolved): true}
	type wake struct {
		gateID string // empty: rescan everything
	}
	wakes := make(chan wake)
	send := func(w wake) {
		select {
		case wakes <- w:
		case <-ctx.Done():
		}
	}
	errc := make(chan error, 1)
	go func() {
		errc <- watchRun(ctx, rescan, watch.Handler{
			// The root and gates/ too: until gates/resolved/ exists, its
			// creation is the news. A symlinked directory is not watched;
			// the rescan names it.
			Dirs: func() []string {
				dirs := []string{y.Root}
				if !plainDir(gates) {
					return dirs
				}
				dirs = append(dirs, gates)
				for d := range wheres {
					if plainDir(d) {
						dirs = append(dirs, d)
					}
				}
				return dirs
			},
			File: func(path string) {
				gateID := strings.TrimSuffix(filepath.Base(path), ".json")
				if wheres[filepath.Dir(path)] && id.Check(id.Gate, gateID) == nil {
					send(wake{gateID})
				}
			},
			Rescan: func() { send(wake{}) },
			Error:  h.Error,
		})
	}()
	warn := func(err error) {
		if h.Error != nil {
			h.Error(err)
		}
	}
	var (
		due  = map[string]bool{}
		all  = false
		tick = time.NewTimer(debounce)
	)
	tick.Stop()
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return <-errc
		case err := <-errc:
			return err
		case w := <-wakes:
			if len(due) == 0 && !all {
				tick.Reset(debounce)
			}
			if w.gateID == "" {
				all = true
			} else {
				due[w.gateID] = true
			}
		case <-tick.C:
			if all {
				if h.Rescan != nil {
					h.Rescan()
				}
				bad, _ := Each(y, Filter{All: true}, func(g *Gate) error {
					h.Gate(g)
					return nil
				})
				for _, err := range bad {
					warn(err)
				}
				if h.Scanned != nil {
					h.Scanned()
				}
			} else {
				for gateID := range due {
					g, err := Get(y, gateID)
					if err != nil {
						if !errors.Is(err, errNoGate) {
							warn(err)
						}
						continue
					}
					h.Gate(g)
				}
			}
			due, all = map[string]bool{}, false
		}
	}
}

func plainDir(path string) bool {
	fi, err := os.Lstat(path)
	return err == nil && fi.IsDir()
}
