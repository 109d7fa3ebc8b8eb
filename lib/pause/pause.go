// Package pause is the owner's stop: pause/pause.json in the yard says
// whether the whole yard or which imps are paused, why, by whom and since
// when, with a sequence number that grows with every change. While an imp
// is paused nothing of it is dispatched, its schedules skip (and record)
// their times, the gateway refuses its runs' requests and proposals, and
// impexec holds its approved gates.
//
// Guarantees:
//   - A change is one transaction under pause/.lock, written through
//     lib/store: a reader sees the old state or the new, never a mix, and
//     Seq never goes back.
//   - A pause file that exists but does not read is the whole yard
//     paused (Load's State says so, with the file's error as the reason):
//     a damaged stop never lets work through.
//   - Each daemon that applies pauses (impsup, impgw) writes the Seq it
//     has applied into pause/ack-<daemon>.json; Wait returns once every
//     daemon asked for has acknowledged the Seq, or names those that have
//     not.
//
// Limits: the file lies in the yard, so anyone who can write the yard can
// pause imps, and can also remove a pause (see impyard-security(7)).
package pause

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/impyard/impyard/lib/id"
	"github.com/impyard/impyard/lib/store"
	"github.com/impyard/impyard/lib/watch"
	"github.com/impyard/impyard/lib/yard"
)

// Kinds and majors of the pause file and of an acknowledgement.
const (
	Kind     = "pause"
	Major    = 1
	AckKind  = "pause-ack"
	AckMajor = 1
)

// Dir is the yard directory of the pause file and the acknowledgements;
// Name is the pause file in it.
const (
	Dir  = "pause"
	Name = "pause.json"
)

// Entry is one pause: of the whole yard, or of one imp.
type Entry struct {
	Reason string    `json:"reason"`
	By     string    `json:"by"`
	At     time.Time `json:"at"`
	// Stop asked that running boxes be stopped, not only that nothing
	// new start.
	Stop bool `json:"stop,omitempty"`
	// Seq is the change that made this entry.
	Seq int `json:"seq"`
}

// State is the pause file.
type State struct {
	Schema string            `json:"schema"`
	Seq    int               `json:"seq"`
	Yard   *Entry            `json:"yard,omitempty"`
	Imps   map[string]*Entry `json:"imps,omitempty"`
}

// Ack is a daemon's acknowledgement: the Seq it has applied.
type Ack struct {
	Schema string    `json:"schema"`
	Daemon string    `json:"daemon"`
	Seq    int       `json:"seq"`
	PID    int       `json:"pid"`
	At     time.Time `json:"at"`
}

// ErrDamaged marks a pause file that exists but cannot be read: the yard
// counts as paused.
var ErrDamaged = errors.New("the pause file cannot be read")

// Path is pause/pause.json.
func Path(y *yard.Yard) string { return y.Path(Dir, Name) }

// Load reads the pause file. A missing file is nothing paused. A file that
// does not read returns a State with the whole yard paused, its reason the
// error, and the error itself, which wraps ErrDamaged.
func Load(y *yard.Yard) (*State, error) {
	b, err := store.ReadFileIn(y.Root, filepath.Join(Dir, Name))
	if errors.Is(err, os.ErrNotExist) {
		return &State{Schema: store.Schema(Kind, Major)}, nil
	}
	var s State
	if err == nil {
		err = store.Decode(Path(y), b, Kind, Major, &s)
	}
	if err == nil {
		err = s.check()
	}
	if err != nil {
		err = fmt.Errorf("%w: %w", ErrDamaged, err)
		return &State{Schema: store.Schema(Kind, Major), Yard: &Entry{Reason: err.Error(), By: "impyard"}}, err
	}
	return &s, nil
}

func (s *State) check() error {
	if s.Seq < 0 {
		return fmt.Errorf("seq %d is negative", s.Seq)
	}
	for imp, e := range s.Imps {
		if err := id.CheckName(imp); err != nil {
			return err
		}
		if e == nil {
			return fmt.Errorf("imp %s: empty entry", imp)
		}
	}
	return nil
}

// Of is the pause that holds imp: the yard's, else imp's own; nil when
// imp is not paused.
func (s *State) Of(imp string) *Entry {
	if s.Yard != nil {
		return s.Yard
	}
	return s.Imps[imp]
}

// Any reports whether anything is paused.
func (s *State) Any() bool { return s.Yard != nil || len(s.Imps) > 0 }

// Why is the reason a paused imp's work is refused, naming the pause and
// how to lift it; "" when imp is not paused.
func (s *State) Why(imp string) string {
	e := s.Of(imp)
	if e == nil {
		return ""
	}
	what, lift := "imp "+imp+" is paused", "impsup resume "+imp
	if s.Yard != nil {
		what, lift = "the yard is paused", "impsup resume"
	}
	return fmt.Sprintf("%s (pause %d by %s at %s: %s); '%s' lifts it", what, e.Seq, e.By, store.Second(e.At).Format(time.RFC3339), e.Reason, lift)
}

// Lines describes what is paused, the yard first, then imps by name.
func (s *State) Lines() []string {
	var out []string
	if e := s.Yard; e != nil {
		out = append(out, describe("yard", e))
	}
	for _, imp := range slices.Sorted(maps.Keys(s.Imps)) {
		out = append(out, describe("imp "+imp, s.Imps[imp]))
	}
	return out
}

func describe(what string, e *Entry) string {
	stop := ""
	if e.Stop {
		stop = ", boxes stopped"
	}
	return fmt.Sprintf("PAUSED %s since %s by %s%s: %s", what, store.Second(e.At).Format(time.RFC3339), e.By, stop, e.Reason)
}

// Change is one pause or resume: of imps, or of the whole yard when Imps
// is empty.
type Change struct {
	Imps   []string
	Reason string
	By     string
	At     time.Time
	Stop   bool
}

// Pause records c as paused and returns the new state. Pausing what is
// paused already replaces its entry (a new reason, or --stop added).
func Pause(y *yard.Yard, c Change) (*State, error) {
	if strings.TrimSpace(c.Reason) == "" {
		c.Reason = "paused by the owner"
	}
	return update(y, c.Imps, func(s *State) {
		e := &Entry{Reason: c.Reason, By: c.By, At: store.Second(c.At), Stop: c.Stop, Seq: s.Seq}
		if len(c.Imps) == 0 {
			s.Yard = e
			return
		}
		if s.Imps == nil {
			s.Imps = map[string]*Entry{}
		}
		for _, imp := range c.Imps {
			s.Imps[imp] = e
		}
	})
}

// Resume lifts the pauses c names: with no imps, every pause (the yard's
// and each imp's); with imps, theirs. An imp resumed while the yard stays
// paused is still held by the yard's pause.
func Resume(y *yard.Yard, c Change) (*State, error) {
	return update(y, c.Imps, func(s *State) {
		if len(c.Imps) == 0 {
			s.Yard, s.Imps = nil, nil
			return
		}
		for _, imp := range c.Imps {
			delete(s.Imps, imp)
		}
		if len(s.Imps) == 0 {
			s.Imps = nil
		}
	})
}

// update applies edit to the pause file under pause/.lock with the next
// Seq. A damaged file is replaced: the owner's explicit change is what
// the yard should say now, and the old file's bytes help no one.
func update(y *yard.Yard, imps []string, edit func(s *State)) (*State, error) {
	for _, imp := range imps {
		if err := id.CheckName(imp); err != nil {
			return nil, err
		}
	}
	d, err := y.Dir(Dir)
	if err != nil {
		return nil, err
	}
	var out *State
	err = d.Update(func(tx *store.Tx) error {
		s := &State{}
		b, err := tx.Read(Name)
		switch {
		case errors.Is(err, os.ErrNotExist):
		case err != nil:
			return err
		default:
			var old State
			if store.Decode(tx.Path(Name), b, Kind, Major, &old) == nil && old.check() == nil {
				s = &old
			} else {
				// Keep the number growing past whatever the file held.
				s.Seq = seqOf(b)
			}
		}
		s.Schema = store.Schema(Kind, Major)
		s.Seq++
		edit(s)
		nb, err := store.Encode(s)
		if err != nil {
			return err
		}
		if err := tx.Write(Name, nb); err != nil {
			return err
		}
		out = s
		return nil
	})
	return out, err
}

// seqOf finds a seq in a damaged file, so a replacement's is larger.
func seqOf(b []byte) int {
	var v struct {
		Seq int `json:"seq"`
	}
	// Leniently: the file is damaged, only its number is wanted.
	if json.Unmarshal(b, &v) == nil && v.Seq > 0 {
		return v.Seq
	}
	return 0
}

func ackName(daemon string) string { return "ack-" + daemon + ".json" }

// Acknowledge records that daemon has applied seq.
func Acknowledge(y *yard.Yard, daemon string, seq int, now time.Time) error {
	if err := id.CheckName(daemon); err != nil {
		return err
	}
	d, err := y.Dir(Dir)
	if err != nil {
		return err
	}
	b, err := store.Encode(Ack{Schema: store.Schema(AckKind, AckMajor), Daemon: daemon, Seq: seq, PID: os.Getpid(), At: store.Second(now)})
	if err != nil {
		return err
	}
	return d.Update(func(tx *store.Tx) error { return tx.Write(ackName(daemon), b) })
}

// Acknowledged is the Seq daemon last acknowledged; 0 when it never did.
func Acknowledged(y *yard.Yard, daemon string) (int, error) {
	if err := id.CheckName(daemon); err != nil {
		return 0, err
	}
	rel := filepath.Join(Dir, ackName(daemon))
	b, err := store.ReadFileIn(y.Root, rel)
	if errors.Is(err, os.ErrNotExist) {
		return 0, nil
	}
	if err != nil {
		return 0, err
	}
	var a Ack
	if err := store.Decode(y.Path(rel), b, AckKind, AckMajor, &a); err != nil {
		return 0, err
	}
	return a.Seq, nil
}

// Wait waits until each of daemons has acknowledged seq or a later
// change, or ctx ends; it returns those that had not, in the order given.
func Wait(ctx context.Context, y *yard.Yard, daemons []string, seq int) []string {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	wake := make(chan struct{}, 1)
	poke := func() {
		select {
		case wake <- struct{}{}:
		default:
		}
	}
	if _, err := y.Dir(Dir); err == nil {
		go watch.Run(ctx, time.Second, watch.Handler{
			Dirs:   func() []string { return []string{y.Path(Dir)} },
			File:   func(string) { poke() },
			Rescan: poke,
		})
	}
	missing := daemons
	for {
		var left []string
		for _, d := range missing {
			if n, err := Acknowledged(y, d); err != nil || n < seq {
				left = append(left, d)
			}
		}
		missing = left
		if len(missing) == 0 {
			return nil
		}
		select {
		case <-ctx.Done():
			return missing
		case <-wake:
		}
	}
}

// Watch calls apply with the pause state at start, on every change of the
// pause file, and on a slow rescan every period, until ctx ends; errors
// of the watcher go to warn. apply gets Load's state and error.
func Watch(ctx context.Context, y *yard.Yard, period time.Duration, apply func(*State, error), warn func(error)) error {
	if _, err := y.Dir(Dir); err != nil {
		return err
	}
	reload := func() { apply(Load(y)) }
	return watch.Run(ctx, period, watch.Handler{
		Dirs: func() []string { return []string{y.Path(Dir)} },
		File: func(p string) {
			if filepath.Base(p) == Name {
				reload()
			}
		},
		Rescan: reload,
		Error:  warn,
	})
}
