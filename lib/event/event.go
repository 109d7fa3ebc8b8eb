// Package event writes the yard's two timelines: the per-imp journal
// (journal/<imp>/events.jsonl, the imp's view of its own history, which every
// actor appends to) and the audit log (runs/decisions.jsonl, which the
// gateway's request decisions share). Neither is ever read to decide
// anything: the state files are the truth, these are the story.
package event

import (
	"time"

	"github.com/impyard/impyard/lib/store"
	"github.com/impyard/impyard/lib/yard"
)

// Kind and major of an event line.
const (
	Kind  = "event"
	Major = 1
)

// Event is one line of a journal or of the audit log.
type Event struct {
	Schema string    `json:"schema"`
	TS     time.Time `json:"ts"`
	Event  string    `json:"event"`            // e.g. gate-filed, gate-approved, task-added, note
	Imp    string    `json:"imp"`              // whose timeline
	Actor  string    `json:"actor"`            // which program wrote it: impq, impgate, impgw, impexec, impsup, box
	By     string    `json:"by,omitempty"`     // the human or rule that caused it
	ID     string    `json:"id,omitempty"`     // the task or gate
	Task   string    `json:"task,omitempty"`   // the task a gate belongs to
	From   string    `json:"from,omitempty"`   // previous state
	To     string    `json:"to,omitempty"`     // new state
	Why    string    `json:"why,omitempty"`    // reason, note or rationale
	SHA256 string    `json:"sha256,omitempty"` // a gate's payload hash
	Intent string    `json:"intent,omitempty"`
}

// Record appends e to the imp's journal and to the audit log. Callers hold
// the lock of the store that changed, so events of one entity are appended
// in the order its transitions happened.
func Record(y *yard.Yard, e Event) error {
	e.Schema = store.Schema(Kind, Major)
	if e.TS.IsZero() {
		e.TS = time.Now().UTC()
	}
	line, err := store.Line(e)
	if err != nil {
		return err
	}
	jp, err := y.JournalPath(e.Imp)
	if err != nil {
		return err
	}
	if err := store.AppendLine(jp, line); err != nil {
		return err
	}
	ap, err := y.DecisionsPath()
	if err != nil {
		return err
	}
	return store.AppendLineAt(ap, line, "mid-audit-append")
}
