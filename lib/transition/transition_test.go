package transition_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/impyard/impyard/lib/event"
	"github.com/impyard/impyard/lib/id"
	"github.com/impyard/impyard/lib/state"
	"github.com/impyard/impyard/lib/store"
	"github.com/impyard/impyard/lib/transition"
	"github.com/impyard/impyard/lib/yard"
	"github.com/impyard/impyard/lib/yard/yardtest"
)

// note is the smallest record the engine moves: a task-like timeline in
// notes/<id>.json, moved along the task machine.
type note struct {
	Schema  string             `json:"schema"`
	ID      string             `json:"id"`
	Imp     string             `json:"imp"`
	State   string             `json:"state"`
	Body    string             `json:"body"`
	Updated time.Time          `json:"updated"`
	History []state.Transition `json:"history"`
}

func (n *note) Timeline() transition.Timeline {
	return transition.Timeline{ID: n.ID, Imp: n.Imp, State: n.State, History: n.History}
}

func (n *note) Apply(h state.Transition) {
	n.History = append(n.History, h)
	n.State, n.Updated = h.To, h.At
}

func notes(t *testing.T, y *yard.Yard) transition.Store[*note] {
	t.Helper()
	d, err := y.Dir("notes")
	if err != nil {
		t.Fatal(err)
	}
	return transition.Store[*note]{
		Yard: y, Dir: d, Kind: "note", IDKind: id.Task, Machine: state.TaskMachine, First: "note-added",
		Read: func(_ *store.Tx, nid string) (*note, error) {
			p := y.Path("notes", nid+".json")
			b, err := y.ReadFile(p)
			if err != nil {
				return nil, err
			}
			var n note
			return &n, store.Decode(p, b, "note", 1, &n)
		},
		Write:  transition.WriteJSON(func(n *note) string { return n.ID + ".json" }),
		Detail: func(n *note, e *event.Event) { e.Intent = "note" },
	}
}

// add files a waiting note, then walks it along path.
func add(t *testing.T, s transition.Store[*note], path ...string) *note {
	t.Helper()
	n, _, err := transition.Create(s, func(tx *store.Tx) (*note, bool, error) {
		n := &note{Schema: store.Schema("note", 1), Imp: "yuko", ID: s.NewID(tx, func(nid string) []string { return []string{nid + ".json"} })}
		n.Apply(state.Transition{To: state.Waiting, By: "yuko", Actor: "test", At: state.Now()})
		return n, false, nil
	}, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, to := range path {
		if n, err = transition.Move(s, n.ID, transition.Change[*note]{To: to, By: "alice", Actor: "test"}); err != nil {
			t.Fatal(err)
		}
	}
	return n
}

func TestMoveFollowsTheMachine(t *testing.T) {
	for _, c := range []struct {
		path []string // how the note got where it is
		to   string
		ok   bool
	}{
		{nil, state.Running, true},
		{nil, state.Cancelled, true},
		{[]string{state.Running}, state.Done, true},
		{[]string{state.Running, state.Failed}, state.Waiting, true},
		{nil, state.Done, false},
		{nil, state.Waiting, false},
		{nil, "bogus", false},
		{[]string{state.Running, state.Done}, state.Waiting, false},
		{[]string{state.Cancelled}, state.Running, false},
	} {
		y := yardtest.New(t)
		s := notes(t, y)
		n := add(t, s, c.path...)
		p := y.Path("notes", n.ID+".json")
		before, _ := os.ReadFile(p)
		got, err := transition.Move(s, n.ID, transition.Change[*note]{To: c.to, By: "bob", Actor: "test", Why: "because"})
		after, _ := os.ReadFile(p)
		seqs := len(c.path) + 1
		if !c.ok {
			if !errors.Is(err, state.ErrIllegal) {
				t.Errorf("%v -> %s: %v, want a refusal wrapping state.ErrIllegal", c.path, c.to, err)
			}
			if !bytes.Equal(before, after) {
				t.Errorf("%v -> %s: refused, yet the file changed", c.path, c.to)
			}
			exactlyOnce(t, y, n.ID, seqs)
			continue
		}
		if err != nil {
			t.Errorf("%v -> %s: %v", c.path, c.to, err)
			continue
		}
		var disk note
		if err := store.Decode(p, after, "note", 1, &disk); err != nil {
			t.Fatal(err)
		}
		last := disk.History[len(disk.History)-1]
		if disk.State != c.to || len(disk.History) != seqs+1 || last.From == "" || last.To != c.to || last.By != "bob" || last.Why != "because" || !disk.Updated.Equal(last.At) {
			t.Errorf("%v -> %s: on disk %+v", c.path, c.to, disk)
		}
		if got.State != c.to {
			t.Errorf("%v -> %s: returned state %s", c.path, c.to, got.State)
		}
		exactlyOnce(t, y, n.ID, seqs+1)
	}
}

func TestRecordsNameTheTransition(t *testing.T) {
	y := yardtest.New(t)
	s := notes(t, y)
	n := add(t, s, state.Running)
	var got []event.Event
	store.ReadJSONL(y.Path("journal", "yuko", "events.jsonl"), func(line []byte) error {
		var e event.Event
		if err := json.Unmarshal(line, &e); err != nil {
			return err
		}
		got = append(got, e)
		return nil
	})
	if len(got) != 2 {
		t.Fatalf("journal holds %d records, want 2", len(got))
	}
	if got[0].Event != "note-added" || got[0].Seq != 1 || got[0].To != state.Waiting || got[0].Intent != "note" {
		t.Errorf("first record %+v", got[0])
	}
	if got[1].Event != "note-running" || got[1].Seq != 2 || got[1].From != state.Waiting || got[1].By != "alice" || got[1].ID != n.ID {
		t.Errorf("second record %+v", got[1])
	}
}

func TestAllowAndEdit(t *testing.T) {
	y := yardtest.New(t)
	s := notes(t, y)
	n := add(t, s)
	// Allow lets a transition the machine refuses.
	n, err := transition.Move(s, n.ID, transition.Change[*note]{To: state.Waiting, By: "bob",
		Allow: func(n *note) bool { return n.State == state.Waiting }})
	if err != nil || len(n.History) != 2 {
		t.Fatalf("allowed waiting -> waiting: %v %+v", err, n)
	}
	// An edit that fails stops the move: nothing written, nothing recorded.
	p := y.Path("notes", n.ID+".json")
	before, _ := os.ReadFile(p)
	boom := errors.New("boom")
	if _, err := transition.Move(s, n.ID, transition.Change[*note]{To: state.Running, Edit: func(n *note, h *state.Transition) error {
		n.Body = "changed"
		return boom
	}}); !errors.Is(err, boom) {
		t.Errorf("Edit error: %v", err)
	}
	if after, _ := os.ReadFile(p); !bytes.Equal(before, after) {
		t.Errorf("a failed edit wrote the note")
	}
	// An edit sees the transition and may change it and the record.
	n, err = transition.Move(s, n.ID, transition.Change[*note]{To: state.Running, Edit: func(n *note, h *state.Transition) error {
		n.Body, h.Why = "edited at "+h.At.Format(time.RFC3339Nano), "edited"
		return nil
	}})
	if err != nil || n.Body != "edited at "+n.Updated.Format(time.RFC3339Nano) || n.History[2].Why != "edited" {
		t.Errorf("edit: %v %+v", err, n)
	}
	exactlyOnce(t, y, n.ID, 3)
}

func TestCreateChecksTheHistory(t *testing.T) {
	for _, h := range [][]state.Transition{
		nil,
		{{To: "bogus"}},
		{{From: state.Running, To: state.Done}},
		{{To: state.Waiting}, {From: state.Waiting, To: state.Done}},
		{{To: state.Waiting}, {From: state.Running, To: state.Done}},
	} {
		y := yardtest.New(t)
		s := notes(t, y)
		_, _, err := transition.Create(s, func(tx *store.Tx) (*note, bool, error) {
			return &note{Schema: store.Schema("note", 1), ID: "t-0000000000000001", Imp: "yuko", History: h}, false, nil
		}, nil)
		if err == nil {
			t.Errorf("history %+v filed", h)
		}
		if left, _ := filepath.Glob(y.Path("notes", "*.json")); len(left) != 0 {
			t.Errorf("history %+v: refused, yet wrote %v", h, left)
		}
	}
	// An existing record is returned as it is, before any recovery.
	y := yardtest.New(t)
	s := notes(t, y)
	n := add(t, s)
	got, existing, err := transition.Create(s, func(tx *store.Tx) (*note, bool, error) { return n, true, nil }, func(*store.Tx, *note) error {
		t.Error("before ran for an existing record")
		return nil
	})
	if err != nil || !existing || got != n {
		t.Errorf("existing: %v %v %v", got, existing, err)
	}
	exactlyOnce(t, y, n.ID, 1)
}

// TestUnrecordedIsRepairedOnce: a record that cannot be written leaves
// the note written and the marker set; the next transaction writes the
// record, once.
func TestUnrecordedIsRepairedOnce(t *testing.T) {
	y := yardtest.New(t)
	s := notes(t, y)
	n := add(t, s)
	jp := y.Path("journal", "yuko", "events.jsonl")
	b, _ := os.ReadFile(jp)
	os.Remove(jp)
	os.Mkdir(jp, 0o750)
	got, err := transition.Move(s, n.ID, transition.Change[*note]{To: state.Running, By: "bob"})
	if !errors.Is(err, transition.ErrUnrecorded) || got == nil || got.State != state.Running {
		t.Fatalf("Move with the journal unwritable: %v %+v, want the note and ErrUnrecorded", got, err)
	}
	if id, ok := event.Interrupted(s.Dir.Path()); !ok || id != n.ID {
		t.Errorf("marker names %q (%v), want %s", id, ok, n.ID)
	}
	os.Remove(jp)
	os.WriteFile(jp, b, 0o640)
	if _, err := transition.Move(s, n.ID, transition.Change[*note]{To: state.Done, By: "bob"}); err != nil {
		t.Fatal(err)
	}
	exactlyOnce(t, y, n.ID, 3)
}

// TestUnknownMajorWritesNothing: a record from a newer impyard is refused
// and nothing is written: in a store without a lock file, before one is
// created; with one, under the lock, before the marker or the record.
func TestUnknownMajorWritesNothing(t *testing.T) {
	for _, lockFile := range []bool{false, true} {
		y := yardtest.New(t)
		s := notes(t, y)
		n := add(t, s)
		p := y.Path("notes", n.ID+".json")
		b, _ := os.ReadFile(p)
		os.WriteFile(p, bytes.Replace(b, []byte(`impyard.note/1`), []byte(`impyard.note/9`), 1), 0o640)
		if !lockFile {
			os.Remove(filepath.Join(s.Dir.Path(), ".lock"))
		}
		before := yardtest.Tree(t, y.Root)
		if _, err := transition.Move(s, n.ID, transition.Change[*note]{To: state.Running}); !errors.Is(err, store.ErrUnknownMajor) {
			t.Errorf("lock file %v: Move: %v, want ErrUnknownMajor", lockFile, err)
		}
		yardtest.Unchanged(t, y.Root, before, "a refusal wrote")
	}
}

// TestCreateWalksTheWholeHistory: a new record may be filed already moved
// on (a gate approved by a trust rule); each transition gets its record.
func TestCreateWalksTheWholeHistory(t *testing.T) {
	y := yardtest.New(t)
	s := notes(t, y)
	now := state.Now()
	n, _, err := transition.Create(s, func(tx *store.Tx) (*note, bool, error) {
		n := &note{Schema: store.Schema("note", 1), ID: "t-0000000000000001", Imp: "yuko"}
		n.Apply(state.Transition{To: state.Waiting, By: "yuko", At: now})
		n.Apply(state.Transition{From: state.Waiting, To: state.Running, By: "rule", At: now})
		n.Apply(state.Transition{From: state.Running, To: state.Done, By: "rule", At: now})
		return n, false, nil
	}, nil)
	if err != nil || n.State != state.Done {
		t.Fatalf("%v %+v", err, n)
	}
	exactlyOnce(t, y, n.ID, 3)
}

// TestEach lists the records of two directories merged in id order,
// across many batches, passing over dot-files and reporting, by name,
// files it cannot take; Want decides which ids are read, an error from fn
// stops the listing, and a missing directory holds nothing.
func TestEach(t *testing.T) {
	y := yardtest.New(t)
	const n = 1300 // five batches and some
	var want []string
	for i := range n {
		dir := []string{"notes", "more"}[i%2]
		nid := fmt.Sprintf("t-%016d", i)
		b, err := store.Encode(note{Schema: store.Schema("note", 1), ID: nid, Imp: "yuko", State: state.Waiting})
		if err != nil {
			t.Fatal(err)
		}
		if err := os.MkdirAll(y.Path(dir), 0o750); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(y.Path(dir, nid+".json"), b, 0o640); err != nil {
			t.Fatal(err)
		}
		if i%100 != 7 {
			want = append(want, nid)
		}
	}
	os.WriteFile(y.Path("notes", ".lock"), nil, 0o640)
	os.WriteFile(y.Path("notes", "stray.txt"), []byte("x"), 0o640)
	os.WriteFile(y.Path("more", "t-9999999999999999.json"), []byte("{"), 0o640)
	parse := func(path string, data []byte) (*note, error) {
		var n note
		return &n, store.Decode(path, data, "note", 1, &n)
	}
	var asked []string
	wantFn := func(nid string) bool {
		asked = append(asked, nid)
		return !strings.HasSuffix(nid, "07")
	}
	srcs := []transition.Source[*note]{{Rel: "notes", Want: wantFn, Parse: parse}, {Rel: "more", Want: wantFn, Parse: parse}, {Rel: "missing", Parse: parse}}
	var got []string
	bad, err := transition.Each(y, "note", id.Task, srcs, func(r *note) error {
		got = append(got, r.ID)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(got, want) {
		t.Errorf("listed %d records, want %d in id order; first differences: %v", len(got), len(want), firstDiff(got, want))
	}
	if len(asked) != n+1 {
		t.Errorf("Want was asked %d times, want once per named file (%d)", len(asked), n+1)
	}
	if len(bad) != 2 || !strings.Contains(fmt.Sprint(bad), y.Path("notes", "stray.txt")) || !strings.Contains(fmt.Sprint(bad), y.Path("more", "t-9999999999999999.json")) {
		t.Errorf("bad %v, want the stray file and the damaged note, by path", bad)
	}

	stopped := errors.New("enough")
	calls := 0
	_, err = transition.Each(y, "note", id.Task, srcs, func(*note) error {
		calls++
		if calls == 300 {
			return stopped
		}
		return nil
	})
	if !errors.Is(err, stopped) || calls != 300 {
		t.Errorf("fn's error: got %v after %d calls, want it after 300", err, calls)
	}
}

// TestEachKnown: a record Settled marks is passed over, unread, by later
// listings while its file stays the same file; a replaced file, one
// changed in place and one put back under a forgotten name are read
// again, and a name gone from the directory is forgotten.
func TestEachKnown(t *testing.T) {
	y := yardtest.New(t)
	if err := os.MkdirAll(y.Path("notes"), 0o750); err != nil {
		t.Fatal(err)
	}
	write := func(nid, st string) {
		t.Helper()
		b, err := store.Encode(note{Schema: store.Schema("note", 1), ID: nid, Imp: "yuko", State: st})
		if err != nil {
			t.Fatal(err)
		}
		tmp := y.Path("notes", ".new")
		if err := os.WriteFile(tmp, b, 0o640); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(tmp, y.Path("notes", nid+".json")); err != nil {
			t.Fatal(err)
		}
	}
	ids := []string{"t-0000000000000001", "t-0000000000000002", "t-0000000000000003"}
	write(ids[0], state.Done)
	write(ids[1], state.Waiting)
	write(ids[2], state.Done)
	known := transition.NewKnown()
	var parsed []string
	srcs := []transition.Source[*note]{{Rel: "notes", Known: known,
		Parse: func(path string, data []byte) (*note, error) {
			var n note
			err := store.Decode(path, data, "note", 1, &n)
			parsed = append(parsed, n.ID) // one reading goroutine at a time: a few files, one batch
			return &n, err
		},
		Settled: func(n *note) bool { return n.State == state.Done }}}
	list := func() (got []string) {
		t.Helper()
		parsed = nil
		bad, err := transition.Each(y, "note", id.Task, srcs, func(n *note) error {
			got = append(got, n.ID)
			return nil
		})
		if err != nil || len(bad) > 0 {
			t.Fatal(err, bad)
		}
		return got
	}
	if got := list(); !slices.Equal(got, ids) {
		t.Fatalf("first listing %v, want all of %v", got, ids)
	}
	if got := list(); !slices.Equal(got, ids[1:2]) || !slices.Equal(parsed, ids[1:2]) {
		t.Errorf("second listing gave %v and read %v, want only the unsettled %s", got, parsed, ids[1])
	}
	write(ids[0], state.Done) // replaced: a new inode
	p := y.Path("notes", ids[2]+".json")
	fi, err := os.Stat(p)
	if err != nil {
		t.Fatal(err)
	}
	// The change below is told only by its change time, which the kernel
	// takes from a coarse clock: wait until that clock has moved past
	// the file's (a scratch file stamped later says so). A 20 ms sleep
	// stood for this.
	for was, tick := fi.Sys().(*syscall.Stat_t).Ctim, y.Path("notes", ".tick"); ; {
		if err := os.WriteFile(tick, nil, 0o640); err != nil {
			t.Fatal(err)
		}
		st, err := os.Stat(tick)
		if err != nil {
			t.Fatal(err)
		}
		if c := st.Sys().(*syscall.Stat_t).Ctim; c.Sec > was.Sec || c.Sec == was.Sec && c.Nsec > was.Nsec {
			os.Remove(tick)
			break
		}
	}
	f, err := os.OpenFile(p, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	f.WriteAt([]byte(" "), 1) // changed in place (a newline made a space), same size
	f.Close()
	// and its modification time set back: only the change time tells.
	if err := os.Chtimes(p, fi.ModTime(), fi.ModTime()); err != nil {
		t.Fatal(err)
	}
	list()
	if want := ids; !slices.Equal(parsed, want) {
		t.Errorf("after a replace and a change in place, read %v, want %v", parsed, want)
	}
	os.Remove(y.Path("notes", ids[0]+".json"))
	list()
	write(ids[0], state.Done)
	if got := list(); !slices.Contains(got, ids[0]) {
		t.Errorf("a file put back under a forgotten name was passed over: %v", got)
	}
}

func firstDiff(a, b []string) []string {
	for i := range min(len(a), len(b)) {
		if a[i] != b[i] {
			return []string{a[i], b[i]}
		}
	}
	return nil
}
