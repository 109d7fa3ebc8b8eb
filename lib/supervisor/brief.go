package supervisor

import (
	"encoding/json"
	"os"
	"time"

	"github.com/impyard/impyard/lib/gate"
	"github.com/impyard/impyard/lib/mailbox"
	"github.com/impyard/impyard/lib/queue"
	"github.com/impyard/impyard/lib/run"
	"github.com/impyard/impyard/lib/state"
	"github.com/impyard/impyard/lib/store"
)

// JournalSlice is how many of the imp's latest journal lines a brief holds.
const JournalSlice = 50

// Brief is brief.json: everything a fresh box knows of its imp's past.
type Brief struct {
	Schema    string            `json:"schema"`
	Run       string            `json:"run"`
	Task      *queue.Task       `json:"task"`
	Continues *queue.Task       `json:"continues,omitempty"`
	Open      []*gate.Gate      `json:"open_gates"`
	Resolved  []*gate.Gate      `json:"resolved_since_last_run"`
	Mailbox   []mailbox.Message `json:"mailbox"`
	Journal   []json.RawMessage `json:"journal"`
}

// writeBrief writes runs/<run-id>/brief.json, readable by the box's user,
// and marks the mailbox messages it carries delivered.
func (s *Supervisor) writeBrief(t *queue.Task, runID string) (string, error) {
	b := Brief{Schema: store.Schema("brief", 1), Run: runID, Task: t, Open: []*gate.Gate{}, Resolved: []*gate.Gate{}, Journal: []json.RawMessage{}}
	if t.Continues != "" {
		b.Continues, _ = queue.Get(s.Yard, t.Continues)
	}
	since := s.lastRunTime(t.Imp)
	gates, _ := gate.List(s.Yard, gate.Filter{All: true, Imp: t.Imp})
	for _, g := range gates {
		switch {
		case !state.GateMachine.Terminal(g.State):
			b.Open = append(b.Open, g)
		case g.Updated.After(since):
			b.Resolved = append(b.Resolved, g)
		}
	}
	jp, err := s.Yard.JournalPath(t.Imp)
	if err != nil {
		return "", err
	}
	var lines []json.RawMessage
	store.ScanBack(jp, func(line []byte) bool {
		if json.Valid(line) {
			lines = append(lines, append(json.RawMessage(nil), line...))
		}
		return len(lines) >= JournalSlice
	})
	for i := len(lines) - 1; i >= 0; i-- {
		b.Journal = append(b.Journal, lines[i])
	}
	if b.Mailbox, err = mailbox.Deliver(s.Yard, t.Imp, runID); err != nil {
		return "", err
	}
	if b.Mailbox == nil {
		b.Mailbox = []mailbox.Message{}
	}
	data, err := store.Encode(b)
	if err != nil {
		return "", err
	}
	d, err := run.Dir(s.Yard, runID)
	if err != nil {
		return "", err
	}
	if err := d.Update(func(tx *store.Tx) error { return tx.Write("brief.json", data) }); err != nil {
		return "", err
	}
	p := run.Path(s.Yard, runID, "brief.json")
	// The box reads it as its own, unprivileged user.
	return p, os.Chmod(p, 0o644)
}

// lastRunTime is when the imp's last run ended; the zero time (every
// resolved gate is news) when unknown. A marker that cannot be read is
// logged and replaced, so the next run's brief is right again.
func (s *Supervisor) lastRunTime(imp string) time.Time {
	at, ok, err := s.readMark(imp, lastRunMark)
	if err != nil {
		at, ok = s.recoverMark(imp, lastRunMark, err, s.now())
	}
	if !ok {
		return time.Time{}
	}
	return at
}
