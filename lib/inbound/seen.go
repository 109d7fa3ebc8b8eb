package inbound

import (
	"fmt"
	"path/filepath"
	"time"

	"github.com/impyard/impyard/lib/queue"
	"github.com/impyard/impyard/lib/store"
)

// Retention is how long inbound/<source>/seen.json remembers a delivery.
// A replay older than that is still caught by the queue's once marker,
// keyed on the body; the file is pruned so it stays small.
const Retention = 30 * 24 * time.Hour

// seenName is the replay memory in a source's directory.
const seenName = "seen.json"

// Kind and major of seen.json.
const (
	seenKind  = "seen"
	seenMajor = 1
)

// seen is seen.json: each key filed (a delivery id, an interaction id, a
// body's hash) with when.
type seen struct {
	Schema string               `json:"schema"`
	Seen   map[string]time.Time `json:"seen"`
}

// dir is inbound/<source>, the source's store directory.
func (r *Relay) dir(name string) (*store.Dir, error) {
	return store.OpenDir(r.yard.Root, filepath.Join("inbound", name))
}

// file files text as a task for src's imp unless a key was filed before,
// under the source directory's lock, so of two copies of one delivery
// arriving together exactly one files. The keys are remembered only once
// the task exists: a delivery that could not be filed may be sent again.
func (r *Relay) file(src *source, keys []string, text string, proactive bool) (string, error) {
	if len(text) > queue.MaxText {
		return "", fmt.Errorf("%w: the content makes a task text of %d bytes, over the %d limit", ErrTooLarge, len(text), queue.MaxText)
	}
	d, err := r.dir(src.Name)
	if err != nil {
		return "", err
	}
	var taskID string
	err = d.Update(func(tx *store.Tx) error {
		s, err := readSeen(tx)
		if err != nil {
			return err
		}
		for _, k := range keys {
			if at, ok := s.Seen[k]; ok {
				return fmt.Errorf("%w: %s was filed at %s", ErrReplay, k, at.Format(time.RFC3339))
			}
		}
		id, existed, err := queue.Add(r.yard, queue.AddOptions{
			Imp: src.Imp, Text: text, Proactive: proactive, Source: src.Name,
			Once: "inbound " + src.Name + " " + keys[len(keys)-1], By: "inbound:" + src.Name, Actor: "impgw",
		})
		if id == "" {
			return err
		}
		if err != nil {
			r.logf("warning: inbound %s: task %s: %v", src.Name, id, err)
		}
		now := store.Second(r.now())
		for k, at := range s.Seen {
			if now.Sub(at) > Retention {
				delete(s.Seen, k)
			}
		}
		for _, k := range keys {
			s.Seen[k] = now
		}
		b, err := store.Encode(s)
		if err != nil {
			return err
		}
		if err := tx.Write(seenName, b); err != nil {
			return err
		}
		if existed {
			return fmt.Errorf("%w: task %s was filed for it", ErrReplay, id)
		}
		taskID = id
		return nil
	})
	return taskID, err
}

func readSeen(tx *store.Tx) (*seen, error) {
	s := &seen{Schema: store.Schema(seenKind, seenMajor), Seen: map[string]time.Time{}}
	b, err := tx.Read(seenName)
	if store.IsNotExist(err) {
		return s, nil
	}
	if err != nil {
		return nil, err
	}
	if err := store.Decode(tx.Path(seenName), b, seenKind, seenMajor, s); err != nil {
		return nil, err
	}
	if s.Seen == nil {
		s.Seen = map[string]time.Time{}
	}
	return s, nil
}
