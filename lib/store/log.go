package store

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"syscall"
)

// Log appends records to one JSONL file for a long-running writer, with
// group commit:
// a writer goroutine, running while there is anything to write, takes
// every record that arrived during its last write and writes them
// together, as one write(2) under the directory's flock. It keeps the lock
// file and the log open between writes and checks with one lstat that the
// path still names the file it holds. store.AppendLine's open, lock and
// dozen system calls per line made the audit log the gateway's bottleneck
// at thousands of requests a second; the discipline here is the same (the
// directory's .lock, no symlink followed, a regular file with one link, a
// torn last line closed off by a newline first), so readers and the
// yard's other writers see no difference.
type Log struct {
	path string
	// report hears the outcome of every write, for the callers that did
	// not wait for theirs.
	report func(error)

	mu      sync.Mutex
	writing bool // a writer goroutine is running
	pending []byte
	waiters []chan error

	// Owned by the writer goroutine.
	lock     *os.File
	f        *os.File
	dev, ino uint64
	end      int64 // the log's size after our last write
}

// NewLog returns a Log appending to path; report, if not nil, hears the
// outcome of every write.
func NewLog(path string, report func(error)) *Log {
	if report == nil {
		report = func(error) {}
	}
	return &Log{path: path, report: report}
}

// maxPending is how much may queue before even callers that do not wait
// for their record do: backpressure when the disk is slow.
const maxPending = 4 << 20

// Append queues line (one JSON record ending in a newline). With wait, or
// when too much is queued, it returns once the line is written, with the
// error if it could not be; else at once, with the outcome going to
// report.
func (a *Log) Append(line []byte, wait bool) error {
	if len(line) > MaxLine {
		return fmt.Errorf("append %s: record of %d bytes is over the %d limit", a.path, len(line), MaxLine)
	}
	a.mu.Lock()
	a.pending = append(a.pending, line...)
	var done chan error
	if wait || len(a.pending) > maxPending {
		done = make(chan error, 1)
		a.waiters = append(a.waiters, done)
	}
	if !a.writing {
		a.writing = true
		go a.run()
	}
	a.mu.Unlock()
	if done == nil {
		return nil
	}
	return <-done
}

// Sync returns once everything queued so far is written.
func (a *Log) Sync() error { return a.Append(nil, true) }

// run writes until nothing is pending.
func (a *Log) run() {
	var spare []byte
	a.mu.Lock()
	for len(a.pending) > 0 || len(a.waiters) > 0 {
		buf, ws := a.pending, a.waiters
		a.pending, a.waiters = spare[:0], nil
		a.mu.Unlock()
		var err error
		if len(buf) > 0 {
			err = a.write(buf)
			a.report(err)
		}
		for _, w := range ws {
			w <- err
		}
		spare = buf
		a.mu.Lock()
	}
	a.writing = false
	a.mu.Unlock()
}

// write appends whole lines in one write under the directory's lock.
func (a *Log) write(lines []byte) error {
	unlock, err := a.flock()
	if err != nil {
		return err
	}
	defer unlock()
	if err := a.open(); err != nil {
		return err
	}
	fi, err := a.f.Stat()
	if err != nil {
		a.drop()
		return err
	}
	if size := fi.Size(); size > 0 && size != a.end {
		// Someone else wrote since; a writer that crashed mid-line left a
		// torn line, which a newline first keeps one bad line.
		var last [1]byte
		if _, err := a.f.ReadAt(last[:], size-1); err != nil {
			a.drop()
			return fmt.Errorf("append %s: %w", a.path, err)
		}
		if last[0] != '\n' {
			lines = append([]byte{'\n'}, lines...)
		}
		a.end = size
	}
	n, err := a.f.Write(lines)
	a.end += int64(n)
	if err != nil {
		a.drop()
		return fmt.Errorf("append %s: %w", a.path, err)
	}
	return nil
}

// flock takes the directory's lock on the lock file held open, or through
// store.Lock (which waits with a timeout) when another process holds it
// or the path no longer names the file held open.
func (a *Log) flock() (func(), error) {
	lockPath := filepath.Join(filepath.Dir(a.path), lockName)
	if a.lock == nil {
		f, err := os.OpenFile(lockPath, os.O_CREATE|os.O_RDWR|syscall.O_NOFOLLOW|syscall.O_CLOEXEC, 0o600)
		if err != nil {
			return nil, &os.PathError{Op: "lock", Path: lockPath, Err: err}
		}
		a.lock = f
	}
	fd := int(a.lock.Fd())
	for {
		err := syscall.Flock(fd, syscall.LOCK_EX|syscall.LOCK_NB)
		switch {
		case err == nil:
			// The lock file may have been replaced since it was opened;
			// then this flock excludes no one, so let Lock follow the path.
			if same, err := names(lockPath, a.lock); err != nil || !same {
				release(a.lock)
				a.lock = nil
				return Lock(lockPath)
			}
			return func() { syscall.Flock(fd, syscall.LOCK_UN) }, nil
		case errors.Is(err, syscall.EINTR):
			continue
		case errors.Is(err, syscall.EWOULDBLOCK):
			return Lock(lockPath)
		}
		return nil, &os.PathError{Op: "lock", Path: lockPath, Err: err}
	}
}

// open makes sure a.f is the file the path names now, reopening it after
// the log was replaced or moved away.
func (a *Log) open() error {
	var st syscall.Stat_t
	err := syscall.Lstat(a.path, &st)
	if a.f != nil && err == nil && uint64(st.Dev) == a.dev && st.Ino == a.ino {
		return nil
	}
	a.drop()
	f, err := os.OpenFile(a.path, os.O_RDWR|os.O_APPEND|os.O_CREATE|syscall.O_NOFOLLOW|syscall.O_CLOEXEC, FilePerm)
	if err != nil {
		if errors.Is(err, syscall.ELOOP) {
			return &os.PathError{Op: "open", Path: a.path, Err: errors.New("is a symlink; refusing to follow it")}
		}
		return err
	}
	fi, err := f.Stat()
	if err != nil {
		f.Close()
		return err
	}
	sys, _ := fi.Sys().(*syscall.Stat_t)
	if !fi.Mode().IsRegular() || sys == nil || sys.Nlink != 1 {
		f.Close()
		return &os.PathError{Op: "open", Path: a.path, Err: errors.New("is not a regular file with one link")}
	}
	a.f, a.dev, a.ino, a.end = f, uint64(sys.Dev), sys.Ino, -1
	return nil
}

func (a *Log) drop() {
	if a.f != nil {
		a.f.Close()
		a.f = nil
	}
}
