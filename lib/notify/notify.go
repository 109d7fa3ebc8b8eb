// Package notify owns the yard's outbox of notifications to the owner:
// outbox/pending/<event>.json for each event a notification may be owed
// for (a gate filed, a task failed or needing review), moved to
// outbox/sent/<event>.json once every receiver has it, under the one lock
// of outbox/.
//
// An entry is written by Enqueue inside the transaction of the record
// whose event it reports, after the record and before the event's journal
// and audit lines (lib/transition calls it there and again in its crash
// recovery), so a process that dies anywhere between the event and the
// send loses no notification; delivery (lib/executor) is at least once,
// and every notification carries the entry's id, the same on every
// attempt, for receivers to drop a repeat. An event no receiver is
// configured for (org.toml as it is at the event; see config.Notifies)
// gets no entry: a yard without notifications writes none. Entries in
// sent/ are removed SentKeep after their delivery. What a notification
// says is a Message, rendered for one of the Formats; it never holds a
// secret the deliverer knows of (see Message.Redact).
package notify

import (
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/impyard/impyard/lib/event"
	"github.com/impyard/impyard/lib/id"
	"github.com/impyard/impyard/lib/store"
	"github.com/impyard/impyard/lib/yard"
)

// Kind and major of an outbox entry.
const (
	Kind  = "notification"
	Major = 1
)

// The events a notification can be asked for, as lib/transition names
// them.
const (
	GateFiled       = "gate-filed"
	TaskFailed      = "task-failed"
	TaskNeedsReview = "task-needs-review"
	// TrustEarnedRemoved is a deny taking back earned trust (lib/earn):
	// its subject is the denied gate, its seq the deny's transition.
	TrustEarnedRemoved = "trust-earned-removed"
	// Pause and Resume are the owner's stop and its lifting (lib/pause):
	// their subject is PauseSubject, their seq the pause file's.
	Pause  = "pause"
	Resume = "resume"
	// GateExpiring is a gate nobody decided nearing its deadline
	// ([notify] remind before it), told once; its id is
	// <gate id>.expiring (see Expiring).
	GateExpiring = "gate-expiring"
	// BudgetWarning is an imp's proactive spend past [budget.<imp>] warn
	// of a cap, told once per UTC day; its id is
	// budget-<imp>.<YYYYMMDD> (see Warning).
	BudgetWarning = "budget-warning"
)

// PauseSubject is the record id of pause and resume events.
const PauseSubject = "pause"

// Events are the events [notify] on may name.
var Events = []string{GateFiled, TaskFailed, TaskNeedsReview, TrustEarnedRemoved, Pause, Resume, GateExpiring, BudgetWarning}

// Always are the events told to every receiver whatever on says: trust
// taken back changes what runs without asking, so the owner hears of it.
// A pause or its lifting is told to all as well: it stops or starts
// everything an imp does.
var Always = []string{TrustEarnedRemoved, Pause, Resume}

const (
	dir     = "outbox"
	pending = "pending"
	sent    = "sent"
)

// Entry is one notification owed for one event.
type Entry struct {
	Schema string `json:"schema"`
	// ID is the event's id, <record id>.<seq>: the same for every attempt
	// and every receiver, so a receiver can drop a repeat.
	ID      string `json:"id"`
	Event   string `json:"event"`
	Imp     string `json:"imp"`
	Subject string `json:"subject"` // the gate or task id, or PauseSubject
	Seq     int    `json:"seq"`
	// Why is a pause's reason, kept here as the pause file keeps only
	// the pause in force.
	Why string    `json:"why,omitempty"`
	At  time.Time `json:"at"` // when the event happened
	// Attempts counts the failed deliveries; Next is when the next may
	// begin and LastError what the last one said.
	Attempts  int       `json:"attempts,omitempty"`
	Next      time.Time `json:"next,omitzero"`
	LastError string    `json:"last_error,omitempty"`
	// Done names the receivers (command, webhook) that have it already, so
	// a retry sends only to those that failed.
	Done []string  `json:"done,omitempty"`
	Sent time.Time `json:"sent,omitzero"`
}

// EventID is the id of the seq-th transition of the record rec.
func EventID(rec string, seq int) string { return rec + "." + strconv.Itoa(seq) }

// expiringSeq and budgetPrefix make the ids of the two notifications
// that are not a record's transition: a gate's reminder, one per gate,
// and an imp's budget warning, one per imp and UTC day.
const (
	expiringSeq  = "expiring"
	budgetPrefix = "budget-"
)

// checkEventID refuses an entry id that is not <record id>.<seq>, a
// reminder's <gate id>.expiring or a warning's budget-<imp>.<YYYYMMDD>,
// before it names a file.
func checkEventID(s string) error {
	rec, seq, ok := strings.Cut(s, ".")
	if ok && seq == expiringSeq && id.Check(id.Gate, rec) == nil {
		return nil
	}
	if imp, isBudget := strings.CutPrefix(rec, budgetPrefix); ok && isBudget && id.CheckName(imp) == nil {
		if _, err := time.Parse(dayForm, seq); err == nil {
			return nil
		}
	}
	n, err := strconv.Atoi(seq)
	if !ok || err != nil || n < 1 || strconv.Itoa(n) != seq || (rec != PauseSubject && id.Check(id.Gate, rec) != nil && id.Check(id.Task, rec) != nil) {
		return fmt.Errorf("invalid notification id %q: want a gate or task id or %q, '.', and a transition number", s, PauseSubject)
	}
	return nil
}

func name(where, eventID string) string { return filepath.Join(where, eventID+".json") }

// Enqueue writes the outbox entry for e when e is an event a
// notification can be asked for and notifies (config.Notifies, which
// lib/notify cannot import) says a receiver is configured for it, and
// does nothing otherwise or when the entry is already there (pending or
// sent): lib/transition calls it for every transition it records, and
// again when it recovers one. The deliverer asks org.toml again, as it
// is then, and drops an entry no longer asked for; an event that had no
// receiver when it happened is not told later.
func Enqueue(y *yard.Yard, e event.Event, notifies func(y *yard.Yard, event string) bool) error {
	if !slices.Contains(Events, e.Event) || !notifies(y, e.Event) {
		return nil
	}
	en := Entry{ID: EventID(e.ID, e.Seq), Event: e.Event, Imp: e.Imp, Subject: e.ID, Seq: e.Seq, At: e.TS}
	if e.ID == PauseSubject {
		en.Why = e.Why
	}
	_, err := enqueue(y, en)
	return err
}

// dayForm is the day in a budget warning's id.
const dayForm = "20060102"

// Expiring writes the outbox entry of gate gateID's reminder, due at at,
// when notifies says a receiver wants gate-expiring. It returns whether
// an entry is there now, written by this call or an earlier one (pending
// or sent): the reminder is owed once per gate, whoever asks again.
func Expiring(y *yard.Yard, imp, gateID string, at time.Time, notifies func(y *yard.Yard, event string) bool) (bool, error) {
	if !notifies(y, GateExpiring) {
		return false, nil
	}
	return enqueue(y, Entry{ID: gateID + "." + expiringSeq, Event: GateExpiring, Imp: imp, Subject: gateID, At: at})
}

// Warning writes the outbox entry of imp's budget warning for the UTC
// day of at, saying why, when notifies says a receiver wants
// budget-warning; as Expiring, it returns whether one is there now. An
// entry written stays in sent/ for SentKeep, longer than its day, so a
// warning is told once per day however often it is asked.
func Warning(y *yard.Yard, imp, why string, at time.Time, notifies func(y *yard.Yard, event string) bool) (bool, error) {
	if !notifies(y, BudgetWarning) {
		return false, nil
	}
	if err := id.CheckName(imp); err != nil {
		return false, err
	}
	return enqueue(y, Entry{ID: budgetPrefix + imp + "." + at.UTC().Format(dayForm), Event: BudgetWarning, Imp: imp, Subject: imp, Why: why, At: at})
}

// enqueue writes en in pending/ unless an entry of its id is there,
// pending or sent; either way it returns true.
func enqueue(y *yard.Yard, en Entry) (bool, error) {
	eid := en.ID
	if err := checkEventID(eid); err != nil {
		return false, err
	}
	d, err := y.Dir(dir)
	if err != nil {
		return false, err
	}
	en.Schema, en.At = store.Schema(Kind, Major), en.At.UTC()
	err = d.Update(func(tx *store.Tx) error {
		if err := tx.Check(name(pending, eid), name(sent, eid)); err != nil {
			return err
		}
		for _, where := range []string{pending, sent} {
			if there, err := store.ExistsIn(y.Root, filepath.Join(dir, name(where, eid))); err != nil || there {
				return err
			}
		}
		b, err := store.Encode(en)
		if err != nil {
			return err
		}
		return tx.Write(name(pending, eid), b)
	})
	return err == nil, err
}

// Pending reads the entries still owed, oldest event first. A file that
// cannot be read is returned in bad, and the rest are still returned. It
// creates nothing: a yard without outbox/ owes nothing.
func Pending(y *yard.Yard) (entries []*Entry, bad []error) {
	return list(y, pending)
}

// Sent reads the entries delivered, oldest event first.
func Sent(y *yard.Yard) (entries []*Entry, bad []error) {
	return list(y, sent)
}

func list(y *yard.Yard, where string) (entries []*Entry, bad []error) {
	rel := filepath.Join(dir, where)
	d, err := store.OpenIn(y.Root, rel)
	if store.IsNotExist(err) {
		return nil, nil
	}
	if err != nil {
		return nil, []error{err}
	}
	defer d.Close()
	files, err := d.ReadDir()
	if err != nil {
		return nil, []error{err}
	}
	for _, f := range files {
		n := f.Name()
		if strings.HasPrefix(n, ".") {
			continue
		}
		en, err := parse(filepath.Join(y.Root, rel, n), d.ReadFile)
		if err != nil {
			bad = append(bad, err)
			continue
		}
		entries = append(entries, en)
	}
	slices.SortFunc(entries, func(a, b *Entry) int {
		if c := a.At.Compare(b.At); c != 0 {
			return c
		}
		return strings.Compare(a.ID, b.ID)
	})
	return entries, bad
}

// parse reads the entry at path through read, which takes its base name.
func parse(path string, read func(string) ([]byte, error)) (*Entry, error) {
	eid, ok := strings.CutSuffix(filepath.Base(path), ".json")
	if err := checkEventID(eid); !ok || err != nil {
		return nil, fmt.Errorf("%s: not a notification file name; skipped", path)
	}
	b, err := read(filepath.Base(path))
	if err != nil {
		return nil, err
	}
	var en Entry
	if err := store.Decode(path, b, Kind, Major, &en); err != nil {
		return nil, err
	}
	if en.ID != eid {
		return nil, fmt.Errorf("%s: id %q does not match the file name", path, en.ID)
	}
	return &en, nil
}

// Claim takes, without waiting, the send lock of the pending entry eid,
// outbox/.send/<eid>.lock, so that of two deliverers one sends it; ok is
// false when another holds it. The deliverer reads the entry again (Get)
// once it holds the lock: the other may have delivered it meanwhile.
func Claim(y *yard.Yard, eid string) (release func(), ok bool, err error) {
	if err := checkEventID(eid); err != nil {
		return nil, false, err
	}
	d, err := store.MkdirAll(y.Root, filepath.Join(dir, ".send"))
	if err != nil {
		return nil, false, err
	}
	return store.TryLock(filepath.Join(d, eid+".lock"))
}

// Get reads the pending entry eid; one no longer pending wraps ErrGone.
func Get(y *yard.Yard, eid string) (*Entry, error) {
	if err := checkEventID(eid); err != nil {
		return nil, err
	}
	p := y.Path(dir, name(pending, eid))
	en, err := parse(p, func(string) ([]byte, error) { return y.ReadFile(p) })
	if store.IsNotExist(err) {
		return nil, fmt.Errorf("notification %s %w in %s", eid, ErrGone, y.Path(dir))
	}
	return en, err
}

// ErrGone is an entry that is no longer pending: another deliverer
// finished it, or it was never written.
var ErrGone = errors.New("is not pending")

// update changes the pending entry eid under the outbox lock: edit gets
// the entry as it is on disk and says whether it now belongs in sent/.
func update(y *yard.Yard, eid string, edit func(en *Entry) (done bool)) (*Entry, error) {
	if err := checkEventID(eid); err != nil {
		return nil, err
	}
	d, err := y.Dir(dir)
	if err != nil {
		return nil, err
	}
	var en *Entry
	err = d.Update(func(tx *store.Tx) error {
		if en, err = parse(tx.Path(name(pending, eid)), func(string) ([]byte, error) { return tx.Read(name(pending, eid)) }); err != nil {
			if store.IsNotExist(err) {
				return fmt.Errorf("notification %s %w in %s", eid, ErrGone, y.Path(dir))
			}
			return err
		}
		where := pending
		if edit(en) {
			where = sent
		}
		b, err := store.Encode(en)
		if err != nil {
			return err
		}
		if err := tx.Write(name(where, eid), b); err != nil {
			return err
		}
		if where != sent {
			return nil
		}
		if err := tx.Remove(name(pending, eid)); err != nil {
			return err
		}
		return prune(tx, time.Now().Add(-SentKeep))
	})
	return en, err
}

// SentKeep is how long a delivered entry stays in sent/: long enough that
// the recovery of a transition a crash interrupted, which enqueues its
// event again, finds it there and does not send it twice; not forever, or
// sent/ would grow by a file for every notification.
const SentKeep = 7 * 24 * time.Hour

// prune removes the entries of sent/ delivered before cutoff (their file's
// modification time, the time of the move), with every delivery, so sent/
// holds about a week of notifications. A name that is not an entry's is
// left alone.
func prune(tx *store.Tx, cutoff time.Time) error {
	d, err := tx.Open(sent)
	if err != nil {
		return err
	}
	defer d.Close()
	files, err := d.ReadDir()
	if err != nil {
		return err
	}
	for _, f := range files {
		eid, ok := strings.CutSuffix(f.Name(), ".json")
		if !ok || checkEventID(eid) != nil || !f.Type().IsRegular() {
			continue
		}
		fi, err := f.Info()
		if store.IsNotExist(err) {
			continue
		}
		if err != nil {
			return err
		}
		if fi.ModTime().Before(cutoff) {
			if err := tx.Remove(name(sent, eid)); err != nil {
				return err
			}
		}
	}
	return nil
}

// Delivered records that the receivers named in done now have the
// notification eid, and moves it to sent/.
func Delivered(y *yard.Yard, eid string, done []string, now time.Time) (*Entry, error) {
	return update(y, eid, func(en *Entry) bool {
		en.Done, en.Sent = mergeDone(en.Done, done), store.Second(now)
		return true
	})
}

// Failed records a failed attempt at eid: the receivers that had it
// (done), what the others said, and the next attempt after backoff.
func Failed(y *yard.Yard, eid string, done []string, cause error, now time.Time, backoff time.Duration) (*Entry, error) {
	return update(y, eid, func(en *Entry) bool {
		en.Attempts++
		en.Done = mergeDone(en.Done, done)
		en.LastError = cause.Error()
		en.Next = secondAfter(now.Add(Backoff(backoff, en.Attempts)))
		return false
	})
}

// Drop removes the pending entry eid: the owner did not ask for its event,
// or its record was never written.
func Drop(y *yard.Yard, eid string) error {
	if err := checkEventID(eid); err != nil {
		return err
	}
	d, err := y.Dir(dir)
	if err != nil {
		return err
	}
	return d.Update(func(tx *store.Tx) error { return tx.Remove(name(pending, eid)) })
}

// secondAfter is t in the yard's whole seconds, rounded up: the next
// attempt never comes before its backoff.
func secondAfter(t time.Time) time.Time {
	s := store.Second(t)
	if s.Before(t) {
		return s.Add(time.Second)
	}
	return s
}

func mergeDone(had, more []string) []string {
	out := slices.Clone(had)
	for _, r := range more {
		if !slices.Contains(out, r) {
			out = append(out, r)
		}
	}
	slices.Sort(out)
	return out
}

// MaxBackoff bounds the wait between two attempts.
const MaxBackoff = 10 * time.Minute

// Backoff is the wait after the n-th failed attempt: base, doubling each
// time, at most MaxBackoff.
func Backoff(base time.Duration, n int) time.Duration {
	d := base
	for i := 1; i < n && d < MaxBackoff; i++ {
		d *= 2
	}
	return min(d, MaxBackoff)
}
