// Package run is the record of one box run: runs/<run-id>/run.json, with
// box.log, brief.json and the workspace beside it. The supervisor writes
// it; the gateway reads it to serve the run's box inside the box's network
// namespace, and answers with runs/<run-id>/gateway.json once it does. A
// run moves along state.RunMachine (starting -> running -> exited |
// failed) through lib/transition, like a task or a gate: every transition
// is checked, kept in the run's history and recorded once in the imp's
// journal and the audit log, under the lock of runs/<run-id>/.
package run

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/impyard/impyard/lib/event"
	"github.com/impyard/impyard/lib/id"
	"github.com/impyard/impyard/lib/state"
	"github.com/impyard/impyard/lib/store"
	"github.com/impyard/impyard/lib/transition"
	"github.com/impyard/impyard/lib/yard"
)

// Kind and major of a run file.
const (
	Kind  = "run"
	Major = 1
)

// Run states: those of state.RunMachine.
const (
	Starting = state.Starting
	Running  = state.Running
	Exited   = state.Exited
	Failed   = state.Failed
)

// Run is runs/<run-id>/run.json.
type Run struct {
	Schema string `json:"schema"`
	ID     string `json:"id"`
	Imp    string `json:"imp"`
	Task   string `json:"task"`
	State  string `json:"state"`
	NetNS  string `json:"netns,omitempty"`
	// Runtime is the OCI runtime the box runs under (runc, crun, runsc)
	// and RuntimeVersion its version as it reports it; a run written
	// before runs recorded them has neither, and ran under runc.
	Runtime        string     `json:"runtime,omitempty"`
	RuntimeVersion string     `json:"runtime_version,omitempty"`
	Created        time.Time  `json:"created"`
	Started        *time.Time `json:"started,omitempty"`
	Ended          *time.Time `json:"ended,omitempty"`
	Exit           *Exit      `json:"exit,omitempty"`
	Error          string     `json:"error,omitempty"`
	// History is every transition, in order; a run written before runs
	// kept one has none.
	History []state.Transition `json:"history,omitempty"`
}

// Exit is how the box ended.
type Exit struct {
	Code    int    `json:"code"`
	Signal  string `json:"signal,omitempty"`
	Ceiling bool   `json:"ceiling,omitempty"`
	OOM     bool   `json:"oom,omitempty"`
	Killed  bool   `json:"killed,omitempty"`
	Reason  string `json:"reason,omitempty"`
}

// Live reports whether the run's box may still be running.
func (r *Run) Live() bool { return r.State == Starting || r.State == Running }

// Ready is runs/<run-id>/gateway.json: the gateway serves the box.
type Ready struct {
	Schema string    `json:"schema"`
	Run    string    `json:"run"`
	Listen string    `json:"listen"`
	At     time.Time `json:"at"`
}

// Dir opens (creating) runs/<id>/.
func Dir(y *yard.Yard, runID string) (*store.Dir, error) {
	if err := id.Check(id.Run, runID); err != nil {
		return nil, err
	}
	return y.Dir("runs", runID)
}

// Change is one requested transition of a run.
type Change struct {
	To    string
	By    string
	Actor string
	Why   string
	// Edit changes other fields in the same write (how the box exited).
	Edit func(r *Run) error
}

// ErrExists is a run created twice.
var ErrExists = errors.New("already filed")

// Create files a new run, starting, with the fields of r (its id, imp,
// task, namespace, creation time); by, actor and why are who started it
// and for what.
func Create(y *yard.Yard, r *Run, by, actor, why string) (*Run, error) {
	if err := id.Check(id.Run, r.ID); err != nil {
		return nil, err
	}
	s, err := runs(y, r.ID)
	if err != nil {
		return nil, err
	}
	nr := *r
	nr.Schema, nr.State, nr.History = store.Schema(Kind, Major), "", nil
	h := state.Transition{To: Starting, By: by, Actor: actor, Why: why}
	h.Stamp(state.Now())
	nr.Apply(h)
	got, _, err := transition.Create(s, func(tx *store.Tx) (*Run, bool, error) {
		found, err := y.Exists(tx.Path(fileName))
		if err == nil && found {
			err = fmt.Errorf("run %s: %w in %s", r.ID, ErrExists, s.Dir.Path())
		}
		return &nr, false, err
	}, nil)
	return got, err
}

// Move applies one transition to a run through the run machine (see
// transition.Move for the sequence and its invariant); an illegal one is
// refused with an error wrapping state.ErrIllegal.
func Move(y *yard.Yard, runID string, c Change) (*Run, error) {
	// A run that is not there is refused before its directory is made.
	if _, err := Read(y, runID); err != nil {
		return nil, err
	}
	s, err := runs(y, runID)
	if err != nil {
		return nil, err
	}
	r, err := transition.Move(s, runID, transition.Change[*Run]{To: c.To, By: c.By, Actor: c.Actor, Why: c.Why, Edit: transition.RecordOnly(c.Edit)})
	if err != nil {
		return nil, err
	}
	return r, nil
}

// Write records r as its run's state: a run not yet filed is created,
// then moved to r.State if that is not starting; a filed one moves to
// r.State through the run machine, taking r's namespace, exit and error.
// It records no one as the cause; the supervisor uses Create and Move.
func Write(y *yard.Yard, r *Run) error {
	if _, err := Read(y, r.ID); store.IsNotExist(err) {
		if _, err := Create(y, r, "", "", ""); err != nil {
			return err
		}
		if r.State == Starting {
			return nil
		}
	} else if err != nil {
		return err
	}
	_, err := Move(y, r.ID, Change{To: r.State, Why: r.Error, Edit: func(cur *Run) error {
		cur.NetNS, cur.Exit = r.NetNS, r.Exit
		return nil
	}})
	return err
}

// Repair records the last transition of a run whose writer died between
// its state write and its records. A run's next transition does this
// first; a run that will not move again (it ended) needs this call, which
// the supervisor makes when it starts. Without a marker it takes no lock.
func Repair(y *yard.Yard, runID string) error {
	if err := id.Check(id.Run, runID); err != nil {
		return err
	}
	if _, marked := event.Interrupted(y.Path("runs", runID)); !marked {
		return nil
	}
	s, err := runs(y, runID)
	if err != nil {
		return err
	}
	return transition.Repair(s)
}

const fileName = "run.json"

// runs is the store of one run: runs/<run-id>/ and its lock.
func runs(y *yard.Yard, runID string) (transition.Store[*Run], error) {
	d, err := Dir(y, runID)
	if err != nil {
		return transition.Store[*Run]{}, err
	}
	return transition.Store[*Run]{
		Yard: y, Dir: d, Kind: Kind, IDKind: id.Run, Machine: state.RunMachine,
		Read:   func(_ *store.Tx, runID string) (*Run, error) { return Read(y, runID) },
		Write:  transition.WriteJSON(func(*Run) string { return fileName }),
		Detail: func(r *Run, e *event.Event) { e.Task = r.Task },
	}, nil
}

// Timeline returns who the run is and where it stands.
func (r *Run) Timeline() transition.Timeline {
	return transition.Timeline{ID: r.ID, Imp: r.Imp, State: r.State, History: r.History}
}

// Apply makes h the run's latest transition: running sets when the box
// started, an end sets when it ended, and a failure's why is its error.
func (r *Run) Apply(h state.Transition) {
	r.History = append(r.History, h)
	r.State = h.To
	at := h.At
	switch {
	case h.To == Running && r.Started == nil:
		r.Started = &at
	case state.RunMachine.Terminal(h.To) && r.Ended == nil:
		r.Ended = &at
	}
	if h.To == Failed {
		r.Error = h.Why
	}
}

// Read reads a run's run.json, refusing it when a directory on the way
// below the yard root is a symlink.
func Read(y *yard.Yard, runID string) (*Run, error) {
	if err := id.Check(id.Run, runID); err != nil {
		return nil, err
	}
	p := y.Path("runs", runID, fileName)
	b, err := y.ReadFile(p)
	if err != nil {
		return nil, err
	}
	var r Run
	if err := store.Decode(p, b, Kind, Major, &r); err != nil {
		return nil, err
	}
	switch {
	case r.ID != runID:
		return nil, fmt.Errorf("%s: id %q does not match its directory", p, r.ID)
	case !state.RunMachine.Known(r.State):
		return nil, fmt.Errorf("%s: unknown state %q", p, r.State)
	}
	return &r, nil
}

// WriteReady records that the gateway serves the run's box at listen.
func WriteReady(y *yard.Yard, runID, listen string) error {
	d, err := Dir(y, runID)
	if err != nil {
		return err
	}
	b, err := store.Encode(Ready{Schema: store.Schema("ready", 1), Run: runID, Listen: listen, At: store.Now()})
	if err != nil {
		return err
	}
	return d.Update(func(tx *store.Tx) error { return tx.Write("gateway.json", b) })
}

// WaitReady waits until the gateway answered for the run, or timeout.
func WaitReady(y *yard.Yard, runID string, timeout time.Duration) error {
	p := y.Path("runs", runID, "gateway.json")
	deadline := time.Now().Add(timeout)
	wait := 2 * time.Millisecond
	for {
		if _, err := store.ReadFile(p); err == nil {
			return nil
		} else if !errors.Is(err, os.ErrNotExist) {
			return err
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("run %s: the gateway did not start serving the box within %v (is impgw serve running on this yard?)", runID, timeout)
		}
		// impgw attaches within milliseconds of seeing the run: look
		// often at first, then back off, so a gateway that is not
		// running costs a few stats a second, not hundreds.
		time.Sleep(wait)
		wait = min(2*wait, 50*time.Millisecond)
	}
}

// List returns the ids of every run directory, oldest first.
func List(y *yard.Yard) ([]string, error) {
	entries, err := os.ReadDir(y.Path("runs"))
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var ids []string
	for _, e := range entries {
		if e.IsDir() && id.Check(id.Run, e.Name()) == nil {
			ids = append(ids, e.Name())
		}
	}
	return ids, nil
}

// BoxLog is the name of a run's box output, beside run.json.
const BoxLog = "box.log"

// Path joins rel onto the run's directory.
func Path(y *yard.Yard, runID string, rel ...string) string {
	return filepath.Join(append([]string{y.Path("runs", runID)}, rel...)...)
}

// Resolve returns the run id that s names, whole or by a unique prefix
// (see id.Resolve), among the run directories.
func Resolve(y *yard.Yard, s string) (string, error) {
	return id.Resolve(id.Run, s, Root(y), func() ([]string, error) { return y.IDs(id.Run, "", "runs") })
}
