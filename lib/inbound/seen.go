package inbound

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"path/filepath"
	"strings"
	"time"

	"github.com/impyard/impyard/lib/queue"
	"github.com/impyard/impyard/lib/store"
)

// Retention is how long inbound/<source>/seen/ remembers a delivery. A
// replay older than that is still caught by the queue's once marker,
// keyed on the body; the markers are pruned so the directory stays small.
const Retention = 30 * 24 * time.Hour

// pruneEvery is how often a source's markers are scanned for expired ones.
const pruneEvery = time.Hour

// seenDir, in a source's directory, holds one marker per key filed (a
// delivery id, an interaction id, a body's hash): a file a key costs the
// same however many are remembered, where one file of them all would be
// rewritten whole at every delivery.
const seenDir = "seen"

// seenName is key's marker: the key hashed, so any key is a safe name.
func seenName(key string) string {
	sum := sha256.Sum256([]byte(key))
	return filepath.Join(seenDir, hex.EncodeToString(sum[:16]))
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
		now := store.Second(r.now())
		if err := r.prune(tx, src.Name, now); err != nil {
			return err
		}
		for _, k := range keys {
			b, err := tx.Read(seenName(k))
			if err == nil {
				at, _, _ := strings.Cut(string(b), " ")
				return fmt.Errorf("%w: %s was filed at %s", ErrReplay, k, at)
			}
			if !store.IsNotExist(err) {
				return err
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
		for _, k := range keys {
			if err := tx.Write(seenName(k), []byte(store.FormatTime(now)+" "+k+"\n")); err != nil {
				return err
			}
		}
		if existed {
			return fmt.Errorf("%w: task %s was filed for it", ErrReplay, id)
		}
		taskID = id
		return nil
	})
	return taskID, err
}

// prune removes the source's markers older than Retention, by their
// modification time, at most once every pruneEvery.
func (r *Relay) prune(tx *store.Tx, name string, now time.Time) error {
	r.mu.Lock()
	due := now.Sub(r.pruned[name]) >= pruneEvery
	if due {
		r.pruned[name] = now
	}
	r.mu.Unlock()
	if !due {
		return nil
	}
	entries, err := store.ReadDirIn(r.yard.Root, filepath.Join("inbound", name, seenDir))
	if store.IsNotExist(err) {
		return nil
	}
	if err != nil {
		return err
	}
	for _, e := range entries {
		fi, err := e.Info()
		if err != nil || now.Sub(fi.ModTime()) <= Retention {
			continue
		}
		if err := tx.Remove(filepath.Join(seenDir, e.Name())); err != nil {
			return err
		}
	}
	return nil
}
