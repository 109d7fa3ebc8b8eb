package queue

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/impyard/impyard/lib/state"
	"github.com/impyard/impyard/lib/store"
	"github.com/impyard/impyard/lib/yard"
	"github.com/impyard/impyard/lib/yard/yardtest"
)

func newYard(t *testing.T) *yard.Yard { return yardtest.New(t) }

// tree lists every path below root with its mode and contents, to show
// that an operation changed nothing.
func tree(t *testing.T, root string) string { return yardtest.Tree(t, root) }

func mustAdd(t *testing.T, y *yard.Yard, o AddOptions) string {
	t.Helper()
	if o.Imp == "" {
		o.Imp = "yuko"
	}
	if o.Text == "" {
		o.Text = "draft the weekly digest"
	}
	o.By, o.Actor = "alice", "test"
	id, _, err := Add(y, o)
	if err != nil {
		t.Fatal(err)
	}
	return id
}

func events(t *testing.T, path string) []map[string]any {
	t.Helper()
	var out []map[string]any
	bad, err := store.ReadJSONL(path, func(line []byte) error {
		var m map[string]any
		if err := json.Unmarshal(line, &m); err != nil {
			return err
		}
		out = append(out, m)
		return nil
	})
	if err != nil || len(bad) > 0 {
		t.Fatalf("read %s: %v %v", path, err, bad)
	}
	return out
}

func TestAddGetAndJournal(t *testing.T) {
	y := newYard(t)
	id := mustAdd(t, y, AddOptions{Labels: []string{"weekly"}, Proactive: true})
	got, err := Get(y, id)
	if err != nil {
		t.Fatal(err)
	}
	if got.State != state.Waiting || got.Imp != "yuko" || !got.Proactive || got.Attempt != 1 || got.Schema != "impyard.task/1" {
		t.Errorf("got %+v", got)
	}
	if len(got.History) != 1 || got.History[0].By != "alice" {
		t.Errorf("history %+v, want one entry by alice", got.History)
	}
	for _, p := range []string{y.Path("journal", "yuko", "events.jsonl"), y.Path("runs", "decisions.jsonl")} {
		ev := events(t, p)
		if len(ev) != 1 || ev[0]["event"] != "task-added" || ev[0]["id"] != id || ev[0]["by"] != "alice" || ev[0]["schema"] != "impyard.event/1" {
			t.Errorf("%s: %v", p, ev)
		}
	}
}

func TestAddRefusesBadInput(t *testing.T) {
	y := newYard(t)
	for _, o := range []AddOptions{
		{Imp: "Yuko!", Text: "x"},
		{Imp: "../etc", Text: "x"},
		{Imp: "yuko/../../x", Text: "x"},
		{Imp: "yuko", Text: "  "},
		{Imp: "yuko", Text: "x", Kind: "poetry"},
		{Imp: "yuko", Text: "x", Continues: "../t-1"},
	} {
		if _, _, err := Add(y, o); err == nil {
			t.Errorf("Add(%+v) succeeded", o)
		}
	}
	if entries, _ := os.ReadDir(y.Path("queue")); len(entries) != 0 {
		t.Errorf("refused adds created %v", entries)
	}
	if _, err := Get(y, "../../etc/passwd"); err == nil || !strings.Contains(err.Error(), "invalid task id") {
		t.Errorf("Get(../) = %v", err)
	}
}

func TestUnique(t *testing.T) {
	y := newYard(t)
	a := mustAdd(t, y, AddOptions{Unique: "weekly"})
	b, existed, err := Add(y, AddOptions{Imp: "yuko", Text: "again", Unique: "weekly"})
	if err != nil || !existed || b != a {
		t.Fatalf("second add = %s %v %v, want %s existing", b, existed, err, a)
	}
	if _, err := Move(y, a, Change{To: state.Running, By: "impsup"}); err != nil {
		t.Fatal(err)
	}
	if c, existed, _ := Add(y, AddOptions{Imp: "yuko", Text: "again", Unique: "weekly"}); c != a || !existed {
		t.Errorf("add while running = %s, want %s", c, a)
	}
	if _, err := Move(y, a, Change{To: state.Done, By: "impsup"}); err != nil {
		t.Fatal(err)
	}
	d, existed, err := Add(y, AddOptions{Imp: "yuko", Text: "next week", Unique: "weekly"})
	if err != nil || existed || d == a {
		t.Errorf("add after done = %s %v %v, want a new task", d, existed, err)
	}
	if tasks, _ := List(y, Filter{}); len(tasks) != 2 {
		t.Errorf("%d tasks, want 2", len(tasks))
	}
}

func TestMachine(t *testing.T) {
	y := newYard(t)
	id := mustAdd(t, y, AddOptions{})
	steps := []struct {
		to, wantErr string
	}{
		{state.Done, "waiting; it cannot become done"},
		{state.Running, ""},
		{state.Running, "already running"},
		{state.Failed, ""},
		{state.Done, "cannot become done"},
		{state.Waiting, ""},
		{state.Cancelled, ""},
		{state.Waiting, "final"},
		{"exploded", "unknown state"},
	}
	for _, s := range steps {
		_, err := Move(y, id, Change{To: s.to, By: "bob", Actor: "test", Why: "step"})
		if (err == nil) != (s.wantErr == "") || (err != nil && !strings.Contains(err.Error(), s.wantErr)) {
			t.Errorf("-> %s: got %v, want %q", s.to, err, s.wantErr)
		}
	}
	got, _ := Get(y, id)
	if got.State != state.Cancelled || len(got.History) != 5 {
		t.Errorf("state %s with %d transitions, want cancelled with 5", got.State, len(got.History))
	}
	if h := got.History[2]; h.From != state.Running || h.To != state.Failed || h.By != "bob" || h.Why != "step" || h.At.IsZero() {
		t.Errorf("transition not recorded whole: %+v", h)
	}
}

func TestRetry(t *testing.T) {
	y := newYard(t)
	id := mustAdd(t, y, AddOptions{})
	if _, err := Retry(y, id, "bob", "test"); err == nil {
		t.Errorf("retry of a waiting task succeeded")
	}
	Move(y, id, Change{To: state.Running})
	Move(y, id, Change{To: state.Failed, Why: "box exited 1"})
	got, err := Retry(y, id, "bob", "test")
	if err != nil || got.State != state.Waiting || got.Attempt != 2 {
		t.Errorf("retry = %+v, %v", got, err)
	}
}

func TestListSurvivesBadFiles(t *testing.T) {
	y := newYard(t)
	good := mustAdd(t, y, AddOptions{})
	other := mustAdd(t, y, AddOptions{})
	dir := y.Path("queue", "yuko")
	// A file from a newer impyard: refused, never rewritten.
	newer, _ := os.ReadFile(filepath.Join(dir, other+".json"))
	newer = []byte(strings.Replace(string(newer), "impyard.task/1", "impyard.task/9", 1))
	os.WriteFile(filepath.Join(dir, other+".json"), newer, 0o640)
	truncated := "t-0000000000000000"
	os.WriteFile(filepath.Join(dir, truncated+".json"), []byte(`{"schema":"impyard.task/1","id":"t-00`), 0o640)
	secret := filepath.Join(t.TempDir(), "secret.json")
	os.WriteFile(secret, []byte(`{"schema":"impyard.task/1"}`), 0o600)
	os.Symlink(secret, filepath.Join(dir, "t-1111111111111111.json"))

	tasks, bad := List(y, Filter{})
	if len(tasks) != 1 || tasks[0].ID != good {
		t.Errorf("listed %d tasks, want only %s", len(tasks), good)
	}
	msgs := ""
	for _, e := range bad {
		msgs += e.Error() + "\n"
	}
	for _, want := range []string{other + `.json: schema "impyard.task/9" is not supported`, truncated + ".json: not valid JSON", "t-1111111111111111.json: is a symlink"} {
		if !strings.Contains(msgs, want) {
			t.Errorf("bad-file report lacks %q:\n%s", want, msgs)
		}
	}
	if _, err := Move(y, other, Change{To: state.Cancelled}); err == nil {
		t.Errorf("moved a task of an unknown schema major")
	}
	if after, _ := os.ReadFile(filepath.Join(dir, other+".json")); string(after) != string(newer) {
		t.Errorf("refused file was changed")
	}
}

func TestConcurrentMoveOneWins(t *testing.T) {
	y := newYard(t)
	for round := 0; round < 20; round++ {
		id := mustAdd(t, y, AddOptions{})
		var wg sync.WaitGroup
		var mu sync.Mutex
		wins := 0
		for i := 0; i < 4; i++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				if _, err := Move(y, id, Change{To: state.Running}); err == nil {
					mu.Lock()
					wins++
					mu.Unlock()
				}
			}()
		}
		wg.Wait()
		if wins != 1 {
			t.Fatalf("round %d: %d winners", round, wins)
		}
	}
}

// watchLive starts Watch and returns its events, without those of the
// probes it needed: Watch reports nothing from before its first scan, so
// probe until it answers.
func watchLive(t *testing.T, y *yard.Yard, imp string) func() (Event, bool) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	got := make(chan Event, 64)
	go Watch(ctx, y, imp, time.Hour, func(e Event) { got <- e }, func(err error) { t.Log(err) })
	probes := map[string]bool{}
	next := func() (Event, bool) {
		for {
			select {
			case e := <-got:
				if !probes[e.ID] {
					return e, true
				}
			case <-time.After(5 * time.Second):
				return Event{}, false
			}
		}
	}
	for deadline := time.Now().Add(10 * time.Second); ; {
		probes[mustAdd(t, y, AddOptions{Imp: imp, Text: "probe"})] = true
		select {
		case e := <-got:
			if probes[e.ID] {
				return next
			}
			t.Fatalf("an event before the watcher was live: %+v", e)
		case <-time.After(100 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatal("the watcher never reported")
		}
	}
}

func TestWatch(t *testing.T) {
	y := newYard(t)
	before := mustAdd(t, y, AddOptions{})
	next := watchLive(t, y, "yuko")
	Move(y, before, Change{To: state.Running, By: "impsup"})
	fresh := mustAdd(t, y, AddOptions{})
	for _, w := range []string{before + " waiting->running", fresh + " ->waiting"} {
		e, ok := next()
		if !ok {
			t.Fatalf("no event for %s", w)
		}
		if s := e.ID + " " + e.From + "->" + e.To; s != w {
			t.Errorf("got %s, want %s", s, w)
		}
	}
}

func TestWatchEmptyYard(t *testing.T) {
	y := newYard(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	got := make(chan Event, 16)
	go Watch(ctx, y, "yuko", time.Hour, func(e Event) { got <- e }, func(err error) { t.Log(err) })
	// A task added before the watcher's first scan is history, not news,
	// so keep adding until one is reported; with a one-hour rescan, only
	// the watch on the yard root can see queue/ being created.
	added := map[string]bool{}
	for i := 0; i < 20; i++ {
		added[mustAdd(t, y, AddOptions{})] = true
		select {
		case e := <-got:
			if !added[e.ID] || e.To != state.Waiting {
				t.Errorf("got %+v", e)
			}
			return
		case <-time.After(250 * time.Millisecond):
		}
	}
	t.Fatal("tasks added to a yard without queue/ were never reported")
}

func TestHold(t *testing.T) {
	y := newYard(t)
	id := mustAdd(t, y, AddOptions{Proactive: true})
	task, err := Hold(y, id, "impsup", "impsup", "held: over budget")
	if err != nil {
		t.Fatal(err)
	}
	if task.State != state.Waiting || task.Reason != "held: over budget" || len(task.History) != 2 {
		t.Fatalf("held: %s %q %+v", task.State, task.Reason, task.History)
	}
	// A task that left waiting is not held: a failed one would otherwise
	// be moved back to waiting, as a retry is.
	if _, err := Move(y, id, Change{To: state.Failed, By: "impsup", Actor: "impsup", Why: "gone"}); err != nil {
		t.Fatal(err)
	}
	before := tree(t, y.Root)
	if _, err := Hold(y, id, "impsup", "impsup", "held: over budget"); !errors.Is(err, ErrNotWaiting) {
		t.Fatalf("hold of a failed task: %v", err)
	}
	if after := tree(t, y.Root); after != before {
		t.Errorf("a refused hold changed the yard:\n%s", after)
	}
	if task, _ := Get(y, id); task.State != state.Failed {
		t.Errorf("task is %s", task.State)
	}
}
