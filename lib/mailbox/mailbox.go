// Package mailbox holds the owner's messages to an imp:
// mailbox/<imp>/<msg-id>.json. A message waits until a brief carries it to
// a box that starts, or a running box of the imp polls for it; only then
// is it marked delivered to that run, and a message delivered to a run is
// never marked delivered to another, so a box that fails to start leaves
// its messages for the next brief.
// Messages are content for the imp to read, never commands to the system.
package mailbox

import (
	"errors"
	"fmt"
	"os"
	"slices"
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
	m := Message{Schema: store.Schema("message", 1), ID: id.New(id.Message), Imp: imp, From: from, Text: text, Created: store.Now()}
	return m.ID, d.Update(func(tx *store.Tx) error { return write(tx, &m) })
}

// Undelivered returns imp's messages not yet delivered to any run, oldest
// first. It marks nothing: see MarkDelivered.
func Undelivered(y *yard.Yard, imp string) ([]Message, error) {
	d, err := dir(y, imp)
	if err != nil {
		return nil, err
	}
	var out []Message
	err = d.Update(func(tx *store.Tx) error {
		out, err = undelivered(tx, d.Path())
		return err
	})
	return out, err
}

// Take returns imp's messages not yet delivered to any run, oldest first,
// and marks them delivered to runID in the same transaction, so each
// reaches one box once: what a running box polls at its turn boundaries.
// The messages in skip (those its brief carries, which the supervisor
// marks) are neither returned nor marked. With again, those in skip and
// those already delivered to runID are returned too, unmarked: what a
// box asks for when it does not know whether an earlier answer reached
// it, since the marking cannot be undone by a dropped connection.
func Take(y *yard.Yard, imp, runID string, skip []string, again bool) ([]Message, error) {
	if err := id.Check(id.Run, runID); err != nil {
		return nil, err
	}
	d, err := dir(y, imp)
	if err != nil {
		return nil, err
	}
	out := []Message{}
	err = d.Update(func(tx *store.Tx) error {
		all, err := messages(tx, d.Path())
		if err != nil {
			return err
		}
		now := store.Now()
		for _, m := range all {
			switch {
			case m.DeliveredTo == runID || m.DeliveredTo == "" && slices.Contains(skip, m.ID):
				if !again {
					continue
				}
			case m.DeliveredTo != "":
				continue
			default:
				m.DeliveredTo, m.Delivered = runID, &now
				if err := write(tx, &m); err != nil {
					return err
				}
			}
			out = append(out, m)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

func undelivered(tx *store.Tx, path string) ([]Message, error) {
	all, err := messages(tx, path)
	if err != nil {
		return nil, err
	}
	return slices.DeleteFunc(all, func(m Message) bool { return m.DeliveredTo != "" }), nil
}

// messages reads every message in the directory at path, oldest first.
func messages(tx *store.Tx, path string) ([]Message, error) {
	entries, err := os.ReadDir(path)
	if err != nil {
		return nil, err
	}
	var out []Message
	for _, e := range entries {
		msgID, ok := strings.CutSuffix(e.Name(), ".json")
		if !ok || id.Check(id.Message, msgID) != nil {
			continue
		}
		m, err := read(tx, msgID)
		if err != nil {
			return nil, err
		}
		out = append(out, *m)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out, nil
}

// MarkDelivered records that the box of runID got the messages ids, in one
// transaction. A message already delivered, to this run or another, keeps
// its first delivery; one removed meanwhile is skipped.
func MarkDelivered(y *yard.Yard, imp, runID string, ids []string) error {
	if err := id.Check(id.Run, runID); err != nil {
		return err
	}
	d, err := dir(y, imp)
	if err != nil {
		return err
	}
	return d.Update(func(tx *store.Tx) error {
		now := store.Now()
		for _, msgID := range ids {
			if err := id.Check(id.Message, msgID); err != nil {
				return err
			}
			m, err := read(tx, msgID)
			if store.IsNotExist(err) {
				continue
			}
			if err != nil {
				return err
			}
			if m.DeliveredTo != "" {
				continue
			}
			m.DeliveredTo, m.Delivered = runID, &now
			if err := write(tx, m); err != nil {
				return err
			}
		}
		return nil
	})
}

func write(tx *store.Tx, m *Message) error {
	b, err := store.Encode(m)
	if err != nil {
		return err
	}
	return tx.Write(m.ID+".json", b)
}

func read(tx *store.Tx, msgID string) (*Message, error) {
	name := msgID + ".json"
	b, err := tx.Read(name)
	if err != nil {
		return nil, err
	}
	var m Message
	if err := store.Decode(tx.Path(name), b, "message", 1, &m); err != nil {
		return nil, err
	}
	if m.ID != msgID {
		return nil, fmt.Errorf("%s: id %q does not match its file name", tx.Path(name), m.ID)
	}
	return &m, nil
}
