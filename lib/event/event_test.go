package event

import (
	"encoding/json"
	"os"
	"testing"
	"time"

	"github.com/impyard/impyard/lib/store"
	"github.com/impyard/impyard/lib/yard/yardtest"
)

func count(t *testing.T, path, id string) map[int]int {
	t.Helper()
	seen := map[int]int{}
	_, err := store.ReadJSONL(path, func(line []byte) error {
		var e Event
		if json.Unmarshal(line, &e) == nil && e.ID == id {
			seen[e.Seq]++
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return seen
}

func TestEnsure(t *testing.T) {
	y := yardtest.New(t)
	now := time.Now().UTC()
	e := func(seq int) Event {
		return Event{TS: now.Add(time.Duration(seq) * time.Second), Event: "gate-x", Imp: "yuko", ID: "g-0000000000000001", Seq: seq}
	}
	if err := Record(y, e(1)); err != nil {
		t.Fatal(err)
	}
	// Already recorded: nothing is appended.
	if err := Ensure(y, e(1)); err != nil {
		t.Fatal(err)
	}
	// Lost entirely (a crash between the state write and the record).
	if err := Ensure(y, e(2)); err != nil {
		t.Fatal(err)
	}
	// In the audit log but not the journal.
	ap, _ := y.DecisionsPath()
	line, _ := store.Line(func() Event { v := e(3); v.Schema = store.Schema(Kind, Major); return v }())
	store.AppendLine(ap, line)
	// Torn halfway through the audit record.
	f, _ := os.OpenFile(ap, os.O_WRONLY|os.O_APPEND, 0)
	f.Write(line[:len(line)/2])
	f.Close()
	if err := Ensure(y, e(3)); err != nil {
		t.Fatal(err)
	}
	if err := Ensure(y, e(4)); err != nil {
		t.Fatal(err)
	}
	// In the journal but not the audit log, the journal's next line torn:
	// Record appends to both at once, so a crash can leave either.
	jp, _ := y.JournalPath("yuko")
	line, _ = store.Line(func() Event { v := e(5); v.Schema = store.Schema(Kind, Major); return v }())
	store.AppendLine(jp, line)
	f, _ = os.OpenFile(jp, os.O_WRONLY|os.O_APPEND, 0)
	f.Write(line[:len(line)/2])
	f.Close()
	if err := Ensure(y, e(5)); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{jp, ap} {
		got := count(t, p, "g-0000000000000001")
		for seq := 1; seq <= 5; seq++ {
			if got[seq] != 1 {
				t.Errorf("%s: transition %d recorded %d times", p, seq, got[seq])
			}
		}
	}
}
