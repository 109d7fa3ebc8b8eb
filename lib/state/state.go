// Package state holds the three state machines of the yard, tasks, gates
// and runs, in one place. Every change of state in any binary goes through Check, so
// an illegal transition is refused the same way everywhere, and every
// transition is recorded as a Transition saying who, when and why.
package state

import (
	"errors"
	"fmt"
	"time"
)

// Sentinels for errors.Is: every refusal of Check matches ErrIllegal; a
// move to a state the machine does not have matches ErrUnknownState too.
var (
	ErrIllegal      = errors.New("illegal transition")
	ErrUnknownState = errors.New("unknown state")
)

// refusal keeps Check's messages as they read while letting callers test
// for the sentinel.
type refusal struct {
	msg      string
	sentinel error
}

func (e *refusal) Error() string        { return e.msg }
func (e *refusal) Is(target error) bool { return target == e.sentinel || target == ErrIllegal }

// Task states.
const (
	Waiting     = "waiting"
	Running     = "running"
	NeedsReview = "needs-review"
	Done        = "done"
	Failed      = "failed"
	Cancelled   = "cancelled"
)

// Gate states.
const (
	Filed     = "filed"
	Approved  = "approved"
	Denied    = "denied"
	Executing = "executing"
	Executed  = "executed"
	// Expired is a gate nobody decided before its deadline: final, and
	// no one's denial.
	Expired = "expired"
	// Failed is shared with tasks.
)

// Run states; Running and Failed are shared with tasks.
const (
	Starting = "starting"
	Exited   = "exited"
)

// Machine is a set of legal transitions.
type Machine struct {
	kind  string
	edges map[string][]string
}

// TaskMachine: waiting -> running -> needs-review | done | failed;
// needs-review -> done | failed; waiting | running | needs-review ->
// cancelled (the owner closes a task in review whose gates will not
// settle it: one expired, say); and retry,
// failed -> waiting, as a new attempt. A task that cannot be started at all
// (its imp has no usable configuration) fails from waiting, with the reason.
var TaskMachine = Machine{kind: "task", edges: map[string][]string{
	Waiting:     {Running, Cancelled, Failed},
	Running:     {NeedsReview, Done, Failed, Cancelled},
	NeedsReview: {Done, Failed, Cancelled},
	Failed:      {Waiting},
	Done:        nil,
	Cancelled:   nil,
}}

// GateMachine: filed -> approved | denied | expired; approved -> executing
// -> executed | failed. An approved gate may also fail before it executes (its payload no
// longer matches its hash, or no executor is configured): nothing was sent.
var GateMachine = Machine{kind: "gate", edges: map[string][]string{
	Filed:     {Approved, Denied, Expired},
	Approved:  {Executing, Failed},
	Executing: {Executed, Failed},
	Executed:  nil,
	Denied:    nil,
	Expired:   nil,
	Failed:    nil,
}}

// RunMachine: starting -> running -> exited | failed. A run fails from
// starting when its box could not be made or the supervisor stopped first;
// it exits from starting when its box ran but the move to running could
// not be recorded, so how the box ended is still recorded.
var RunMachine = Machine{kind: "run", edges: map[string][]string{
	Starting: {Running, Exited, Failed},
	Running:  {Exited, Failed},
	Exited:   nil,
	Failed:   nil,
}}

// Known reports whether s is a state of the machine.
func (m Machine) Known(s string) bool {
	_, ok := m.edges[s]
	return ok
}

// States lists the machine's states.
func (m Machine) States() []string {
	var out []string
	for s := range m.edges {
		out = append(out, s)
	}
	return out
}

// Terminal reports whether no transition leaves s.
func (m Machine) Terminal(s string) bool {
	return m.Known(s) && len(m.edges[s]) == 0
}

// Check returns an error unless from -> to is legal for the entity id:
// ErrUnknownState for a target the machine does not have, ErrIllegal for
// any other move the machine does not allow.
func (m Machine) Check(id, from, to string) error {
	if !m.Known(to) {
		return &refusal{fmt.Sprintf("%s %s: unknown state %q", m.kind, id, to), ErrUnknownState}
	}
	for _, s := range m.edges[from] {
		if s == to {
			return nil
		}
	}
	if from == to {
		return &refusal{fmt.Sprintf("%s %s is already %s", m.kind, id, from), ErrIllegal}
	}
	if m.Terminal(from) {
		return &refusal{fmt.Sprintf("%s %s is %s, which is final; it cannot become %s", m.kind, id, from, to), ErrIllegal}
	}
	return &refusal{fmt.Sprintf("%s %s is %s; it cannot become %s", m.kind, id, from, to), ErrIllegal}
}

// Transition is one recorded change of state.
type Transition struct {
	From  string    `json:"from,omitempty"`
	To    string    `json:"to"`
	By    string    `json:"by"`
	Actor string    `json:"actor,omitempty"`
	At    time.Time `json:"at"` // whole seconds, UTC: what an approval signs
	// AtMS is the same instant in unix milliseconds, for the transition's
	// event line (its ts_ms). It is not written in the state file, which
	// is decoded strictly: an impyard that does not know a field refuses
	// the file. The order of a file's history is its order.
	AtMS int64  `json:"-"`
	Why  string `json:"why,omitempty"`
}

// Stamp sets the transition's time to now: At in whole seconds (the
// yard's form, which jq's fromdateiso8601 reads) and AtMS, kept for its
// event line, to the millisecond.
func (t *Transition) Stamp(now time.Time) {
	t.At, t.AtMS = now.UTC().Truncate(time.Second), now.UnixMilli()
}

// Second is t as the yard records it: UTC, whole seconds.
func Second(t time.Time) time.Time { return t.UTC().Truncate(time.Second) }

// Now is replaceable so tests get deterministic times.
var Now = func() time.Time { return time.Now().UTC() }
