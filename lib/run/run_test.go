package run

import (
	"bytes"
	"errors"
	"os"
	"testing"

	"github.com/impyard/impyard/lib/event"
	"github.com/impyard/impyard/lib/state"
	"github.com/impyard/impyard/lib/yard"
	"github.com/impyard/impyard/lib/yard/yardtest"
)

const testRun = "r-0000000000000001"

func create(t *testing.T, y *yard.Yard) *Run {
	t.Helper()
	r, err := Create(y, &Run{ID: testRun, Imp: "yuko", Task: "t-0000000000000001", NetNS: "/run/netns/x"}, "impsup", "test", "task t-0000000000000001")
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// TestRunMachineRefusesIllegal: every transition the run machine does not
// allow is refused with state.ErrIllegal, and run.json is left as it was.
func TestRunMachineRefusesIllegal(t *testing.T) {
	for _, c := range []struct {
		path []string
		to   string
	}{
		{nil, Starting},
		{[]string{Running}, Starting},
		{[]string{Running}, Running},
		{[]string{Exited}, Running},
		{[]string{Exited}, Failed},
		{[]string{Running, Exited}, Starting},
		{[]string{Failed}, Running},
		{[]string{Failed}, Exited},
		{nil, "bogus"},
	} {
		y := yardtest.New(t)
		create(t, y)
		for _, to := range c.path {
			if _, err := Move(y, testRun, Change{To: to, By: "impsup"}); err != nil {
				t.Fatal(err)
			}
		}
		p := y.Path("runs", testRun, "run.json")
		before, _ := os.ReadFile(p)
		if _, err := Move(y, testRun, Change{To: c.to, By: "impsup"}); !errors.Is(err, state.ErrIllegal) {
			t.Errorf("%v -> %s: %v, want state.ErrIllegal", c.path, c.to, err)
		}
		if after, _ := os.ReadFile(p); !bytes.Equal(before, after) {
			t.Errorf("%v -> %s: refused, yet run.json changed", c.path, c.to)
		}
	}
}

// TestRunLifecycle: the legal paths keep their history and set when the
// box started and ended and why it failed.
func TestRunLifecycle(t *testing.T) {
	y := yardtest.New(t)
	r := create(t, y)
	if r.State != Starting || len(r.History) != 1 || r.History[0].By != "impsup" || !r.Live() {
		t.Fatalf("created %+v", r)
	}
	r, err := Move(y, testRun, Change{To: Running, By: "impsup", Why: "box started"})
	if err != nil || r.Started == nil || r.Ended != nil {
		t.Fatalf("running: %v %+v", err, r)
	}
	_, err = Move(y, testRun, Change{To: Failed, By: "impsup", Why: "box error", Edit: func(r *Run) error {
		r.Exit = &Exit{Code: 137, Killed: true}
		return nil
	}})
	if err != nil {
		t.Fatal(err)
	}
	disk, err := Read(y, testRun)
	if err != nil {
		t.Fatal(err)
	}
	if disk.State != Failed || disk.Live() || disk.Ended == nil || disk.Error != "box error" || disk.Exit == nil || disk.Exit.Code != 137 || len(disk.History) != 3 || disk.NetNS != "/run/netns/x" {
		t.Errorf("on disk %+v", disk)
	}
	if _, err := Create(y, &Run{ID: testRun, Imp: "yuko"}, "impsup", "test", ""); !errors.Is(err, ErrExists) {
		t.Errorf("created twice: %v", err)
	}
}

// TestWriteIsChecked: Write no longer overwrites; it moves the run through
// the machine, so a finished run cannot be made live again.
func TestWriteIsChecked(t *testing.T) {
	y := yardtest.New(t)
	r := &Run{ID: testRun, Imp: "yuko", Task: "t-0000000000000001", State: Starting}
	if err := Write(y, r); err != nil {
		t.Fatal(err)
	}
	r.State = Exited
	if err := Write(y, r); err != nil {
		t.Fatal(err)
	}
	r.State = Running
	if err := Write(y, r); !errors.Is(err, state.ErrIllegal) {
		t.Errorf("Write exited -> running: %v, want state.ErrIllegal", err)
	}
	if got, _ := Read(y, testRun); got.State != Exited || len(got.History) != 2 {
		t.Errorf("run.json: %+v", got)
	}
}

// TestRepairRecordsAnEndedRun: a run whose last transition could not be
// recorded, and that will not move again, is recorded by Repair, once.
func TestRepairRecordsAnEndedRun(t *testing.T) {
	y := yardtest.New(t)
	create(t, y)
	jp := y.Path("journal", "yuko", "events.jsonl")
	b, _ := os.ReadFile(jp)
	os.Remove(jp)
	os.Mkdir(jp, 0o750)
	if _, err := Move(y, testRun, Change{To: Exited, By: "impsup"}); err == nil {
		t.Fatal("moved with the journal unwritable and no error")
	}
	os.Remove(jp)
	os.WriteFile(jp, b, 0o640)
	for i := 0; i < 2; i++ {
		if err := Repair(y, testRun); err != nil {
			t.Fatal(err)
		}
	}
	after, _ := os.ReadFile(jp)
	if n := bytes.Count(after, []byte(`"event":"run-exited"`)); n != 1 {
		t.Errorf("journal holds %d run-exited records, want 1:\n%s", n, after)
	}
	if id, ok := event.Interrupted(y.Path("runs", testRun)); ok {
		t.Errorf("marker left naming %s", id)
	}
}
