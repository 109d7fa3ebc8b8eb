package queue

import (
	"context"
	"errors"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/impyard/impyard/lib/state"
	"github.com/impyard/impyard/lib/store"
	"github.com/impyard/impyard/lib/yard/yardtest"
)

// TestSymlinkedQueueRefused: queue/<imp>, or queue/ itself, replaced by a
// symlink to a queue elsewhere is refused by List and Get too, naming the
// link, and a move through it changes nothing on either side.
func TestSymlinkedQueueRefused(t *testing.T) {
	for _, rel := range []string{"queue/yuko", "queue"} {
		t.Run(rel, func(t *testing.T) {
			other := newYard(t)
			id := mustAdd(t, other, AddOptions{})
			y := newYard(t)
			if err := os.MkdirAll(y.Path("queue"), 0o750); err != nil {
				t.Fatal(err)
			}
			link := y.Path(rel)
			os.RemoveAll(link)
			if err := os.Symlink(other.Path(rel), link); err != nil {
				t.Fatal(err)
			}
			before, beforeOther := tree(t, y.Root), tree(t, other.Root)

			for _, f := range []Filter{{Imp: "yuko"}, {}} {
				tasks, bad := List(y, f)
				if len(tasks) != 0 {
					t.Errorf("List(%+v) read through the symlink: %v", f, tasks)
				}
				if len(bad) == 0 || !strings.Contains(bad[0].Error(), link) {
					t.Errorf("List(%+v): bad %v, want an error naming %s", f, bad, link)
				}
			}
			if _, err := Get(y, id); err == nil || !strings.Contains(err.Error(), link) {
				t.Errorf("Get: %v, want an error naming %s", err, link)
			}
			if _, err := Move(y, id, Change{To: state.Cancelled, By: "alice"}); err == nil || !strings.Contains(err.Error(), link) {
				t.Errorf("Move: %v, want an error naming %s", err, link)
			}
			yardtest.Unchanged(t, y.Root, before, "the yard changed")
			yardtest.Unchanged(t, other.Root, beforeOther, "written through the symlink")
		})
	}
}

// TestUnknownMajorWritesNothing: a task written by a newer impyard (an
// unknown schema major) is refused by Move and, when it holds a unique
// key, by Add, and neither writes anything: no lock file, no .tmp, no
// duplicate task.
func TestUnknownMajorWritesNothing(t *testing.T) {
	y := newYard(t)
	id := mustAdd(t, y, AddOptions{Unique: "digest"})
	p := y.Path("queue", "yuko", id+".json")
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(strings.Replace(string(b), "impyard.task/1", "impyard.task/2", 1)), 0o640); err != nil {
		t.Fatal(err)
	}
	// As a newer impyard may have left it: no lock file, no temp directory.
	os.Remove(y.Path("queue", "yuko", ".lock"))
	os.RemoveAll(y.Path("queue", "yuko", ".tmp"))
	before := tree(t, y.Root)

	got, existed, err := Add(y, AddOptions{Imp: "yuko", Text: "again", Unique: "digest", By: "alice", Actor: "test"})
	if !errors.Is(err, store.ErrUnknownMajor) || !strings.Contains(err.Error(), p) || got != "" || existed {
		t.Errorf("Add: %q, %v, %v; want a refusal naming %s", got, existed, err, p)
	}
	if _, err := Move(y, id, Change{To: state.Cancelled, By: "alice"}); !errors.Is(err, store.ErrUnknownMajor) || !strings.Contains(err.Error(), p) {
		t.Errorf("Move: %v, want a refusal naming %s", err, p)
	}
	yardtest.Unchanged(t, y.Root, before, "a refusal wrote")
}

// TestWatchRefusesSymlinkedQueue: the watcher's scans read through the
// same checks: a queue replaced by a symlink is reported, naming it, and
// nothing that happens to the tasks it points at is reported as news.
func TestWatchRefusesSymlinkedQueue(t *testing.T) {
	other := newYard(t)
	id := mustAdd(t, other, AddOptions{})
	y := newYard(t)
	if err := os.MkdirAll(y.Path("queue"), 0o750); err != nil {
		t.Fatal(err)
	}
	link := y.Path("queue", "yuko")
	if err := os.Symlink(other.Path("queue", "yuko"), link); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	got := make(chan Event, 16)
	warned := make(chan error, 64)
	go Watch(ctx, y, "yuko", 20*time.Millisecond, func(e Event) { got <- e }, func(err error) {
		select {
		case warned <- err:
		default:
		}
	})
	refused := func() {
		t.Helper()
		for deadline := time.After(10 * time.Second); ; {
			select {
			case e := <-got:
				t.Fatalf("reported a task through the symlink: %+v", e)
			case err := <-warned:
				if strings.Contains(err.Error(), link) && strings.Contains(err.Error(), "symlink") {
					return
				}
			case <-deadline:
				t.Fatalf("the watcher never reported the symlinked %s", link)
			}
		}
	}
	refused()
	if _, err := Move(other, id, Change{To: state.Running, By: "impsup"}); err != nil {
		t.Fatal(err)
	}
	// Two more scans after the move: still refused, still no news.
	refused()
	refused()
	select {
	case e := <-got:
		t.Fatalf("reported a task through the symlink: %+v", e)
	default:
	}
}
