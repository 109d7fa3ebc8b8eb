package queue

import (
	"testing"

	"github.com/impyard/impyard/internal/tracetest"
)

// An add into a new imp's queue is acknowledged only once everything it
// made would survive a power cut: queue/<imp> synced into queue/, the
// task file and the .unique marker a retried add relies on to find it,
// and the records of its first transition.
func TestAddDurableInNewImp(t *testing.T) {
	y := newYard(t)
	rec := tracetest.Record(t)
	id := mustAdd(t, y, AddOptions{Imp: "nova", Unique: "digest"})
	for _, p := range []string{
		y.Path("queue", "nova", fileName(id)),
		y.Path("queue", "nova", uniqueName("digest")),
		y.Path("journal", "nova", "events.jsonl"),
		y.Path("runs", "decisions.jsonl"),
	} {
		if err := rec.Durable(rec.Len(), y.Root, p); err != nil {
			t.Errorf("%v\n%s", err, rec)
		}
	}
}
