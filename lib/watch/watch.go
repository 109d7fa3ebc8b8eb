// Package watch wakes a caller when files change under a set of
// directories. inotify only wakes; the directories are the truth: after
// the watches are added the caller is told to rescan, a rescan is requested
// again after an inotify queue overflow, when a watched directory gains a
// sub-directory, and on a slow timer, so a lost event delays a reaction but
// never loses it. Watcher errors are reported and survived.
package watch

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
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

// mask is what a watched directory reports: entries created, moved in or
// out, files closed after a write, and the directory itself going. Not
// each write: the yard's files are replaced by a rename, and an append
// to a log in a watched directory (the gateway's runs/decisions.jsonl,
// many a second) woke the watcher for nothing; a file written in place
// by hand is reported when it is closed.
const mask = unix.IN_CREATE | unix.IN_MOVED_TO | unix.IN_MOVED_FROM | unix.IN_CLOSE_WRITE |
	unix.IN_DELETE_SELF | unix.IN_MOVE_SELF | unix.IN_ONLYDIR

// event is one inotify event, its name as the kernel gave it.
type event struct {
	wd   int32
	mask uint32
	name string
}

// Run watches until ctx is done. period is the slow rescan interval.
func Run(ctx context.Context, period time.Duration, h Handler) error {
	fd, err := unix.InotifyInit1(unix.IN_NONBLOCK | unix.IN_CLOEXEC)
	if err != nil {
		return os.NewSyscallError("inotify_init1", err)
	}
	// Non-blocking, so reads wait in the runtime's poller and Close ends
	// them.
	f := os.NewFile(uintptr(fd), "inotify")
	events := make(chan []event, 64)
	failed := make(chan error, 1)
	stop := make(chan struct{})
	go read(f, events, failed, stop)
	defer f.Close()
	defer close(stop)
	watched := map[string]int32{}
	dirs := map[int32]string{}
	add := func() {
		for _, d := range h.Dirs() {
			if _, ok := watched[d]; ok {
				continue
			}
			wd, err := unix.InotifyAddWatch(fd, d, mask)
			if err != nil {
				if !errors.Is(err, os.ErrNotExist) && h.Error != nil {
					h.Error(&os.PathError{Op: "watch", Path: d, Err: err})
				}
				continue
			}
			watched[d], dirs[int32(wd)] = int32(wd), d
		}
	}
	forget := func(d string) {
		if wd, ok := watched[d]; ok {
			delete(watched, d)
			delete(dirs, wd)
			unix.InotifyRmWatch(fd, uint32(wd))
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
		case err := <-failed:
			return err
		case evs := <-events:
			rescan := false
			for _, ev := range evs {
				if ev.mask&unix.IN_Q_OVERFLOW != 0 {
					// Events were lost: the rescan answers that.
					rescan = true
					continue
				}
				dir, ok := dirs[ev.wd]
				if !ok {
					continue
				}
				if ev.mask&(unix.IN_DELETE_SELF|unix.IN_MOVE_SELF|unix.IN_IGNORED) != 0 {
					forget(dir)
					continue
				}
				path := filepath.Join(dir, ev.name)
				if ev.mask&unix.IN_MOVED_FROM != 0 {
					forget(path)
					continue
				}
				if strings.HasPrefix(ev.name, ".") {
					continue
				}
				if ev.mask&unix.IN_ISDIR != 0 {
					rescan = true
					continue
				}
				h.File(path)
			}
			if rescan {
				add()
				h.Rescan()
			}
		}
	}
}

// read sends what f, an inotify descriptor, reports, until it fails, is
// closed or stop is.
func read(f *os.File, events chan<- []event, failed chan<- error, stop <-chan struct{}) {
	buf := make([]byte, 64<<10)
	for {
		n, err := f.Read(buf)
		if err != nil {
			if !errors.Is(err, os.ErrClosed) {
				failed <- fmt.Errorf("reading inotify events: %w", err)
			}
			return
		}
		var evs []event
		for off := 0; off+unix.SizeofInotifyEvent <= n; {
			raw := (*unix.InotifyEvent)(unsafe.Pointer(&buf[off]))
			end := off + unix.SizeofInotifyEvent + int(raw.Len)
			if end > n {
				break
			}
			name := strings.TrimRight(string(buf[off+unix.SizeofInotifyEvent:end]), "\x00")
			evs = append(evs, event{wd: raw.Wd, mask: raw.Mask, name: name})
			off = end
		}
		select {
		case events <- evs:
		case <-stop:
			return
		}
	}
}
