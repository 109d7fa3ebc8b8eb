package run

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/impyard/impyard/lib/id"
	"github.com/impyard/impyard/lib/yard"
	"github.com/impyard/impyard/lib/yard/yardtest"
)

func openYard(t *testing.T) *yard.Yard {
	t.Helper()
	y := yardtest.New(t)
	return y
}

func TestWriteRead(t *testing.T) {
	y := openYard(t)
	started := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	r := &Run{ID: id.New(id.Run), Imp: "yuko", Task: id.New(id.Task), State: Running, NetNS: "impyard-x",
		Created: started.Add(-time.Second), Started: &started, Exit: &Exit{Code: 137, Signal: "KILL", Killed: true}}
	if err := Write(y, r); err != nil {
		t.Fatal(err)
	}
	// On disk: runs/<id>/run.json with its schema.
	b, err := os.ReadFile(filepath.Join(y.Root, "runs", r.ID, "run.json"))
	if err != nil {
		t.Fatal(err)
	}
	var raw map[string]any
	if err := json.Unmarshal(b, &raw); err != nil || raw["schema"] != "impyard.run/1" || raw["state"] != Running {
		t.Errorf("run.json %s (%v)", b, err)
	}
	got, err := Read(y, r.ID)
	if err != nil {
		t.Fatal(err)
	}
	if got.ID != r.ID || got.Imp != "yuko" || got.Task != r.Task || got.State != Running || got.NetNS != "impyard-x" ||
		!got.Started.Equal(started) || got.Exit == nil || *got.Exit != *r.Exit || got.Ended != nil {
		t.Errorf("read back %+v, want %+v", got, r)
	}

	// Written again: replaced, not appended.
	r.State = Exited
	if err := Write(y, r); err != nil {
		t.Fatal(err)
	}
	if got, err := Read(y, r.ID); err != nil || got.State != Exited {
		t.Errorf("after rewrite: %+v %v", got, err)
	}
}

func TestReadRefuses(t *testing.T) {
	y := openYard(t)
	if _, err := Read(y, "../etc"); err == nil {
		t.Error("read an invalid run id")
	}
	if err := Write(y, &Run{ID: "r-../../x"}); err == nil {
		t.Error("wrote an invalid run id")
	}
	missing := id.New(id.Run)
	if _, err := Read(y, missing); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("missing run: %v", err)
	}
	// A run.json copied into another run's directory is refused.
	a, b := id.New(id.Run), id.New(id.Run)
	if err := Write(y, &Run{ID: a, Imp: "yuko", State: Starting}); err != nil {
		t.Fatal(err)
	}
	os.MkdirAll(filepath.Join(y.Root, "runs", b), 0o750)
	data, _ := os.ReadFile(filepath.Join(y.Root, "runs", a, "run.json"))
	os.WriteFile(filepath.Join(y.Root, "runs", b, "run.json"), data, 0o640)
	if _, err := Read(y, b); err == nil || !strings.Contains(err.Error(), "does not match its directory") {
		t.Errorf("copied run.json: %v", err)
	}
	// Another file kind is refused by its schema.
	os.WriteFile(filepath.Join(y.Root, "runs", b, "run.json"), []byte(`{"schema":"impyard.task/1","id":"`+b+`"}`), 0o640)
	if _, err := Read(y, b); err == nil {
		t.Error("read a task file as a run")
	}
}

func TestLive(t *testing.T) {
	for _, c := range []struct {
		state string
		want  bool
	}{
		{Starting, true}, {Running, true}, {Exited, false}, {Failed, false}, {"", false},
	} {
		if got := (&Run{State: c.state}).Live(); got != c.want {
			t.Errorf("Live(%q) = %v, want %v", c.state, got, c.want)
		}
	}
}

func TestReady(t *testing.T) {
	y := openYard(t)
	runID := id.New(id.Run)
	// Not ready: the wait ends at its timeout with an error naming the run.
	err := WaitReady(y, runID, 30*time.Millisecond)
	if err == nil || !strings.Contains(err.Error(), "run "+runID+": the gateway did not start serving") {
		t.Errorf("no gateway: %v", err)
	}

	// Ready written while waiting: the wait returns.
	done := make(chan error, 1)
	go func() { done <- WaitReady(y, runID, time.Minute) }()
	if err := WriteReady(y, runID, "10.0.0.1:3128"); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Errorf("wait after ready: %v", err)
	}
	b, err := os.ReadFile(filepath.Join(y.Root, "runs", runID, "gateway.json"))
	if err != nil {
		t.Fatal(err)
	}
	var r Ready
	if err := json.Unmarshal(b, &r); err != nil || r.Schema != "impyard.ready/1" || r.Run != runID || r.Listen != "10.0.0.1:3128" || r.At.IsZero() {
		t.Errorf("gateway.json %s (%v)", b, err)
	}

	if err := WriteReady(y, "bogus", "x"); err == nil {
		t.Error("ready for an invalid run id")
	}
	// An unreadable gateway.json is an error at once, not a wait.
	other := id.New(id.Run)
	os.MkdirAll(filepath.Join(y.Root, "runs", other, "gateway.json"), 0o750)
	start := time.Now()
	if err := WaitReady(y, other, time.Minute); err == nil || time.Since(start) > 30*time.Second {
		t.Errorf("unreadable gateway.json: %v after %v", err, time.Since(start))
	}
}

func TestList(t *testing.T) {
	y := openYard(t)
	if ids, err := List(y); err != nil || ids != nil {
		t.Errorf("no runs dir: %v %v", ids, err)
	}
	var want []string
	for range 3 {
		r := id.New(id.Run)
		if err := Write(y, &Run{ID: r, Imp: "yuko", State: Starting}); err != nil {
			t.Fatal(err)
		}
		want = append(want, r)
	}
	slices.Sort(want)
	// Not runs: a file with a run's name, a directory with another name.
	os.WriteFile(filepath.Join(y.Root, "runs", id.New(id.Run)), nil, 0o640)
	os.MkdirAll(filepath.Join(y.Root, "runs", "tmp"), 0o750)
	os.MkdirAll(filepath.Join(y.Root, "runs", id.New(id.Task)), 0o750)
	got, err := List(y)
	if err != nil || !slices.Equal(got, want) {
		t.Errorf("List = %v %v, want %v", got, err, want)
	}
	// A runs that is not a directory is an error, not an empty list.
	y2 := openYard(t)
	os.WriteFile(filepath.Join(y2.Root, "runs"), nil, 0o640)
	if ids, err := List(y2); err == nil {
		t.Errorf("runs is a file: %v", ids)
	}
}

func TestPath(t *testing.T) {
	y := openYard(t)
	if got, want := Path(y, "r-x", "worktree", "a"), filepath.Join(y.Root, "runs", "r-x", "worktree", "a"); got != want {
		t.Errorf("Path = %s, want %s", got, want)
	}
	if got, want := Path(y, "r-x"), filepath.Join(y.Root, "runs", "r-x"); got != want {
		t.Errorf("Path = %s, want %s", got, want)
	}
}
