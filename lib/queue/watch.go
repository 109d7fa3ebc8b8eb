package queue

import (
	"context"
	"path/filepath"
	"strings"
	"time"

	"github.com/impyard/impyard/lib/id"
	"github.com/impyard/impyard/lib/state"
	"github.com/impyard/impyard/lib/store"
	"github.com/impyard/impyard/lib/watch"
	"github.com/impyard/impyard/lib/yard"
)

// Event is one transition seen by Watch.
type Event struct {
	ID   string    `json:"id"`
	Imp  string    `json:"imp"`
	From string    `json:"from,omitempty"`
	To   string    `json:"to"`
	By   string    `json:"by,omitempty"`
	At   time.Time `json:"at"` // whole seconds, UTC
	Why  string    `json:"why,omitempty"`
}

// Watch reports, in order, every transition that happens to tasks of imp
// (all imps when empty) after Watch starts. Transitions that happened before
// are not reported. It survives lost events by rescanning.
func Watch(ctx context.Context, y *yard.Yard, imp string, rescan time.Duration, emit func(Event), warn func(error)) error {
	seen := map[string]int{} // task id -> transitions already reported
	started := false
	look := func(t *Task) {
		n, known := seen[t.ID]
		if !known && !started {
			seen[t.ID] = len(t.History)
			return
		}
		for _, h := range t.History[min(n, len(t.History)):] {
			emit(Event{ID: t.ID, Imp: t.Imp, From: h.From, To: h.To, By: h.By, At: state.Second(h.At), Why: h.Why})
		}
		if len(t.History) > n {
			seen[t.ID] = len(t.History)
		}
	}
	return watch.Run(ctx, rescan, watch.Handler{
		Dirs: func() []string {
			// The root too: until queue/ exists, its creation is the news.
			dirs := []string{y.Root, y.Path("queue")}
			imps := []string{imp}
			if imp == "" {
				imps, _ = y.Imps("queue")
			}
			for _, i := range imps {
				dirs = append(dirs, y.Path("queue", i))
			}
			return dirs
		},
		File: func(path string) {
			name := strings.TrimSuffix(filepath.Base(path), ".json")
			dirImp := filepath.Base(filepath.Dir(path))
			if id.Check(id.Task, name) != nil || (imp != "" && dirImp != imp) {
				return
			}
			t, err := readTask(y, path, dirImp)
			if err != nil {
				if !store.IsNotExist(err) {
					warn(err)
				}
				return
			}
			look(t)
		},
		Rescan: func() {
			bad, _ := Each(y, Filter{Imp: imp}, func(t *Task) error {
				look(t)
				return nil
			})
			if started {
				for _, err := range bad {
					warn(err)
				}
			}
			started = true
		},
		Error: warn,
	})
}
