package tests

import (
	"encoding/json"
	"testing"

	runrec "github.com/impyard/impyard/lib/run"
	"github.com/impyard/impyard/lib/state"
	"github.com/impyard/impyard/lib/store"
	"github.com/impyard/impyard/lib/yard"
)

// runRecords lists, from the log at path, the events of run runID by seq.
func runRecords(t *testing.T, path, runID string) map[int][]string {
	t.Helper()
	got := map[int][]string{}
	if _, err := store.ReadJSONL(path, func(line []byte) error {
		var e struct {
			ID    string `json:"id"`
			Seq   int    `json:"seq"`
			Event string `json:"event"`
		}
		if json.Unmarshal(line, &e) == nil && e.ID == runID {
			got[e.Seq] = append(got[e.Seq], e.Event)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	return got
}

// checkRunRecorded checks that every transition in a run's history has
// exactly one record, of its name, in the imp's journal and the audit log.
func checkRunRecorded(t *testing.T, y *yard.Yard, imp string, r *runrec.Run) {
	t.Helper()
	for _, p := range []string{y.Path("journal", imp, "events.jsonl"), y.Path("runs", "decisions.jsonl")} {
		got := runRecords(t, p, r.ID)
		for i, h := range r.History {
			if want := "run-" + h.To; len(got[i+1]) != 1 || got[i+1][0] != want {
				t.Errorf("%s: run %s transition %d (%s): records %v, want %v", p, r.ID, i+1, h.To, got[i+1], want)
			}
		}
		if len(got) != len(r.History) {
			t.Errorf("%s: run %s has records %v for %d transitions", p, r.ID, got, len(r.History))
		}
	}
}

// TestBoxRunRecords: a box that runs and exits leaves its run moved
// starting -> running -> exited by the supervisor, each transition in
// run.json's history and recorded once in the journal and the audit log.
func TestBoxRunRecords(t *testing.T) {
	b := newBoxYard(t)
	b.imp(t, "quick", map[string]string{"command": `["/bin/sh", "-c", "echo hi"]`})
	taskID := b.add(t, "quick", "say hi")
	out := b.once(t)
	task := b.task(t, taskID)
	if task.State != state.Done || len(task.Runs) != 1 {
		t.Fatalf("task %s (%s), runs %v\nimpsup: %s", task.State, task.Reason, task.Runs, out)
	}
	r, err := runrec.Read(b.y, task.Runs[0])
	if err != nil {
		t.Fatal(err)
	}
	var path []string
	for _, h := range r.History {
		path = append(path, h.To)
	}
	if len(path) != 3 || path[0] != runrec.Starting || path[1] != runrec.Running || path[2] != runrec.Exited {
		t.Fatalf("run %s went %v, want starting running exited", r.ID, path)
	}
	for _, h := range r.History {
		if h.By != "impsup" || h.Actor != "impsup" {
			t.Errorf("transition %+v not by impsup", h)
		}
	}
	if r.Started == nil || !r.Started.Equal(r.History[1].At) || r.Ended == nil || !r.Ended.Equal(r.History[2].At) || r.Exit == nil || r.Exit.Code != 0 {
		t.Errorf("run.json: %+v", r)
	}
	checkRunRecorded(t, b.y, "quick", r)
}

// checkRunsSettled checks that no run of the yard is left live and that
// each transition of every run has exactly one record, however often the
// supervisor that moved them was killed.
func checkRunsSettled(t *testing.T, y *yard.Yard, imp string) {
	t.Helper()
	ids, err := runrec.List(y)
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range ids {
		r, err := runrec.Read(y, id)
		if store.IsNotExist(err) {
			continue // killed before its run.json was written
		}
		if err != nil {
			t.Errorf("run %s: %v", id, err)
			continue
		}
		if r.Live() {
			t.Errorf("run %s is left %s", id, r.State)
		}
		checkRunRecorded(t, y, imp, r)
	}
}
