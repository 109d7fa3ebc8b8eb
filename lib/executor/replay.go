package executor

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/impyard/impyard/lib/home"
	"github.com/impyard/impyard/lib/store"
)

// A signed approval stays valid in a copy of the gate, so whoever can
// write the yard could put an executed gate back in its approved state
// and have it sent again. The executor therefore keeps, outside the yard,
// a marker per gate it took to executing, IMPYARD_HOME/executed/<gate>,
// and refuses an approved gate that has one.
//
// The same marker is the executor's "began" mark: it is written whole
// and synced immediately before the action, and nothing is sent without
// it. An executing gate without a whole marker was therefore never begun
// (its move to executing could not be recorded, the marker could not be
// written, or a crash came between them), and is begun now rather than
// failed as "outcome unknown". Only a gate whose marker is whole may have
// acted.

// ErrReplayed is an approved gate this executor already took to executing.
var ErrReplayed = errors.New("approval already used")

func (r *Runner) startedPath(gateID string) string {
	return home.Dir(r.Home).Executed(gateID)
}

// replayed reports an approved gate that was already taken to executing.
// Any marker counts, even one whose write failed: an approved gate never
// has one, since the marker follows the move to executing.
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

// began reports whether gateID's marker is whole: a regular file holding
// one full line, the time markStarted wrote and synced before anything
// was sent. A marker that is missing, or empty or cut short by a write
// that failed, means nothing was sent. Anything else in its place is an
// error, so the gate is neither sent nor failed.
func (r *Runner) began(gateID string) (bool, error) {
	p := r.startedPath(gateID)
	fi, err := os.Lstat(p)
	if errors.Is(err, os.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	if !fi.Mode().IsRegular() {
		return false, fmt.Errorf("%s: not a regular file", p)
	}
	b, err := store.ReadFile(p)
	if err != nil {
		return false, err
	}
	line, ok := strings.CutSuffix(string(b), "\n")
	if !ok || strings.Contains(line, "\n") {
		return false, nil
	}
	_, err = time.Parse(time.RFC3339Nano, line)
	return err == nil, nil
}

// markStarted records that gateID was taken to executing, durably, before
// anything is sent. A whole marker is kept as it is; one a failed write
// left incomplete is written again.
func (r *Runner) markStarted(gateID string) error {
	p := r.startedPath(gateID)
	if err := home.Dir(r.Home).Private(filepath.Dir(p)); err != nil {
		return err
	}
	if ok, err := r.began(gateID); ok || err != nil {
		return err
	}
	return store.WriteMode(p, []byte(store.FormatTime(time.Now())+"\n"), 0o600)
}
