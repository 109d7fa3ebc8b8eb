// Package queue is the task queue: one JSON file per task at
// queue/<imp>/<task-id>.json, its state inside, changed only through the
// task state machine under the lock of queue/<imp>/.
//
// Costs stay flat as a queue grows: adding a task, adding with a unique key
// and moving a task each touch a constant number of files, never a scan of
// the directory; only listing reads every task.
package queue

import (
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"time"

	"github.com/impyard/impyard/lib/config"
	"github.com/impyard/impyard/lib/event"
	"github.com/impyard/impyard/lib/id"
	"github.com/impyard/impyard/lib/notify"
	"github.com/impyard/impyard/lib/state"
	"github.com/impyard/impyard/lib/store"
	"github.com/impyard/impyard/lib/transition"
	"github.com/impyard/impyard/lib/yard"
)

// Kind and major of a task file.
const (
	Kind  = "task"
	Major = 1
)

// Task kinds.
const (
	Research = "research"
	Code     = "code"
)

// MaxText bounds a task's text.
const MaxText = 256 << 10

// Task is one queued piece of work.
type Task struct {
	Schema    string   `json:"schema"`
	ID        string   `json:"id"`
	Imp       string   `json:"imp"`
	State     string   `json:"state"`
	Kind      string   `json:"kind"`
	Text      string   `json:"text"`
	Proactive bool     `json:"proactive"`
	Labels    []string `json:"labels,omitempty"`
	Repo      string   `json:"repo,omitempty"`
	Base      string   `json:"base,omitempty"`
	Continues string   `json:"continues,omitempty"`
	Unique    string   `json:"unique,omitempty"`
	// Source names the inbound source whose delivery filed the task: its
	// text is untrusted data from outside, never the owner's instruction.
	Source    string             `json:"source,omitempty"`
	Continue  bool               `json:"continue,omitempty"`
	NotBefore *time.Time         `json:"not_before,omitempty"`
	Attempt   int                `json:"attempt"`
	Runs      []string           `json:"runs,omitempty"`
	Reason    string             `json:"reason,omitempty"`
	Created   time.Time          `json:"created"`
	Updated   time.Time          `json:"updated"`
	History   []state.Transition `json:"history"`
}

// Active reports whether the task is still waiting or running.
func (t *Task) Active() bool { return t.State == state.Waiting || t.State == state.Running }

func fileName(taskID string) string { return taskID + ".json" }

// tasks is the store of imp's queue.
func tasks(y *yard.Yard, imp string) (transition.Store[*Task], error) {
	d, err := y.QueueDir(imp)
	if err != nil {
		return transition.Store[*Task]{}, err
	}
	return tasksIn(y, d, imp), nil
}

// tasksIn is the store of imp's queue, the store directory d.
func tasksIn(y *yard.Yard, d *store.Dir, imp string) transition.Store[*Task] {
	return transition.Store[*Task]{
		Yard: y, Dir: d, Kind: Kind, IDKind: id.Task, Machine: state.TaskMachine,
		Read: func(tx *store.Tx, taskID string) (*Task, error) {
			p := filepath.Join(d.Path(), fileName(taskID))
			if tx == nil {
				// Before the lock only a newer schema is looked for; the
				// whole file is decoded and checked under the lock, and
				// decoding it twice was a tenth of a transition's CPU.
				return nil, checkTask(y, p)
			}
			b, err := tx.Read(fileName(taskID))
			if err != nil {
				return nil, err
			}
			return parseTask(p, imp, b)
		},
		Write: transition.WriteJSON(func(t *Task) string { return fileName(t.ID) }),
		First: "task-added",
		// The first record carries a summary of the text.
		Detail: func(t *Task, e *event.Event) {
			if e.Seq == 1 {
				e.Why = summary(t.Text)
			}
		},
		Outbox: func(e event.Event) error { return notify.Enqueue(y, e, config.Notifies) },
	}
}

// Timeline returns who the task is and where it stands.
func (t *Task) Timeline() transition.Timeline {
	return transition.Timeline{ID: t.ID, Imp: t.Imp, State: t.State, History: t.History}
}

// Apply makes h the task's latest transition; its why, if any, becomes
// the task's reason.
func (t *Task) Apply(h state.Transition) {
	t.History = append(t.History, h)
	t.State, t.Updated = h.To, h.At
	if h.Why != "" {
		t.Reason = h.Why
	}
}

func summary(s string) string {
	s = strings.Join(strings.Fields(s), " ")
	if len(s) > 120 {
		s = s[:117] + "..."
	}
	return s
}

// readTask reads and validates one task file, refusing it when a
// directory on the way is a symlink.
func readTask(y *yard.Yard, path, imp string) (*Task, error) {
	b, err := y.ReadFile(path)
	if err != nil {
		return nil, err
	}
	return parseTask(path, imp, b)
}

// checkTask refuses a task file of a schema this impyard does not read.
func checkTask(y *yard.Yard, path string) error {
	b, err := y.ReadFile(path)
	if err != nil {
		return err
	}
	return store.CheckSchema(path, b, Kind, Major)
}

func parseTask(path, imp string, b []byte) (*Task, error) {
	var t Task
	if err := store.Decode(path, b, Kind, Major, &t); err != nil {
		return nil, err
	}
	switch {
	case id.Check(id.Task, t.ID) != nil || fileName(t.ID) != filepath.Base(path):
		return nil, fmt.Errorf("%s: id %q does not match the file name", path, t.ID)
	case t.Imp != imp:
		return nil, fmt.Errorf("%s: imp %q does not match its directory %q", path, t.Imp, imp)
	case !state.TaskMachine.Known(t.State):
		return nil, fmt.Errorf("%s: unknown state %q", path, t.State)
	}
	return &t, nil
}

// Locate returns the imp whose queue holds taskID.
func Locate(y *yard.Yard, taskID string) (string, error) {
	if err := id.Check(id.Task, taskID); err != nil {
		return "", err
	}
	var imps []string
	var bad []error
	d, err := store.OpenIn(y.Root, "queue")
	switch {
	case err == nil:
		defer d.Close()
		imps, bad = y.ImpsIn(d, "queue")
	case !store.IsNotExist(err):
		bad = []error{err}
	}
	for _, imp := range imps {
		found, err := d.Exists(filepath.Join(imp, fileName(taskID)))
		if err != nil {
			return "", err
		}
		if found {
			return imp, nil
		}
	}
	if len(bad) > 0 {
		return "", fmt.Errorf("task %s: not found in %s: %w", taskID, y.Path("queue"), errors.Join(bad...))
	}
	return "", fmt.Errorf("task %s: no such task in %s", taskID, y.Path("queue"))
}

// Get reads one task by id.
func Get(y *yard.Yard, taskID string) (*Task, error) {
	imp, err := Locate(y, taskID)
	if err != nil {
		return nil, err
	}
	return readTask(y, y.Path("queue", imp, fileName(taskID)), imp)
}

// Change is one requested transition.
type Change struct {
	To    string
	By    string
	Actor string
	Why   string
	// Edit, when set, changes other fields in the same write (a run id, a
	// new attempt); it sees the task before its state changes.
	Edit func(t *Task) error
}

// Move applies one transition to a task under its queue's lock: read,
// check the state machine, write, record the event (see transition.Move
// for the sequence and its invariant). Of two processes moving the same
// task out of a state, exactly one succeeds.
func Move(y *yard.Yard, taskID string, c Change) (*Task, error) {
	s, err := storeOf(y, taskID)
	if err != nil {
		return nil, err
	}
	t, err := transition.Move(s, taskID, transition.Change[*Task]{To: c.To, By: c.By, Actor: c.Actor, Why: c.Why, Edit: transition.RecordOnly(c.Edit)})
	if err != nil {
		return nil, err
	}
	return t, nil
}

// storeOf is the store of the queue that holds taskID. Locate has just
// found the task there, so the directory is not walked to create it.
func storeOf(y *yard.Yard, taskID string) (transition.Store[*Task], error) {
	imp, err := Locate(y, taskID)
	if err != nil {
		return transition.Store[*Task]{}, err
	}
	d, err := store.Existing(y.Root, filepath.Join("queue", imp))
	if err != nil {
		return transition.Store[*Task]{}, err
	}
	return tasksIn(y, d, imp), nil
}

// Hold records why a waiting task does not start yet: it stays waiting,
// and the reason becomes its visible Reason, in its history and journal.
// ErrNotWaiting refuses a task that has left waiting meanwhile.
func Hold(y *yard.Yard, taskID, by, actor, why string) (*Task, error) {
	s, err := storeOf(y, taskID)
	if err != nil {
		return nil, err
	}
	return transition.Move(s, taskID, transition.Change[*Task]{To: state.Waiting, By: by, Actor: actor, Why: why,
		Edit: func(t *Task, _ *state.Transition) error {
			if t.State != state.Waiting {
				return fmt.Errorf("task %s is %s: %w", t.ID, t.State, ErrNotWaiting)
			}
			return nil
		},
		Allow: func(t *Task) bool { return t.State == state.Waiting }})
}

// ErrNotWaiting refuses to hold a task that is no longer waiting.
var ErrNotWaiting = errors.New("not waiting")

// Retry moves a failed task back to waiting as a new attempt.
func Retry(y *yard.Yard, taskID, by, actor string) (*Task, error) {
	return Move(y, taskID, Change{To: state.Waiting, By: by, Actor: actor, Why: "retry", Edit: func(t *Task) error {
		t.Attempt++
		return nil
	}})
}

// Filter selects tasks in a listing; empty fields match everything.
type Filter struct {
	Imp   string
	State string
	// Known and Settled, for a daemon listing again and again, pass over
	// the files of tasks it is done with (see transition.Source).
	Known   *transition.Known
	Settled func(*Task) bool
}

// List reads every task matching f, sorted by id (creation time). A file
// that cannot be read or parsed is returned in bad, by name, and the rest
// are still listed.
func List(y *yard.Yard, f Filter) (tasks []*Task, bad []error) {
	bad, _ = Each(y, f, func(t *Task) error {
		tasks = append(tasks, t)
		return nil
	})
	return tasks, bad
}

// Each calls fn with every task matching f in id order (creation time),
// holding only a few hundred at a time (see transition.Each). A file that
// cannot be read or parsed is returned in bad, by name, and the rest are
// still passed to fn; an error from fn stops Each and is returned.
func Each(y *yard.Yard, f Filter, fn func(*Task) error) (bad []error, err error) {
	return EachAs(y, f, func(t *Task) *Task { return t }, fn)
}

// EachAs is Each passing fn prep's value of each task f selects. prep
// runs on the goroutines that read the files, several at once, so what
// a listing does with each task (render it) is spread over the cores
// rather than done in fn, one task at a time.
func EachAs[T any](y *yard.Yard, f Filter, prep func(*Task) T, fn func(T) error) (bad []error, err error) {
	imps := []string{f.Imp}
	if f.Imp == "" {
		imps, bad = y.Imps("queue")
	} else if err := id.CheckName(f.Imp); err != nil {
		return []error{err}, nil
	}
	var settled func(*prepared[T]) bool
	if f.Settled != nil {
		settled = func(p *prepared[T]) bool { return f.Settled(p.task) }
	}
	srcs := make([]transition.Source[*prepared[T]], len(imps))
	for i, imp := range imps {
		srcs[i] = transition.Source[*prepared[T]]{Rel: filepath.Join("queue", imp), Known: f.Known, Settled: settled,
			Parse: func(path string, b []byte) (*prepared[T], error) {
				t, err := parseTask(path, imp, b)
				if err != nil {
					return nil, err
				}
				p := &prepared[T]{task: t}
				if p.selected = f.State == "" || t.State == f.State; p.selected {
					p.v = prep(t)
				}
				return p, nil
			}}
	}
	more, err := transition.Each(y, Kind, id.Task, srcs, func(p *prepared[T]) error {
		if !p.selected {
			return nil
		}
		return fn(p.v)
	})
	return append(bad, more...), err
}

// prepared is a task read by EachAs and, when its filter selects it,
// prep's value of it.
type prepared[T any] struct {
	task     *Task
	selected bool
	v        T
}

// Resolve returns the task id that s names, whole or by a unique prefix
// (see id.Resolve), among the tasks of every imp's queue.
func Resolve(y *yard.Yard, s string) (string, error) {
	return id.Resolve(id.Task, s, y.Path("queue"), func() ([]string, error) { return IDs(y) })
}

// IDs lists the ids of the tasks of every imp's queue, those a prefix
// may name (see id.Shortest).
func IDs(y *yard.Yard) ([]string, error) {
	// Queue directories Imps refuses are passed over: a prefix names
	// only tasks that can be read.
	imps, _ := y.Imps("queue")
	var all []string
	for _, imp := range imps {
		ids, err := y.IDs(id.Task, ".json", "queue", imp)
		if err != nil {
			return nil, err
		}
		all = append(all, ids...)
	}
	return all, nil
}

// Repair records, in every imp's queue, the last transition of a task
// whose writer died between its state write and its records. A queue's
// next transition does this first; the supervisor calls Repair when it
// starts, for queues that may not move again (their last task ended).
// A queue without a marker takes no lock. It returns what it could not
// repair, by queue, and goes on with the rest.
func Repair(y *yard.Yard) []error {
	imps, bad := y.Imps("queue")
	for _, imp := range imps {
		if _, marked := event.Interrupted(y.Path("queue", imp)); !marked {
			continue
		}
		s, err := tasks(y, imp)
		if err == nil {
			err = transition.Repair(s)
		}
		if err != nil {
			bad = append(bad, fmt.Errorf("queue %s: %w", imp, err))
		}
	}
	return bad
}
