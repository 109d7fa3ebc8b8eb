package queue

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"time"

	"github.com/impyard/impyard/lib/id"
	"github.com/impyard/impyard/lib/state"
	"github.com/impyard/impyard/lib/store"
	"github.com/impyard/impyard/lib/transition"
	"github.com/impyard/impyard/lib/yard"
)

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
	// Source names the inbound source the text came from, if any.
	Source string
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
	if o.Source != "" {
		if err := id.CheckName(o.Source); err != nil {
			return fmt.Errorf("source: %w", err)
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
		first := state.Transition{To: state.Waiting, By: o.By, Actor: o.Actor, Why: "added by " + o.Actor}
		first.Stamp(state.Now())
		now := first.At
		t := &Task{
			Schema: store.Schema(Kind, Major), Imp: o.Imp, State: state.Waiting,
			Kind: o.Kind, Text: o.Text, Proactive: o.Proactive, Labels: o.Labels,
			Repo: o.Repo, Base: o.Base, Continues: o.Continues, Unique: o.Unique, Source: o.Source, Continue: o.Continue,
			Attempt: 1, Created: now, Updated: now,
			History: []state.Transition{first},
		}
		if !o.NotBefore.IsZero() {
			// whole seconds, rounded up: never before the time asked
			nb := store.Second(o.NotBefore.Add(time.Second - time.Nanosecond))
			t.NotBefore = &nb
		}
		t.ID = s.NewID(tx, func(taskID string) []string { return []string{fileName(taskID)} })
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
