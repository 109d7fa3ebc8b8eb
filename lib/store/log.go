package store

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// Log appends records to one JSONL file for a long-running writer, with
// group commit: whoever writes takes every record that arrived during
// the last write and writes them together, as one write(2) under the
// directory's flock. It keeps the lock file and the log open between
// writes and checks with one lstat each that the paths still name the
// files it holds. store.AppendLine's open, lock and dozen system calls
// per line made the audit log the gateway's bottleneck at thousands of
// requests a second; the discipline here is the same (the directory's
// .lock, no symlink followed, a regular file with one link, a torn last
// line closed off by a newline first), so readers and the yard's other
// writers see no difference.
//
// Each batch is synced (fdatasync) before anyone who waits for one of its
// records returns, so a record a caller waited for survives a power cut;
// concurrent callers share one sync, the one of the batch their records
// went into. A batch that is not wholly written and synced is cut back
// off the file (truncated to where the file ended before it), so no
// record, whole or torn, is left of a batch whose callers heard it
// failed.
//
// The two lstats per batch stay, though a watch on the directory could
// report a replaced log or lock file without a call per batch. The
// kernel queues a rename's inotify event before rename(2) returns, but a
// goroutine reading the queue learns of it later, so a batch written in
// between would go to the moved file: to be as safe as the lstat, the
// queue must be read after the flock, itself one read(2). The log's
// lstat also gives its size: where a failed batch is cut back to, and
// whether another writer appended since (then its last byte is checked
// for a torn line); without the lstat that is an fstat. And a watch
// sees a move of the directory only if every directory up to / is
// watched, and never a file system mounted over the path. One call a
// batch saved (0.3 a forwarded request at 8 connections) is not worth
// those.
//
// A caller that waits for its record and finds no write under way writes
// itself, in its own goroutine: handing each record to a writer
// goroutine and waking the caller again cost more than the write. Those
// who come during a write wait, and the first of them writes the next
// batch, theirs, when it is woken. A
// record nobody waits for is written with the next one somebody does, or
// after lag at the latest, so it does not cost a write of its own.
type Log struct {
	path     string
	lockPath string
	// report hears the outcome of every write, for the callers that did
	// not wait for theirs.
	report func(error)
	sync   func(f *os.File) error // nil: unsynced

	mu      sync.Mutex
	writing bool // someone is writing: a caller, or a writer goroutine
	pending []byte
	waiters []chan error
	spare   []byte
	armed   bool        // flusher will write what is pending
	flusher *time.Timer // writes records nobody waits for after lag

	// Owned by whoever writes.
	lock     *os.File
	lockDev  uint64
	lockIno  uint64
	f        *os.File
	dev, ino uint64
	end      int64 // the log's size after our last write
}

// LogOptions tunes a Log; the zero value is what the yard's writers use.
type LogOptions struct {
	// Sync makes a batch durable; nil is fdatasync(2). Tests hold or
	// fail it to see what waits for it.
	Sync func(f *os.File) error
	// Unsynced leaves batches in the page cache, so a power cut can lose
	// records already answered: only for measuring what the sync costs.
	Unsynced bool
}

// NewLog returns a Log appending to path; report, if not nil, hears the
// outcome of every write.
func NewLog(path string, report func(error)) *Log { return NewLogWith(path, report, LogOptions{}) }

// NewLogWith is NewLog with options.
func NewLogWith(path string, report func(error), o LogOptions) *Log {
	if report == nil {
		report = func(error) {}
	}
	a := &Log{path: path, lockPath: filepath.Join(filepath.Dir(path), lockName), report: report, sync: o.Sync}
	if a.sync == nil {
		a.sync = syncLog
	}
	if o.Unsynced {
		a.sync = nil
	}
	a.flusher = time.AfterFunc(time.Hour, a.flush)
	a.flusher.Stop()
	return a
}

// maxPending is how much may queue before even callers that do not wait
// for their record do: backpressure when the disk is slow.
const maxPending = 4 << 20

// lag is how long a record nobody waits for may stay queued when no
// other record comes to carry it.
var lag = 10 * time.Millisecond

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
	if !wait && len(a.pending) <= maxPending {
		if !a.writing && !a.armed {
			a.armed = true
			a.flusher.Reset(lag)
		}
		a.mu.Unlock()
		return nil
	}
	if a.writing {
		done := make(chan error, 1)
		a.waiters = append(a.waiters, done)
		a.mu.Unlock()
		if err := <-done; err != errLead {
			return err
		}
		// This caller's record is pending still: it writes it.
		a.mu.Lock()
	}
	a.writing = true
	err := a.batch()
	if len(a.waiters) > 0 {
		// Those who came during the write wait for a writer: the first
		// of them writes next, so no goroutine is started for it, and
		// this caller has its answer and goes.
		next := a.waiters[0]
		a.waiters = a.waiters[1:]
		next <- errLead
	} else {
		a.idle()
	}
	a.mu.Unlock()
	return err
}

// errLead tells a waiting caller that it writes the next batch.
var errLead = errors.New("lead")

// Sync returns once everything queued so far is written and synced.
func (a *Log) Sync() error { return a.Append(nil, true) }

// flush writes, after lag, records nobody waited for.
func (a *Log) flush() {
	a.mu.Lock()
	a.armed = false
	if a.writing || len(a.pending) == 0 && len(a.waiters) == 0 {
		a.mu.Unlock()
		return
	}
	a.writing = true
	a.mu.Unlock()
	a.run()
}

// run writes until nothing is pending; the caller set writing.
func (a *Log) run() {
	a.mu.Lock()
	for len(a.pending) > 0 || len(a.waiters) > 0 {
		a.batch()
	}
	a.writing = false
	a.mu.Unlock()
}

// batch writes what is pending, with a.mu held on entry and on return
// but not during the write, answers the waiters it took, and returns the
// write's error.
func (a *Log) batch() error {
	buf, ws := a.pending, a.waiters
	a.pending, a.waiters = a.spare[:0], nil
	a.mu.Unlock()
	var err error
	if len(buf) > 0 {
		err = a.write(buf)
		a.report(err)
	}
	for _, w := range ws {
		w <- err
	}
	a.mu.Lock()
	a.spare = buf
	return err
}

// idle ends a write with a.mu held: records queued meanwhile that nobody
// waits for are left to the flusher.
func (a *Log) idle() {
	a.writing = false
	if len(a.pending) > 0 && !a.armed {
		a.armed = true
		a.flusher.Reset(lag)
	}
}

// write appends whole lines in one write under the directory's lock and
// syncs them, or leaves the file as it was.
func (a *Log) write(lines []byte) error {
	unlock, err := a.flock()
	if err != nil {
		return err
	}
	defer unlock()
	size, err := a.open()
	if err != nil {
		return err
	}
	if size > 0 && size != a.end {
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
	}
	_, err = a.f.Write(lines)
	if err == nil {
		trace(Op{Kind: OpAppend, Path: a.path, Off: size, Data: lines})
		if a.sync != nil {
			err = a.sync(a.f)
		}
	}
	if err != nil {
		// Part of the batch may be on the file, whole records saying what
		// their callers will hear did not happen: cut it all back, under
		// the lock still held, so no other writer's line is cut. If even
		// that fails the file is reopened and its last byte checked again.
		if a.f.Truncate(size) == nil {
			trace(Op{Kind: OpTruncate, Path: a.path, Off: size})
			if a.sync != nil {
				a.sync(a.f)
			}
		}
		a.drop()
		return fmt.Errorf("append %s: %w", a.path, err)
	}
	a.end = size + int64(len(lines))
	return nil
}

// syncLog makes what was written to f, the log, durable: the store's
// syncData (fdatasync), so the trace sees it.
func syncLog(f *os.File) error { return syncData(int(f.Fd()), f.Name()) }

// flock takes the directory's lock on the lock file held open, or through
// store.Lock (which waits with a timeout) when another process holds it
// or the path no longer names the file held open.
func (a *Log) flock() (func(), error) {
	lockPath := a.lockPath
	if a.lock == nil {
		f, err := openLock(unix.AT_FDCWD, lockPath, lockPath, unix.O_CREAT)
		if err != nil {
			return nil, err
		}
		var st syscall.Stat_t
		if err := syscall.Fstat(int(f.Fd()), &st); err != nil {
			f.Close()
			return nil, &os.PathError{Op: "lock", Path: lockPath, Err: err}
		}
		a.lock, a.lockDev, a.lockIno = f, uint64(st.Dev), st.Ino
	}
	fd := int(a.lock.Fd())
	for {
		err := syscall.Flock(fd, syscall.LOCK_EX|syscall.LOCK_NB)
		switch {
		case err == nil:
			// The lock file may have been replaced since it was opened;
			// then this flock excludes no one, so let Lock follow the path.
			// The inode held open is the one fstat saw when it was opened.
			var st syscall.Stat_t
			if err := syscall.Lstat(lockPath, &st); err != nil || uint64(st.Dev) != a.lockDev || st.Ino != a.lockIno {
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
// the log was replaced or moved away, and returns its size: the lstat
// that checks the path names a.f tells it too.
func (a *Log) open() (int64, error) {
	var st syscall.Stat_t
	err := syscall.Lstat(a.path, &st)
	if a.f != nil && err == nil && uint64(st.Dev) == a.dev && st.Ino == a.ino {
		return st.Size, nil
	}
	a.drop()
	created := errors.Is(err, syscall.ENOENT)
	f, err := os.OpenFile(a.path, os.O_RDWR|os.O_APPEND|os.O_CREATE|syscall.O_NOFOLLOW|syscall.O_CLOEXEC, FilePerm)
	if err != nil {
		if errors.Is(err, syscall.ELOOP) {
			return 0, &os.PathError{Op: "open", Path: a.path, Err: errors.New("is a symlink; refusing to follow it")}
		}
		return 0, err
	}
	if created {
		trace(Op{Kind: OpCreate, Path: a.path})
		// A synced record in a file whose entry a power cut takes is
		// lost with it: the new file is synced into its directory first.
		if a.sync != nil {
			if err := syncDir(filepath.Dir(a.path)); err != nil {
				f.Close()
				return 0, err
			}
		}
	}
	fi, err := f.Stat()
	if err == nil && fi.Size() == 0 {
		err = shareCreated(unix.AT_FDCWD, filepath.Dir(a.path), int(f.Fd()))
	}
	if err != nil {
		f.Close()
		return 0, err
	}
	sys, _ := fi.Sys().(*syscall.Stat_t)
	if !fi.Mode().IsRegular() || sys == nil || sys.Nlink != 1 {
		f.Close()
		return 0, &os.PathError{Op: "open", Path: a.path, Err: errors.New("is not a regular file with one link")}
	}
	a.f, a.dev, a.ino, a.end = f, uint64(sys.Dev), sys.Ino, -1
	return fi.Size(), nil
}

func (a *Log) drop() {
	if a.f != nil {
		a.f.Close()
		a.f = nil
	}
}
