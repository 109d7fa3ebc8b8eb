// Package stale tells a long-running reader of a file when it must look
// at the file again, so that it need not stat it on every use. A Flag
// counts what an inotify watch on the file's directory reports (the file
// created, written, its mode changed, renamed or removed there, the
// directory itself moved or removed, the watch's queue overflowed); the
// reader checks the file again when the count moved, and whatever the
// watch does, once Max has passed since it last did: a change the watch
// never reports (a file system inotify does not see into, a watcher
// starved of CPU) is still noticed within Max. A file whose directory
// cannot be watched, or is reached through a symlink, is checked on
// every use, as without a Flag.
//
// One inotify instance serves every Flag of the process: the kernel
// allows a user few instances, and a gateway's tests make hundreds of
// readers.
package stale

import (
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fsnotify/fsnotify"
)

// Max is how long a reader may go on using what it read while the
// watch reports nothing.
const Max = 100 * time.Millisecond

// Flag counts the changes the watch saw to one file.
type Flag struct {
	gen  atomic.Uint64
	dead atomic.Bool // not watched: the reader checks on every use
}

// Gen returns the number of changes seen so far, and whether the file is
// watched at all. A reader keeps the number it read before it last
// checked the file; while Gen still returns it, and less than Max has
// passed since, the file is as it was then: whatever changed it
// happened before the watch counted it.
func (f *Flag) Gen() (uint64, bool) { return f.gen.Load(), !f.dead.Load() }

// Watch returns a Flag for path.
func Watch(path string) *Flag {
	f := &Flag{}
	abs, err := filepath.Abs(path)
	if err != nil {
		f.dead.Store(true)
		return f
	}
	dir := filepath.Dir(abs)
	if real, err := filepath.EvalSymlinks(dir); err != nil || real != dir {
		f.dead.Store(true)
		return f
	}
	if err := watcher.add(dir, filepath.Base(abs), f); err != nil {
		f.dead.Store(true)
	}
	return f
}

type entry struct {
	name string
	flag *Flag
}

type watchers struct {
	once sync.Once
	w    *fsnotify.Watcher
	err  error

	mu   sync.Mutex
	dirs map[string][]entry
}

var watcher watchers

func (ws *watchers) add(dir, name string, f *Flag) error {
	ws.once.Do(func() {
		ws.w, ws.err = fsnotify.NewWatcher()
		if ws.err == nil {
			ws.dirs = map[string][]entry{}
			go ws.run()
		}
	})
	if ws.err != nil {
		return ws.err
	}
	ws.mu.Lock()
	defer ws.mu.Unlock()
	if _, ok := ws.dirs[dir]; !ok {
		if err := ws.w.Add(dir); err != nil {
			return err
		}
	}
	ws.dirs[dir] = append(ws.dirs[dir], entry{name, f})
	return nil
}

func (ws *watchers) run() {
	for {
		select {
		case ev, ok := <-ws.w.Events:
			if !ok {
				ws.all(true)
				return
			}
			ws.event(ev)
		case _, ok := <-ws.w.Errors:
			// An overflow, or anything else: what was lost is unknown.
			ws.all(!ok)
			if !ok {
				return
			}
		}
	}
}

func (ws *watchers) event(ev fsnotify.Event) {
	ws.mu.Lock()
	defer ws.mu.Unlock()
	if es, ok := ws.dirs[ev.Name]; ok && (ev.Has(fsnotify.Remove) || ev.Has(fsnotify.Rename)) {
		// The directory itself went: its files' paths lead elsewhere now,
		// and nothing watches where.
		for _, e := range es {
			e.flag.dead.Store(true)
			e.flag.gen.Add(1)
		}
		delete(ws.dirs, ev.Name)
		ws.w.Remove(ev.Name)
		return
	}
	dir, name := filepath.Dir(ev.Name), filepath.Base(ev.Name)
	for _, e := range ws.dirs[dir] {
		if e.name == name {
			e.flag.gen.Add(1)
		}
	}
}

// all counts a change of every file; with dead, stops watching them.
func (ws *watchers) all(dead bool) {
	ws.mu.Lock()
	defer ws.mu.Unlock()
	for _, es := range ws.dirs {
		for _, e := range es {
			e.flag.gen.Add(1)
			if dead {
				e.flag.dead.Store(true)
			}
		}
	}
}
