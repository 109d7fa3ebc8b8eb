// Package mailbox holds the owner's messages to an imp:
// mailbox/<imp>/<msg-id>.json. A message waits until the imp's next run,
// whose briefing carries it; then it is marked delivered to that run, once.
// Messages are content for the imp to read, never commands to the system.
package mailbox

import (
	"errors"
	"fmt"
	"os"
	"sort"
	"strings"
	"time"

	"github.com/impyard/impyard/lib/id"
	"github.com/impyard/impyard/lib/store"
	"github.com/impyard/impyard/lib/yard"
)

// MaxText bounds a message.
const MaxText = 64 << 10

// Message is mailbox/<imp>/<msg-id>.json.
type Message struct {
	Schema      string     `json:"schema"`
	ID          string     `json:"id"`
	Imp         string     `json:"imp"`
	From        string     `json:"from"`
	Text        string     `json:"text"`
	Created     time.Time  `json:"created"`
	DeliveredTo string     `json:"delivered_to,omitempty"`
	Delivered   *time.Time `json:"delivered,omitempty"`
}

func dir(y *yard.Yard, imp string) (*store.Dir, error) {
	if err := id.CheckName(imp); err != nil {
		return nil, err
	}
	return y.Dir("mailbox", imp)
}

// Send leaves a message for imp and returns its id.
func Send(y *yard.Yard, imp, from, text string) (string, error) {
	if strings.TrimSpace(text) == "" {
		return "", errors.New("message is empty")
	}
	if len(text) > MaxText {
		return "", fmt.Errorf("message is %d bytes, over the %d limit", len(text), MaxText)
	}
	d, err := dir(y, imp)
	if err != nil {
		return "", err
	}
	m := Message{Schema: store.Schema("message", 1), ID: id.New(id.Message), Imp: imp, From: from, Text: text, Created: time.Now().UTC()}
	b, err := store.Encode(m)
	if err != nil {
		return "", err
	}
	return m.ID, d.Update(func(tx *store.Tx) error { return tx.Write(m.ID+".json", b) })
}

// Deliver returns imp's undelivered messages, oldest first, and marks
// them delivered to runID in the same transaction: a message reaches
// exactly one run.
func Deliver(y *yard.Yard, imp, runID string) ([]Message, error) {
	d, err := dir(y, imp)
	if err != nil {
		return nil, err
	}
	var out []Message
	err = d.Update(func(tx *store.Tx) error {
		entries, err := os.ReadDir(d.Path())
		if err != nil {
			return err
		}
		// Read every message before marking any: a file that does not
		// decode fails the delivery with nothing marked, so no message
		// counts as delivered to a run that never got its brief.
		var names []string
		var pending []Message
		for _, e := range entries {
			name, ok := strings.CutSuffix(e.Name(), ".json")
			if !ok || id.Check(id.Message, name) != nil {
				continue
			}
			b, err := tx.Read(e.Name())
			if err != nil {
				return err
			}
			var m Message
			if err := store.Decode(tx.Path(e.Name()), b, "message", 1, &m); err != nil {
				return err
			}
			if m.DeliveredTo == "" {
				names, pending = append(names, e.Name()), append(pending, m)
			}
		}
		now := time.Now().UTC()
		for i, m := range pending {
			m.DeliveredTo, m.Delivered = runID, &now
			nb, err := store.Encode(m)
			if err != nil {
				return err
			}
			if err := tx.Write(names[i], nb); err != nil {
				return err
			}
			out = append(out, m)
		}
		return nil
	})
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out, err
}
