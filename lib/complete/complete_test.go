package complete

import (
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/impyard/impyard/lib/cli"
	"github.com/impyard/impyard/lib/id"
	"github.com/impyard/impyard/lib/queue"
	"github.com/impyard/impyard/lib/state"
	"github.com/impyard/impyard/lib/yard/yardtest"
)

func words(names []cli.Name) []string {
	var w []string
	for _, n := range names {
		w = append(w, n.Word)
	}
	return w
}

func TestNames(t *testing.T) {
	y := yardtest.New(t)
	var ids []string
	for _, text := range []string{"one", "two", "three"} {
		tid, _, err := queue.Add(y, queue.AddOptions{Imp: "yuko", Text: text})
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, tid)
	}
	for _, to := range []string{state.Running, state.Failed} {
		if _, err := queue.Move(y, ids[1], queue.Change{To: to, By: "t", Actor: "t", Why: "t"}); err != nil {
			t.Fatal(err)
		}
	}
	// A directory under imps/ that is no imp's name is not offered, nor
	// is the subject reserved for the trusted side.
	for _, d := range []string{"yuko", "mina", "Bad Name", "org", "$(touch x)"} {
		if err := os.MkdirAll(y.Path("imps", d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	shorts := id.Shortest(ids)
	var all []string
	for _, tid := range ids {
		all = append(all, shorts[tid])
	}
	slices.Sort(all)
	if got := words(Names(y.Root, Task, "")); !slices.Equal(got, all) {
		t.Errorf("tasks: %q, want the abbreviations %q", got, all)
	}
	// A word longer than the abbreviation, as pasted from a script's
	// output, completes to the whole id.
	long := ids[0][:len(shorts[ids[0]])+1]
	if got := words(Names(y.Root, Task, long)); !slices.Equal(got, []string{ids[0]}) {
		t.Errorf("tasks beginning %s: %q, want %s", long, got, ids[0])
	}
	failed := Names(y.Root, Kind(Task, state.Failed), "")
	if len(failed) != 1 || failed[0].Word != shorts[ids[1]] || !strings.Contains(failed[0].About, "two") {
		t.Errorf("failed tasks: %+v, want %s, its text in what it is", failed, shorts[ids[1]])
	}
	if got := words(Names(y.Root, Kind(Task, state.Waiting), "")); len(got) != 2 || slices.Contains(got, shorts[ids[1]]) {
		t.Errorf("waiting tasks: %q, want the two others", got)
	}
	if got := words(Names(y.Root, Imp, "")); !slices.Equal(got, []string{"mina", "yuko"}) {
		t.Errorf("imps: %q, want mina and yuko", got)
	}
	if got := words(Names(y.Root, Imp, "y")); !slices.Equal(got, []string{"yuko"}) {
		t.Errorf("imps beginning y: %q, want yuko", got)
	}
	if got := Names(y.Root, Gate, ""); got != nil {
		t.Errorf("gates of a yard with none: %+v", got)
	}
	if got := Names(y.Root, "planet", ""); got != nil {
		t.Errorf("an unknown kind: %+v, want none", got)
	}
}

// TestNamesWithoutYard: where there is no yard, nothing, and no error
// to print.
func TestNamesWithoutYard(t *testing.T) {
	dir := t.TempDir()
	for _, kind := range []string{Imp, Task, Gate, Kind(Gate, state.Filed)} {
		if got := Names(dir, kind, ""); got != nil {
			t.Errorf("%s in a directory that is no yard: %+v", kind, got)
		}
	}
}
