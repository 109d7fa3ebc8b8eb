// Package watch wakes a caller when files change under a set of
// directories. fsnotify only wakes; the directories are the truth: after
// the watches are added the caller is told to rescan, a rescan is requested
// again after an inotify queue overflow, when a watched directory gains a
// sub-directory, and on a slow timer, so a lost event delays a reaction but
// never loses it. Watcher errors are reported and survived.
package watch

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/fsnotify/fsnotify"
)

// Handler receives what the watcher sees.
type Handler struct {
	// Dirs returns the directories to watch now; it is called at start and
	// at every rescan, so new directories (a new imp's queue) are picked up.
	Dirs func() []string
	// File is called with the path of a file that was created, written or
	// renamed into a watched directory. Dot files are not reported.
	File func(path string)
	// Rescan is called when the caller must re-read everything.
	Rescan func()
	// Error is called with watcher errors that were survived.
	Error func(err error)
}

// Run watches until ctx is done. period is the slow rescan interval.
func Run(ctx context.Context, period time.Duration, h Handler) error {
	w, err := fsnotify.NewBufferedWatcher(1024)
	if err != nil {
		return err
	}
	defer w.Close()
	watched := map[string]bool{}
	add := func() {
		for _, d := range h.Dirs() {
			if watched[d] {
				continue
			}
			if err := w.Add(d); err != nil {
				if !errors.Is(err, os.ErrNotExist) && h.Error != nil {
					h.Error(err)
				}
				continue
			}
			watched[d] = true
		}
	}
	add()
	h.Rescan()
	tick := time.NewTicker(period)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
			add()
			h.Rescan()
		case err, ok := <-w.Errors:
			if !ok {
				return errors.New("watcher closed")
			}
			if h.Error != nil && !errors.Is(err, fsnotify.ErrEventOverflow) {
				h.Error(err)
			}
			add()
			h.Rescan()
		case ev, ok := <-w.Events:
			if !ok {
				return errors.New("watcher closed")
			}
			if ev.Has(fsnotify.Remove) || ev.Has(fsnotify.Rename) {
				if watched[ev.Name] {
					delete(watched, ev.Name)
				}
				continue
			}
			if strings.HasPrefix(filepath.Base(ev.Name), ".") {
				continue
			}
			if ev.Has(fsnotify.Create) {
				if fi, err := os.Lstat(ev.Name); err == nil && fi.IsDir() {
					add()
					h.Rescan()
					continue
				}
			}
			if ev.Has(fsnotify.Create) || ev.Has(fsnotify.Write) {
				h.File(ev.Name)
			}
		}
	}
}
