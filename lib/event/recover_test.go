package event

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/impyard/impyard/lib/store"
	"github.com/impyard/impyard/lib/yard"
	"github.com/impyard/impyard/lib/yard/yardtest"
)

func TestMarker(t *testing.T) {
	dir := t.TempDir()
	if id, ok := Interrupted(dir); ok || id != "" {
		t.Errorf("no marker: %q %v", id, ok)
	}
	if err := Begin(dir, "g-0000000000000001"); err != nil {
		t.Fatal(err)
	}
	// A later Begin replaces the mark, never appends to it.
	if err := Begin(dir, "t-1"); err != nil {
		t.Fatal(err)
	}
	if id, ok := Interrupted(dir); !ok || id != "t-1" {
		t.Errorf("marked: %q %v", id, ok)
	}
	if fi, err := os.Stat(filepath.Join(dir, marker)); err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("marker %v %v, want mode 0600", fi, err)
	}
	for range 2 { // ending twice is not an error
		if err := End(dir); err != nil {
			t.Fatal(err)
		}
	}
	if _, ok := Interrupted(dir); ok {
		t.Error("marker left after End")
	}
	// A symlink planted as the marker is not followed.
	target := filepath.Join(t.TempDir(), "target")
	os.Remove(filepath.Join(dir, marker))
	if err := os.Symlink(target, filepath.Join(dir, marker)); err != nil {
		t.Fatal(err)
	}
	if err := Begin(dir, "x"); err == nil {
		t.Error("Begin wrote through a symlink")
	}
	if _, err := os.Stat(target); !os.IsNotExist(err) {
		t.Errorf("the symlink was followed: %v", err)
	}
	// A marker that cannot be cleared is an error.
	os.Remove(filepath.Join(dir, marker))
	os.MkdirAll(filepath.Join(dir, marker, "x"), 0o700)
	if err := End(dir); err == nil {
		t.Error("End cleared a directory, or said it did")
	}
	if err := Begin(dir, "t-1"); err == nil {
		t.Error("Begin marked in a directory, or said it did")
	}
}

// Marking and clearing rewrite the one marker file in place: no file is
// created or removed in the store directory, whose fsync would then have
// to carry them, and the file keeps its size.
func TestMarkerInPlace(t *testing.T) {
	dir := t.TempDir()
	if err := Begin(dir, "t-0000000000000001"); err != nil {
		t.Fatal(err)
	}
	first, err := os.Stat(filepath.Join(dir, marker))
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"g-0000000000000002", "t-3"} {
		if err := End(dir); err != nil {
			t.Fatal(err)
		}
		if err := Begin(dir, id); err != nil {
			t.Fatal(err)
		}
		if got, ok := Interrupted(dir); !ok || got != id {
			t.Errorf("marked %q (%v), want %s", got, ok, id)
		}
		fi, err := os.Stat(filepath.Join(dir, marker))
		if err != nil || !os.SameFile(fi, first) || fi.Size() != markerWidth {
			t.Errorf("marker %v %v: want the same file, %d bytes", fi, err, markerWidth)
		}
	}
	// A marker as an older impyard wrote it, the bare id, is read.
	os.WriteFile(filepath.Join(dir, marker), []byte("t-0000000000000004"), 0o600)
	if got, ok := Interrupted(dir); !ok || got != "t-0000000000000004" {
		t.Errorf("bare marker read as %q (%v)", got, ok)
	}
	// One longer than the width cannot be written.
	if err := Begin(dir, strings.Repeat("x", markerWidth+1)); err == nil {
		t.Error("an id over the marker's width was accepted")
	}
}

func TestRecover(t *testing.T) {
	y := yardtest.New(t)
	dir := t.TempDir()
	ev := Event{TS: time.Now().UTC(), Event: "task-running", Imp: "yuko", ID: "t-0000000000000001", Seq: 2}
	var asked []string
	latest := func(ok bool, err error) func(string) (Event, bool, error) {
		return func(id string) (Event, bool, error) {
			asked = append(asked, id)
			return ev, ok, err
		}
	}
	// No marker: nothing is read or recorded.
	if err := recoverIn(t, y, dir, latest(true, nil)); err != nil || len(asked) != 0 {
		t.Errorf("no marker: asked %v, %v", asked, err)
	}
	// The entity cannot be read: the error is returned, the marker kept.
	Begin(dir, ev.ID)
	boom := errors.New("unreadable")
	if err := recoverIn(t, y, dir, latest(true, boom)); err != boom {
		t.Errorf("unreadable entity: %v", err)
	}
	if _, ok := Interrupted(dir); !ok {
		t.Error("marker removed after a failed recovery")
	}
	// The entity is gone: nothing to record, the marker cleared.
	if err := recoverIn(t, y, dir, latest(false, nil)); err != nil {
		t.Fatal(err)
	}
	if _, ok := Interrupted(dir); ok {
		t.Error("marker left for an entity that is gone")
	}
	jp, _ := y.JournalPath("yuko")
	if _, err := os.Stat(jp); !os.IsNotExist(err) {
		t.Errorf("a record was written for an entity that is gone: %v", err)
	}
	// The entity is there: its latest transition is recorded, once.
	Begin(dir, ev.ID)
	if err := recoverIn(t, y, dir, latest(true, nil)); err != nil {
		t.Fatal(err)
	}
	Begin(dir, ev.ID)
	if err := recoverIn(t, y, dir, latest(true, nil)); err != nil {
		t.Fatal(err)
	}
	ap, _ := y.DecisionsPath()
	for _, p := range []string{jp, ap} {
		if got := count(t, p, ev.ID); len(got) != 1 || got[2] != 1 {
			t.Errorf("%s: records %v, want seq 2 once", p, got)
		}
	}
	if len(asked) != 4 || asked[0] != ev.ID {
		t.Errorf("asked %v", asked)
	}
}

// Ensure reads back only as far as its window: past a line older than
// the window before the event it stops, and what lies behind is not
// looked at.
func TestEnsureWindow(t *testing.T) {
	y := yardtest.New(t)
	now := time.Now().UTC()
	e := Event{TS: now, Event: "gate-x", Imp: "yuko", ID: "g-0000000000000002", Seq: 1}
	if err := Record(y, e); err != nil {
		t.Fatal(err)
	}
	// A line from before the window after it, then recent ones.
	Record(y, Event{TS: now.Add(-window - time.Minute), Event: "note", Imp: "yuko", ID: "t-0000000000000009", Seq: 1})
	for i := range 3 {
		Record(y, Event{TS: now.Add(-time.Duration(3-i) * time.Second), Event: "note", Imp: "yuko", ID: "t-0000000000000009", Seq: i + 2})
	}
	if err := Ensure(y, e); err != nil {
		t.Fatal(err)
	}
	jp, _ := y.JournalPath("yuko")
	if got := count(t, jp, e.ID); got[1] != 2 {
		t.Errorf("records of seq 1: %d, want the one behind the old line and a new one", got[1])
	}
	// The new one is within reach: nothing more is added.
	if err := Ensure(y, e); err != nil {
		t.Fatal(err)
	}
	if got := count(t, jp, e.ID); got[1] != 2 {
		t.Errorf("records of seq 1 after a second Ensure: %d, want 2", got[1])
	}
	// A journal that cannot be read fails Ensure.
	os.Remove(jp)
	os.Mkdir(jp, 0o700)
	if err := Ensure(y, Event{TS: now, Event: "gate-x", Imp: "yuko", ID: "g-0000000000000003", Seq: 1}); err == nil {
		t.Error("Ensure over an unreadable journal succeeded")
	}
}

// recoverIn runs Recover in a transaction on the store directory dir.
func recoverIn(t *testing.T, y *yard.Yard, dir string, latest func(string) (Event, bool, error)) error {
	t.Helper()
	d, err := store.OpenDir(dir, ".")
	if err != nil {
		t.Fatal(err)
	}
	return d.Update(func(tx *store.Tx) error { return Recover(y, tx, latest) })
}
