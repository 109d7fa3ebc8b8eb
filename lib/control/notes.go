package control

import (
	"fmt"
	"net/http"
	"sync"

	"github.com/impyard/impyard/lib/config"
	"github.com/impyard/impyard/lib/event"
	"github.com/impyard/impyard/lib/token"
)

// noteQuota counts the journal notes of each run against org.toml's
// [gateway] notes_per_run and note_bytes_per_run, so one box cannot flood
// its journal (and the audit log, which every note also enters). The
// counts live in the gateway's memory: a restart starts them afresh.
type noteQuota struct {
	mu   sync.Mutex
	runs map[string]*runNotes
}

type runNotes struct {
	notes    int
	bytes    int64
	refusals bool // the refusal is on record
}

// quotaKey is what notes are counted by: the run, or for a token issued
// without one, its imp and task.
func quotaKey(sub *token.Subject) string {
	if sub.Run != "" {
		return sub.Run
	}
	return sub.Imp() + "/" + sub.Task
}

// admitNote takes a note of size bytes from the run's quota, or refuses
// it with 429. The first refusal of a run is recorded, once, in the
// imp's journal and the audit log; later ones are answered only, so
// refused notes cannot flood the logs either. undo gives the note back
// when it could not be written after all.
func (a *API) admitNote(sub *token.Subject, size int) (undo func(), err error) {
	org, err := a.org()
	if err != nil {
		// A quota still holds while org.toml does not load.
		org = config.Default()
	}
	maxNotes, maxBytes := org.Gateway.NotesPerRun, org.Gateway.NoteBytesPerRun
	key := quotaKey(sub)
	q := &a.notes
	q.mu.Lock()
	if q.runs == nil {
		q.runs = map[string]*runNotes{}
	}
	r := q.runs[key]
	if r == nil {
		r = &runNotes{}
		q.runs[key] = r
	}
	if r.notes+1 <= maxNotes && r.bytes+int64(size) <= maxBytes {
		r.notes++
		r.bytes += int64(size)
		q.mu.Unlock()
		return func() {
			q.mu.Lock()
			r.notes--
			r.bytes -= int64(size)
			q.mu.Unlock()
		}, nil
	}
	record := !r.refusals
	r.refusals = true
	q.mu.Unlock()
	msg := fmt.Sprintf("journal notes of %s: the quota of %d notes and %d bytes per run is reached", key, maxNotes, maxBytes)
	if record {
		err := event.Record(a.Yard, event.Event{Event: "note-quota", Imp: sub.Imp(), Actor: "impgw", By: sub.Imp(), Task: sub.Task,
			Why: msg + "; later notes of this run are refused without a record"})
		if err != nil {
			q.mu.Lock()
			r.refusals = false
			q.mu.Unlock()
			return nil, err
		}
	}
	return nil, fail(http.StatusTooManyRequests, "%s", msg)
}
