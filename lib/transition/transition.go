// Package transition owns the one sequence by which a record of the yard
// (a gate, a task, a run) comes into being or changes state. Each record
// lives in a store directory (lib/store) under that directory's lock, moves
// only along its state machine (lib/state), keeps its whole history, and has
// exactly one record per transition in the journal and the audit log
// (lib/event), repaired after a crash through the store's .recording
// marker. The packages of the records describe their files with a Store and
// call Create and Move; they never write the sequence out themselves.
package transition

import (
	"errors"
	"fmt"
	"os"

	"github.com/impyard/impyard/lib/crash"
	"github.com/impyard/impyard/lib/event"
	idpkg "github.com/impyard/impyard/lib/id"
	"github.com/impyard/impyard/lib/state"
	"github.com/impyard/impyard/lib/store"
	"github.com/impyard/impyard/lib/yard"
)

// Record is what the engine needs of a record type: its timeline, and a
// way to make a transition its latest.
type Record interface {
	Timeline() Timeline
	// Apply appends h to the history and takes on its state, with any
	// field the record keeps beside them (its update time, its reason).
	Apply(h state.Transition)
}

// Timeline is who a record is, whose journal tells its story, and where
// it stands.
type Timeline struct {
	ID, Imp, State string
	History        []state.Transition
}

// Store describes where and how one kind of record is kept.
type Store[R Record] struct {
	Yard *yard.Yard
	// Dir is the store directory whose lock guards the record.
	Dir *store.Dir
	// Kind names the record in errors (gate, task, run).
	Kind string
	// IDKind is the lib/id kind of the record's ids.
	IDKind  string
	Machine state.Machine
	// Read reads the record with the given id; a missing record wraps
	// os.ErrNotExist and one from a newer impyard store.ErrUnknownMajor.
	// Under the lock tx is the transaction, and Read may tidy what a
	// crash left beside the record, once the record is known readable.
	// In a store without a lock file yet it is also called before one is
	// created, with tx nil, to refuse a record from a newer impyard
	// without writing anything: then only its error wrapping
	// store.ErrUnknownMajor counts, and it may return no record.
	Read func(tx *store.Tx, id string) (R, error)
	// Write writes the record as it now is, under the lock.
	Write func(tx *store.Tx, r R) error
	// First names the event of a record's first transition; empty, it is
	// Kind-state like every other ("task-added" against "task-waiting").
	First string
	// Detail, when set, adds what the record's kind tells beside the
	// common fields to the record of its seq-th transition (e.Seq).
	Detail func(r R, e *event.Event)
	// Outbox, when set, is given each transition's record after the
	// record is written and before its journal and audit lines, and again
	// when a crash is recovered: what it writes is as durable as the
	// event (lib/notify).
	Outbox func(e event.Event) error
}

// Change is one requested transition.
type Change[R Record] struct {
	To    string
	By    string
	Actor string
	Why   string
	// Allow, when set, is asked first: true lets a transition the
	// machine would refuse (a gate approved again to add a signature).
	Allow func(r R) bool
	// Edit runs under the lock once the transition is found legal, on the
	// record as read and on the transition about to be appended (its time
	// set); it may change both. An error stops the move, writing nothing.
	Edit func(r R, h *state.Transition) error
}

// ErrUnrecorded is a record written whose journal and audit records could
// not follow. The store's .recording marker stays, so the next transaction
// on that store writes them; the record itself exists.
var ErrUnrecorded = errors.New("its record is not written yet")

// Move applies one transition to the record id. Its invariant: whatever
// process dies wherever, every transition written is recorded exactly once
// in the journal and the audit log before the next transition of any record
// of the store, and of two processes moving a record out of one state,
// exactly one succeeds. The sequence, whole under the store's lock:
//
//  1. lock the store;
//  2. recover an interrupted transition (the marker a dead writer left);
//  3. read the record;
//  4. check the state machine (or Allow);
//  5. apply the edit;
//  6. append the transition (who, when, why) to the history;
//  7. begin the marker, write the record, record the event, end the marker.
//
// A record from a newer impyard is refused, writing nothing: before the
// lock file is created when the store has none (s.Read with tx nil), else
// under the lock by the read of step 3, before anything is written.
func Move[R Record](s Store[R], id string, c Change[R]) (R, error) {
	var zero R
	if err := idpkg.Check(s.IDKind, id); err != nil {
		return zero, err
	}
	var r R
	err := s.Dir.UpdateChecked(func() error {
		if _, err := s.Read(nil, id); errors.Is(err, store.ErrUnknownMajor) {
			return err
		}
		return nil
	}, func(tx *store.Tx) error {
		if err := s.recoverInterrupted(tx); err != nil {
			return err
		}
		var err error
		if r, err = s.Read(tx, id); err != nil {
			return err
		}
		from := r.Timeline().State
		if c.Allow == nil || !c.Allow(r) {
			if err := s.Machine.Check(id, from, c.To); err != nil {
				return err
			}
		}
		h := state.Transition{From: from, To: c.To, By: c.By, Actor: c.Actor, Why: c.Why}
		h.Stamp(state.Now())
		if c.Edit != nil {
			if err := c.Edit(r, &h); err != nil {
				return err
			}
		}
		r.Apply(h)
		return s.commit(tx, r, 1)
	})
	if err != nil && !errors.Is(err, ErrUnrecorded) {
		return zero, err
	}
	return r, err
}

// Create writes a new record under the store's lock. fresh makes the
// record, its id chosen under the lock; with existing set, the record it
// returns is already there and Create returns it at once, so a retried
// create answers even while an interrupted transition cannot be recovered.
// Otherwise Create recovers an interrupted transition, checks that the new
// history follows the machine from a known first state, lets before (when
// set) write what must precede the record, and commits the record with
// one record per transition, in order, as Move does. Once the record is
// written a failed record is returned wrapping ErrUnrecorded, with the
// record: it exists, and the marker has its record written later.
func Create[R Record](s Store[R], fresh func(tx *store.Tx) (r R, existing bool, err error), before func(tx *store.Tx, r R) error) (r R, existing bool, err error) {
	err = s.Dir.Update(func(tx *store.Tx) error {
		var err error
		if r, existing, err = fresh(tx); err != nil || existing {
			return err
		}
		if err := s.recoverInterrupted(tx); err != nil {
			return err
		}
		tl := r.Timeline()
		if err := s.checkHistory(tl.ID, tl.History); err != nil {
			return err
		}
		if before != nil {
			if err := before(tx, r); err != nil {
				return err
			}
		}
		return s.commit(tx, r, len(tl.History))
	})
	if err != nil && !errors.Is(err, ErrUnrecorded) {
		var zero R
		return zero, false, err
	}
	return r, existing, err
}

// checkHistory checks that a new record's history is a walk of the machine.
func (s Store[R]) checkHistory(id string, history []state.Transition) error {
	if len(history) == 0 || history[0].From != "" || !s.Machine.Known(history[0].To) {
		return fmt.Errorf("%s %s: a new record must start with a transition into a known state", s.Kind, id)
	}
	for i := 1; i < len(history); i++ {
		if history[i].From != history[i-1].To {
			return fmt.Errorf("%s %s: transition %d starts from %q, not %q", s.Kind, id, i+1, history[i].From, history[i-1].To)
		}
		if err := s.Machine.Check(id, history[i].From, history[i].To); err != nil {
			return err
		}
	}
	return nil
}

// commit writes r and records its last n transitions between the marker's
// begin and end. A crash after the write leaves the marker for the next
// transaction's recovery; so does a failed record, returned wrapping
// ErrUnrecorded.
func (s Store[R]) commit(tx *store.Tx, r R, n int) error {
	tl := r.Timeline()
	if err := event.BeginTx(tx, tl.ID); err != nil {
		return err
	}
	if err := s.Write(tx, r); err != nil {
		return err
	}
	crash.Point("before-record")
	for seq := len(tl.History) - n + 1; seq <= len(tl.History); seq++ {
		e := s.eventOf(r, seq)
		if err := s.outbox(e); err != nil {
			return s.unrecorded(tl.ID, err)
		}
		crash.Point("after-outbox")
		if err := event.Record(s.Yard, e); err != nil {
			return s.unrecorded(tl.ID, err)
		}
	}
	if err := event.EndTx(tx); err != nil {
		return s.unrecorded(tl.ID, err)
	}
	return nil
}

// eventOf is the journal and audit record of r's seq-th transition.
func (s Store[R]) eventOf(r R, seq int) event.Event {
	tl := r.Timeline()
	h := tl.History[seq-1]
	e := event.Event{TS: h.At, TSMS: h.AtMS, Event: s.Kind + "-" + h.To, Imp: tl.Imp, Actor: h.Actor, By: h.By, ID: tl.ID, Seq: seq,
		From: h.From, To: h.To, Why: h.Why}
	if seq == 1 && s.First != "" {
		e.Event = s.First
	}
	if s.Detail != nil {
		s.Detail(r, &e)
	}
	return e
}

func (s Store[R]) unrecorded(id string, err error) error {
	return fmt.Errorf("%s %s filed, but %w (the next change to %s writes it): %w", s.Kind, id, ErrUnrecorded, s.Dir.Path(), err)
}

// Repair records the last transition of a record whose writer died between
// its state write and its records, taking the store's lock to do it.
func Repair[R Record](s Store[R]) error {
	return s.Dir.Update(func(tx *store.Tx) error { return s.recoverInterrupted(tx) })
}

// recoverInterrupted ensures the records of the latest transition of the
// record named by the store's marker, if a dead writer left one. Callers
// hold the store's lock.
func (s Store[R]) recoverInterrupted(tx *store.Tx) error {
	return event.Recover(s.Yard, tx, func(id string) (event.Event, bool, error) {
		if idpkg.Check(s.IDKind, id) != nil {
			return event.Event{}, false, nil
		}
		r, err := s.Read(tx, id)
		if store.IsNotExist(err) {
			return event.Event{}, false, nil
		}
		if err != nil {
			return event.Event{}, false, err
		}
		n := len(r.Timeline().History)
		if n == 0 {
			return event.Event{}, false, nil
		}
		e := s.eventOf(r, n)
		return e, true, s.outbox(e)
	})
}

func (s Store[R]) outbox(e event.Event) error {
	if s.Outbox == nil {
		return nil
	}
	return s.Outbox(e)
}

// NewID returns a new id of the store's kind for which none of the files
// names gives exists. Callers hold the store's lock, so the id stays free
// until they write.
func (s Store[R]) NewID(tx *store.Tx, names func(id string) []string) string {
	for {
		fresh := idpkg.New(s.IDKind)
		free := true
		for _, n := range names(fresh) {
			if _, err := os.Lstat(tx.Path(n)); !store.IsNotExist(err) {
				free = false
			}
		}
		if free {
			return fresh
		}
	}
}

// RecordOnly is the Edit of a change that edits the record alone; nil
// stays nil.
func RecordOnly[R Record](edit func(r R) error) func(r R, h *state.Transition) error {
	if edit == nil {
		return nil
	}
	return func(r R, _ *state.Transition) error { return edit(r) }
}

// WriteJSON is the Write of a store that keeps each record as one JSON
// file, named by name.
func WriteJSON[R Record](name func(r R) string) func(tx *store.Tx, r R) error {
	return func(tx *store.Tx, r R) error {
		b, err := store.Encode(r)
		if err != nil {
			return err
		}
		return tx.Write(name(r), b)
	}
}
