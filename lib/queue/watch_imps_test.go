package queue

import (
	"context"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/impyard/impyard/lib/id"
	"github.com/impyard/impyard/lib/state"
)

// Watching every imp reports each imp's transitions, an imp's queue made
// after the start included; watching one imp reports only its own.
func TestWatchImps(t *testing.T) {
	y := newYard(t)
	all := watchLive(t, y, "")
	onlyRex := watchLive(t, y, "rex")
	yuko := mustAdd(t, y, AddOptions{Imp: "yuko"})
	rex := mustAdd(t, y, AddOptions{Imp: "rex"}) // queue/rex is new
	Move(y, rex, Change{To: state.Running, By: "impsup"})
	// The all-imps watch also sees the other watch's probes; pass over them.
	want := map[string]bool{"yuko " + yuko + " ->waiting": true, "rex " + rex + " ->waiting": true, "rex " + rex + " waiting->running": true}
	for len(want) > 0 {
		e, ok := all()
		if !ok {
			t.Fatalf("all imps: never saw %v", want)
		}
		delete(want, e.Imp+" "+e.ID+" "+e.From+"->"+e.To)
	}
	for _, w := range []string{rex + " ->waiting", rex + " waiting->running"} {
		e, ok := onlyRex()
		if !ok || e.ID+" "+e.From+"->"+e.To != w || e.Imp != "rex" {
			t.Fatalf("rex: %+v %v, want %s", e, ok, w)
		}
	}
}

// A damaged task file is warned about, by the file event and by later
// rescans, and the watch goes on.
func TestWatchWarnsAboutDamagedFiles(t *testing.T) {
	y := newYard(t)
	mustAdd(t, y, AddOptions{})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	got := make(chan Event, 16)
	warned := make(chan error, 64)
	go func() {
		done <- Watch(ctx, y, "yuko", 20*time.Millisecond, func(e Event) { got <- e }, func(err error) { warned <- err })
	}()
	defer func() { cancel(); <-done }()
	bad := id.New(id.Task)
	os.WriteFile(y.Path("queue", "yuko", bad+".json"), []byte("{"), 0o640)
	deadline := time.After(30 * time.Second)
	for n := 0; n < 2; {
		select {
		case err := <-warned:
			if !strings.Contains(err.Error(), bad) {
				t.Fatalf("warned %v, want the damaged file", err)
			}
			n++
		case <-deadline:
			t.Fatal("no warning about the damaged file")
		}
	}
	// Still watching: a new task is reported.
	fresh := mustAdd(t, y, AddOptions{})
	for {
		select {
		case e := <-got:
			if e.ID == fresh {
				return
			}
		case <-deadline:
			t.Fatal("the watch stopped after a damaged file")
		}
	}
}
