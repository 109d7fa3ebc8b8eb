package mailbox

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/impyard/impyard/lib/id"
	"github.com/impyard/impyard/lib/yard"
	"github.com/impyard/impyard/lib/yard/yardtest"
)

func openYard(t *testing.T) *yard.Yard {
	t.Helper()
	y := yardtest.New(t)
	return y
}

// onDisk reads mailbox/<imp>/<id>.json as it is stored.
func onDisk(t *testing.T, y *yard.Yard, imp, msgID string) Message {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(y.Root, "mailbox", imp, msgID+".json"))
	if err != nil {
		t.Fatal(err)
	}
	var m Message
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	return m
}

// deliver does what the supervisor does for a run's brief: reads the
// undelivered messages and marks them delivered to runID, and returns them
// as they are then stored.
func deliver(t *testing.T, y *yard.Yard, imp, runID string) ([]Message, error) {
	t.Helper()
	ms, err := Undelivered(y, imp)
	if err != nil {
		return nil, err
	}
	var ids []string
	for _, m := range ms {
		ids = append(ids, m.ID)
	}
	if err := MarkDelivered(y, imp, runID, ids); err != nil {
		return nil, err
	}
	out := make([]Message, 0, len(ms))
	for _, m := range ms {
		out = append(out, onDisk(t, y, imp, m.ID))
	}
	return out, nil
}

func TestSendDeliverOnce(t *testing.T) {
	y := openYard(t)
	first, err := Send(y, "yuko", "alice", "check the build")
	if err != nil {
		t.Fatal(err)
	}
	second, err := Send(y, "yuko", "alice", "and the docs")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Send(y, "rex", "alice", "not for yuko"); err != nil {
		t.Fatal(err)
	}
	m := onDisk(t, y, "yuko", first)
	if m.Schema != "impyard.message/1" || m.ID != first || m.Imp != "yuko" || m.From != "alice" || m.Text != "check the build" || m.Created.IsZero() || m.DeliveredTo != "" {
		t.Errorf("stored %+v", m)
	}

	run1 := id.New(id.Run)
	got, err := deliver(t, y, "yuko", run1)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || got[0].ID != first || got[1].ID != second || got[0].Text != "check the build" {
		t.Fatalf("delivered %+v, want both of yuko's, oldest first", got)
	}
	for _, mid := range []string{first, second} {
		if m := onDisk(t, y, "yuko", mid); m.DeliveredTo != run1 || m.Delivered == nil {
			t.Errorf("%s on disk %+v, want delivered to %s", mid, m, run1)
		}
	}
	// The next run gets nothing already delivered, only what came since.
	third, _ := Send(y, "yuko", "bob", "one more")
	got, err = deliver(t, y, "yuko", id.New(id.Run))
	if err != nil || len(got) != 1 || got[0].ID != third || got[0].From != "bob" {
		t.Errorf("second delivery %+v %v, want only %s", got, err, third)
	}
	if m := onDisk(t, y, "yuko", first); m.DeliveredTo != run1 {
		t.Errorf("a delivered message was delivered again: %+v", m)
	}
	// rex's message was not touched by yuko's deliveries.
	got, err = deliver(t, y, "rex", run1)
	if err != nil || len(got) != 1 || got[0].Text != "not for yuko" {
		t.Errorf("rex: %+v %v", got, err)
	}
}

func TestDeliverEmptyAndForeignFiles(t *testing.T) {
	y := openYard(t)
	if got, err := deliver(t, y, "yuko", id.New(id.Run)); err != nil || len(got) != 0 {
		t.Errorf("empty mailbox: %+v %v", got, err)
	}
	mid, _ := Send(y, "yuko", "alice", "hi")
	d := filepath.Join(y.Root, "mailbox", "yuko")
	// Files that are not messages are left alone.
	os.WriteFile(filepath.Join(d, "notes.txt"), []byte("x"), 0o640)
	os.WriteFile(filepath.Join(d, "readme.json"), []byte("{"), 0o640)
	got, err := deliver(t, y, "yuko", id.New(id.Run))
	if err != nil || len(got) != 1 || got[0].ID != mid {
		t.Errorf("with foreign files: %+v %v", got, err)
	}
	// A message file that is not a message stops the delivery, which then
	// marks nothing: not even the messages before it, which would otherwise
	// count as delivered to a run that never got its brief.
	next, _ := Send(y, "yuko", "alice", "before the bad one")
	bad := "m-zzzzzzzzzzzzzzzz"
	os.WriteFile(filepath.Join(d, bad+".json"), []byte(`{"schema":"impyard.task/1"}`), 0o640)
	if got, err := deliver(t, y, "yuko", id.New(id.Run)); err == nil || !strings.Contains(err.Error(), bad) || len(got) != 0 {
		t.Errorf("bad message file: %+v %v, want nothing and an error naming %s", got, err, bad)
	}
	if m := onDisk(t, y, "yuko", next); m.DeliveredTo != "" {
		t.Errorf("a failed delivery marked %s delivered to %s", next, m.DeliveredTo)
	}
	// Once the bad file is gone, the message reaches the next run.
	os.Remove(filepath.Join(d, bad+".json"))
	run := id.New(id.Run)
	if got, err := deliver(t, y, "yuko", run); err != nil || len(got) != 1 || got[0].ID != next || got[0].DeliveredTo != run {
		t.Errorf("after removing the bad file: %+v %v", got, err)
	}
}

func TestSendRefuses(t *testing.T) {
	y := openYard(t)
	for _, c := range []struct {
		name, imp, text, want string
	}{
		{"empty", "yuko", "", "message is empty"},
		{"blank", "yuko", " \n\t", "message is empty"},
		{"too long", "yuko", strings.Repeat("a", MaxText+1), "over the 65536 limit"},
		{"bad imp", "../yuko", "hi", ""},
		{"upper-case imp", "Yuko", "hi", ""},
	} {
		mid, err := Send(y, c.imp, "alice", c.text)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %q %v, want an error with %q", c.name, mid, err, c.want)
		}
	}
	if _, err := Send(y, "yuko", "alice", strings.Repeat("a", MaxText)); err != nil {
		t.Errorf("a message of exactly MaxText: %v", err)
	}
	if _, err := Undelivered(y, "../x"); err == nil {
		t.Error("delivered for an invalid imp")
	}
	if entries, _ := os.ReadDir(filepath.Join(y.Root, "mailbox")); len(entries) != 1 {
		t.Errorf("mailbox has %d entries, want only yuko's", len(entries))
	}
}
