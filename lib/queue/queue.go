// Package queue is the task queue: one JSON file per task at
// queue/<imp>/<task-id>.json, its state inside, changed only through the
// task state machine under the lock of queue/<imp>/.
//
// Costs stay flat as a queue grows: adding a task, adding with a unique key
// and moving a task each touch a constant number of files, never a scan of
// the directory; only listing reads every task.
package queue

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/impyard/impyard/lib/event"
	"github.com/impyard/impyard/lib/id"
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
	Schema    string             `json:"schema"`
	ID        string             `json:"id"`
	Imp       string             `json:"imp"`
	State     string             `json:"state"`
	Kind      string             `json:"kind"`
	Text      string             `json:"text"`
	Proactive bool               `json:"proactive"`
	Labels    []string           `json:"labels,omitempty"`
	Repo      string             `json:"repo,omitempty"`
	Base      string             `json:"base,omitempty"`
	Continues string             `json:"continues,omitempty"`
	Unique    string             `json:"unique,omitempty"`
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

// AddOptions describe a new task.
type AddOptions struct {
	Imp       string
	Text      string
	Kind      string
	Proactive bool
	Labels    []string
	Repo      string
	Base      string
	Continues string
	Unique    string
	// Once makes the add happen at most once ever for this key (a
	// continuation per gate): a second add returns the first task's id.
	Once string
	// Continue asks for a continuation task when one of this task's gates
	// resolves.
	Continue  bool
	NotBefore time.Time
	By        string // who asked
	Actor     string // which program
}

func fileName(taskID string) string { return taskID + ".json" }

// uniqueName is where the id of the latest task with a unique key is kept.
// The key is hashed so any key is a safe file name; the task file stays the
// truth and the marker only says which one to look at.
func uniqueName(key string) string {
	sum := sha256.Sum256([]byte(key))
	return filepath.Join(".unique", hex.EncodeToString(sum[:16]))
}

// onceName is where the task added under a once key is kept.
func onceName(key string) string {
	sum := sha256.Sum256([]byte(key))
	return filepath.Join(".once", hex.EncodeToString(sum[:16]))
}

func (o *AddOptions) check() error {
	if err := id.CheckName(o.Imp); err != nil {
		return err
	}
	if strings.TrimSpace(o.Text) == "" {
		return errors.New("task text is empty")
	}
	if len(o.Text) > MaxText {
		return fmt.Errorf("task text is %d bytes, over the %d limit", len(o.Text), MaxText)
	}
	switch o.Kind {
	case "":
		o.Kind = Research
	case Research, Code:
	default:
		return fmt.Errorf("unknown task kind %q: want research or code", o.Kind)
	}
	if o.Continues != "" {
		if err := id.Check(id.Task, o.Continues); err != nil {
			return err
		}
	}
	for _, l := range o.Labels {
		if l == "" || len(l) > 64 || strings.ContainsAny(l, "\x00\r\n\t") {
			return fmt.Errorf("invalid label %q", l)
		}
	}
	if len(o.Unique) > 1024 {
		return errors.New("unique key is over 1024 bytes")
	}
	return nil
}

// ErrUnrecorded is a task that was filed but whose record could not be
// written yet. The store's .recording mark stays, so the next change to
// that queue writes the record; the task itself exists, and a caller that
// retried the add would file it twice.
var ErrUnrecorded = transition.ErrUnrecorded

// Add files a new waiting task and returns its id. With a unique key, when
// the latest task filed with that key is still waiting or running, nothing
// is added and that task's id is returned with existed set; when that
// task's file has a schema this impyard does not read, Add refuses and
// writes nothing, not even the queue's lock file. Once the task file is
// written Add returns its id, and an error only wrapping ErrUnrecorded if
// the record could not follow.
func Add(y *yard.Yard, o AddOptions) (taskID string, existed bool, err error) {
	if err := o.check(); err != nil {
		return "", false, err
	}
	if o.Unique != "" {
		if _, err := uniqueHolder(y, o.Imp, o.Unique); err != nil {
			return "", false, err
		}
	}
	s, err := tasks(y, o.Imp)
	if err != nil {
		return "", false, err
	}
	t, existed, err := transition.Create(s, func(tx *store.Tx) (*Task, bool, error) {
		if o.Once != "" {
			if prev, err := tx.Read(onceName(o.Once)); err == nil {
				pid := strings.TrimSpace(string(prev))
				// The marker is written before the task: it counts only
				// once the task it names exists.
				if id.Check(id.Task, pid) == nil {
					found, err := y.Exists(tx.Path(fileName(pid)))
					if err != nil {
						return nil, false, err
					}
					if found {
						return &Task{ID: pid}, true, nil
					}
				}
			} else if !store.IsNotExist(err) {
				return nil, false, err
			}
		}
		if o.Unique != "" {
			old, err := uniqueHolder(y, o.Imp, o.Unique)
			if err != nil {
				return nil, false, err
			}
			if old != nil && old.Active() {
				return old, true, nil
			}
		}
		now := state.Now()
		t := &Task{
			Schema: store.Schema(Kind, Major), Imp: o.Imp, State: state.Waiting,
			Kind: o.Kind, Text: o.Text, Proactive: o.Proactive, Labels: o.Labels,
			Repo: o.Repo, Base: o.Base, Continues: o.Continues, Unique: o.Unique, Continue: o.Continue,
			Attempt: 1, Created: now, Updated: now,
			History: []state.Transition{{To: state.Waiting, By: o.By, Actor: o.Actor, At: now, Why: "added by " + o.Actor}},
		}
		if !o.NotBefore.IsZero() {
			nb := o.NotBefore.UTC()
			t.NotBefore = &nb
		}
		for {
			t.ID = id.New(id.Task)
			if _, err := os.Lstat(tx.Path(fileName(t.ID))); store.IsNotExist(err) {
				break
			}
		}
		return t, false, nil
	}, func(tx *store.Tx, t *Task) error {
		// The markers go first: one naming a task that is not there holds
		// nothing, while a task without its marker would let a retried add
		// file a duplicate.
		if o.Unique != "" {
			if err := tx.Write(uniqueName(o.Unique), []byte(t.ID+"\n")); err != nil {
				return err
			}
		}
		if o.Once != "" {
			return tx.Write(onceName(o.Once), []byte(t.ID+"\n"))
		}
		return nil
	})
	if t == nil {
		return "", false, err
	}
	return t.ID, existed, err
}

// tasks is the store of imp's queue.
func tasks(y *yard.Yard, imp string) (transition.Store[*Task], error) {
	d, err := y.QueueDir(imp)
	if err != nil {
		return transition.Store[*Task]{}, err
	}
	return transition.Store[*Task]{
		Yard: y, Dir: d, Kind: Kind, IDKind: id.Task, Machine: state.TaskMachine,
		Read: func(_ *store.Tx, taskID string) (*Task, error) {
			return readTask(y, filepath.Join(d.Path(), fileName(taskID)), imp)
		},
		Write: func(tx *store.Tx, t *Task) error {
			b, err := store.Encode(t)
			if err != nil {
				return err
			}
			return tx.Write(fileName(t.ID), b)
		},
		First: "task-added",
		// The first record carries a summary of the text.
		Detail: func(t *Task, e *event.Event) {
			if e.Seq == 1 {
				e.Why = summary(t.Text)
			}
		},
	}, nil
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

// uniqueHolder returns the latest task filed with the unique key, or nil
// when there is none or its file is missing or damaged. A task whose
// schema this impyard does not read is an error: it may well be active,
// and a duplicate must not be filed beside it.
func uniqueHolder(y *yard.Yard, imp, key string) (*Task, error) {
	b, err := y.ReadFile(y.Path("queue", imp, uniqueName(key)))
	if store.IsNotExist(err) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	pid := strings.TrimSpace(string(b))
	if id.Check(id.Task, pid) != nil {
		return nil, nil
	}
	t, err := readTask(y, y.Path("queue", imp, fileName(pid)), imp)
	if errors.Is(err, store.ErrUnknownMajor) {
		return nil, fmt.Errorf("unique key %q is held by a task this impyard cannot read: %w", key, err)
	}
	if err != nil {
		return nil, nil
	}
	return t, nil
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
	imps, bad := y.Imps("queue")
	for _, imp := range imps {
		found, err := y.Exists(y.Path("queue", imp, fileName(taskID)))
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
	imp, err := Locate(y, taskID)
	if err != nil {
		return nil, err
	}
	s, err := tasks(y, imp)
	if err != nil {
		return nil, err
	}
	tc := transition.Change[*Task]{To: c.To, By: c.By, Actor: c.Actor, Why: c.Why}
	if c.Edit != nil {
		tc.Edit = func(t *Task, _ *state.Transition) error { return c.Edit(t) }
	}
	t, err := transition.Move(s, taskID, tc)
	if err != nil {
		return nil, err
	}
	return t, nil
}

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
}

// List reads every task matching f, sorted by id (creation time). A file
// that cannot be read or parsed is returned in bad, by name, and the rest
// are still listed.
func List(y *yard.Yard, f Filter) (tasks []*Task, bad []error) {
	imps := []string{f.Imp}
	if f.Imp == "" {
		imps, bad = y.Imps("queue")
	} else if err := id.CheckName(f.Imp); err != nil {
		return nil, []error{err}
	}
	for _, imp := range imps {
		ts, errs := transition.Scan(y, filepath.Join("queue", imp), Kind, id.Task, nil,
			func(path string, b []byte) (*Task, error) { return parseTask(path, imp, b) })
		bad = append(bad, errs...)
		for _, t := range ts {
			if f.State == "" || t.State == f.State {
				tasks = append(tasks, t)
			}
		}
	}
	transition.Sort(tasks)
	return tasks, bad
}
