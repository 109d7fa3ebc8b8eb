package executor

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/impyard/impyard/lib/home"
	"github.com/impyard/impyard/lib/store"
)

// A signed approval stays valid in a copy of the gate, so whoever can
// write the yard could put an executed gate back in its approved state
// and have it sent again. The executor therefore keeps, outside the yard,
// a marker per gate it took to executing, IMPYARD_HOME/executed/<gate>,
// and refuses an approved gate that has one. Resuming an executing gate
// needs no such check: a non-idempotent executor never resumes, and an
// idempotent one sends the same Idempotency-Key.

// ErrReplayed is an approved gate this executor already took to executing.
var ErrReplayed = errors.New("approval already used")

func (r *Runner) startedPath(gateID string) string {
	return home.Dir(r.Home).Executed(gateID)
}

// replayed reports an approved gate that was already taken to executing.
func (r *Runner) replayed(gateID string) error {
	p := r.startedPath(gateID)
	_, err := os.Lstat(p)
	switch {
	case err == nil:
		return fmt.Errorf("%w: gate %s was already taken to executing once (%s), so this approved state was written back into the yard", ErrReplayed, gateID, p)
	case errors.Is(err, os.ErrNotExist):
		return nil
	}
	return err
}

// markStarted records that gateID was taken to executing, durably (the
// marker fsynced and synced into executed/, which is synced into
// IMPYARD_HOME when made), before anything is sent: after a power cut the
// approval is still known used.
func (r *Runner) markStarted(gateID string) error {
	p := r.startedPath(gateID)
	if err := home.Dir(r.Home).Private(filepath.Dir(p)); err != nil {
		return err
	}
	_, err := store.WriteNew(p, []byte(store.FormatTime(time.Now())+"\n"), 0o600)
	return err
}
