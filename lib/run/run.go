// Package run is the record of one box run: runs/<run-id>/run.json, with
// box.log, brief.json and the workspace beside it. The supervisor writes
// it; the gateway reads it to serve the run's box inside the box's network
// namespace, and answers with runs/<run-id>/gateway.json once it does. A
// run moves starting -> running -> exited | failed.
package run

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/impyard/impyard/lib/id"
	"github.com/impyard/impyard/lib/store"
	"github.com/impyard/impyard/lib/yard"
)

// Run states.
const (
	Starting = "starting"
	Running  = "running"
	Exited   = "exited"
	Failed   = "failed"
)

// Run is runs/<run-id>/run.json.
type Run struct {
	Schema  string     `json:"schema"`
	ID      string     `json:"id"`
	Imp     string     `json:"imp"`
	Task    string     `json:"task"`
	State   string     `json:"state"`
	NetNS   string     `json:"netns,omitempty"`
	Created time.Time  `json:"created"`
	Started *time.Time `json:"started,omitempty"`
	Ended   *time.Time `json:"ended,omitempty"`
	Exit    *Exit      `json:"exit,omitempty"`
	Error   string     `json:"error,omitempty"`
}

// Exit is how the box ended.
type Exit struct {
	Code    int    `json:"code"`
	Signal  string `json:"signal,omitempty"`
	Ceiling bool   `json:"ceiling,omitempty"`
	OOM     bool   `json:"oom,omitempty"`
	Killed  bool   `json:"killed,omitempty"`
	Reason  string `json:"reason,omitempty"`
}

// Live reports whether the run's box may still be running.
func (r *Run) Live() bool { return r.State == Starting || r.State == Running }

// Ready is runs/<run-id>/gateway.json: the gateway serves the box.
type Ready struct {
	Schema string    `json:"schema"`
	Run    string    `json:"run"`
	Listen string    `json:"listen"`
	At     time.Time `json:"at"`
}

// Dir opens (creating) runs/<id>/.
func Dir(y *yard.Yard, runID string) (*store.Dir, error) {
	if err := id.Check(id.Run, runID); err != nil {
		return nil, err
	}
	return y.Dir("runs", runID)
}

// Write replaces the run's run.json.
func Write(y *yard.Yard, r *Run) error {
	d, err := Dir(y, r.ID)
	if err != nil {
		return err
	}
	r.Schema = store.Schema("run", 1)
	b, err := store.Encode(r)
	if err != nil {
		return err
	}
	return d.Update(func(tx *store.Tx) error { return tx.Write("run.json", b) })
}

// Read reads a run's run.json.
func Read(y *yard.Yard, runID string) (*Run, error) {
	if err := id.Check(id.Run, runID); err != nil {
		return nil, err
	}
	p := y.Path("runs", runID, "run.json")
	b, err := store.ReadFile(p)
	if err != nil {
		return nil, err
	}
	var r Run
	if err := store.Decode(p, b, "run", 1, &r); err != nil {
		return nil, err
	}
	if r.ID != runID {
		return nil, fmt.Errorf("%s: id %q does not match its directory", p, r.ID)
	}
	return &r, nil
}

// WriteReady records that the gateway serves the run's box at listen.
func WriteReady(y *yard.Yard, runID, listen string) error {
	d, err := Dir(y, runID)
	if err != nil {
		return err
	}
	b, err := store.Encode(Ready{Schema: store.Schema("ready", 1), Run: runID, Listen: listen, At: time.Now().UTC()})
	if err != nil {
		return err
	}
	return d.Update(func(tx *store.Tx) error { return tx.Write("gateway.json", b) })
}

// WaitReady waits until the gateway answered for the run, or timeout.
func WaitReady(y *yard.Yard, runID string, timeout time.Duration) error {
	p := y.Path("runs", runID, "gateway.json")
	deadline := time.Now().Add(timeout)
	for {
		if _, err := store.ReadFile(p); err == nil {
			return nil
		} else if !errors.Is(err, os.ErrNotExist) {
			return err
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("run %s: the gateway did not start serving the box within %v (is impgw serve running on this yard?)", runID, timeout)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// List returns the ids of every run directory, oldest first.
func List(y *yard.Yard) ([]string, error) {
	entries, err := os.ReadDir(y.Path("runs"))
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var ids []string
	for _, e := range entries {
		if e.IsDir() && id.Check(id.Run, e.Name()) == nil {
			ids = append(ids, e.Name())
		}
	}
	return ids, nil
}

// Path joins rel onto the run's directory.
func Path(y *yard.Yard, runID string, rel ...string) string {
	return filepath.Join(append([]string{y.Path("runs", runID)}, rel...)...)
}
