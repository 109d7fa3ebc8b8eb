package supervisor

import (
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/impyard/impyard/lib/queue"
	"github.com/impyard/impyard/lib/store"
)

// The supervisor's markers in queue/<imp>/: when the imp's old single
// schedule last fired (each [[schedule]] entry has .schedule-<key>), and
// when its last run ended (written before .told took its place, and read
// only while an imp has no .told).
const (
	scheduleMark = ".schedule"
	lastRunMark  = ".lastrun"
)

// Kind and major of a marker file.
const (
	markKind  = "mark"
	markMajor = 1
)

// mark is a marker's content.
type mark struct {
	Schema string    `json:"schema"`
	At     time.Time `json:"at"`
}

// writeMark records at in the imp's marker name, atomically, under the
// queue's lock.
func (s *Supervisor) writeMark(imp, name string, at time.Time) error {
	d, err := s.Yard.QueueDir(imp)
	if err != nil {
		return err
	}
	b, err := store.Encode(mark{Schema: store.Schema(markKind, markMajor), At: store.Second(at)})
	if err != nil {
		return err
	}
	return d.Update(func(tx *store.Tx) error { return tx.Write(name, b) })
}

// readMark reads the imp's marker name; ok is false when there is none.
// Markers written before they carried a schema hold a bare RFC 3339 time
// and are still read. Any other content (empty, torn, damaged) is an
// error naming the file.
func (s *Supervisor) readMark(imp, name string) (at time.Time, ok bool, err error) {
	p := queue.MarkPath(s.Yard, imp, name)
	b, err := s.Yard.ReadFile(p)
	if store.IsNotExist(err) {
		return time.Time{}, false, nil
	}
	if err != nil {
		return time.Time{}, false, err
	}
	if t, err := time.Parse(time.RFC3339Nano, string(b)); err == nil {
		return t, true, nil
	}
	var m mark
	if err := store.Decode(p, b, markKind, markMajor, &m); err != nil {
		return time.Time{}, false, err
	}
	if m.At.IsZero() {
		return time.Time{}, false, fmt.Errorf("%s: no time in the marker", p)
	}
	return m.At, true, nil
}

// recoverMark replaces a marker that cannot be read with the time it was
// last written (its modification time, or now if that is later), logging
// it once: a damaged marker must not silence what it stands for. A marker
// from a newer impyard is not rewritten; ok is then false.
func (s *Supervisor) recoverMark(imp, name string, readErr error, now time.Time) (at time.Time, ok bool) {
	p := queue.MarkPath(s.Yard, imp, name)
	if errors.Is(readErr, store.ErrUnknownMajor) {
		s.logOnce(p, "imp %s: %v", imp, readErr)
		return time.Time{}, false
	}
	at = now
	if fi, err := os.Lstat(p); err == nil && fi.ModTime().Before(now) {
		at = fi.ModTime()
	}
	if err := s.writeMark(imp, name, at); err != nil {
		s.logOnce(p, "imp %s: %v; cannot replace it: %v", imp, readErr, err)
		return time.Time{}, false
	}
	s.logf("imp %s: %v; replaced it, taking its last change (%s) as the time it records", imp, readErr, at.UTC().Format(time.RFC3339))
	return at, true
}

// logOnce logs a problem with the file at path only the first time it is
// seen with that text, so a marker that stays bad does not flood the log.
func (s *Supervisor) logOnce(path, format string, a ...any) {
	msg := fmt.Sprintf(format, a...)
	s.mu.Lock()
	if s.logged == nil {
		s.logged = map[string]string{}
	}
	seen := s.logged[path] == msg
	s.logged[path] = msg
	s.mu.Unlock()
	if !seen {
		s.logf("%s", msg)
	}
}
