package state

import (
	"errors"
	"slices"
	"testing"
)

// The legal moves, written out here rather than read from the machines, so
// a change to either machine has to change this table too.
var (
	taskLegal = map[[2]string]bool{
		{Waiting, Running}:       true,
		{Waiting, Cancelled}:     true,
		{Waiting, Failed}:        true,
		{Running, NeedsReview}:   true,
		{Running, Done}:          true,
		{Running, Failed}:        true,
		{Running, Cancelled}:     true,
		{NeedsReview, Done}:      true,
		{NeedsReview, Failed}:    true,
		{NeedsReview, Cancelled}: true,
		{Failed, Waiting}:        true,
	}
	gateLegal = map[[2]string]bool{
		{Filed, Approved}:     true,
		{Filed, Denied}:       true,
		{Filed, Expired}:      true,
		{Approved, Executing}: true,
		{Approved, Failed}:    true,
		{Executing, Executed}: true,
		{Executing, Failed}:   true,
	}
	runLegal = map[[2]string]bool{
		{Starting, Running}: true,
		{Starting, Exited}:  true,
		{Starting, Failed}:  true,
		{Running, Exited}:   true,
		{Running, Failed}:   true,
	}
	taskStates = []string{Waiting, Running, NeedsReview, Done, Failed, Cancelled}
	gateStates = []string{Filed, Approved, Denied, Expired, Executing, Executed, Failed}
	runStates  = []string{Starting, Running, Exited, Failed}
)

func TestEveryPair(t *testing.T) {
	for _, m := range []struct {
		name    string
		machine Machine
		states  []string
		legal   map[[2]string]bool
	}{
		{"task", TaskMachine, taskStates, taskLegal},
		{"gate", GateMachine, gateStates, gateLegal},
		{"run", RunMachine, runStates, runLegal},
	} {
		for _, from := range m.states {
			for _, to := range m.states {
				err := m.machine.Check("x-1", from, to)
				if m.legal[[2]string{from, to}] {
					if err != nil {
						t.Errorf("%s %s -> %s: got %v, want allowed", m.name, from, to, err)
					}
					continue
				}
				if !errors.Is(err, ErrIllegal) || errors.Is(err, ErrUnknownState) {
					t.Errorf("%s %s -> %s: got %v, want ErrIllegal", m.name, from, to, err)
				}
			}
		}
	}
}

func TestStatesAndTerminal(t *testing.T) {
	for _, c := range []struct {
		name     string
		machine  Machine
		states   []string
		terminal []string
	}{
		{"task", TaskMachine, taskStates, []string{Done, Cancelled}},
		{"gate", GateMachine, gateStates, []string{Executed, Denied, Expired, Failed}},
		{"run", RunMachine, runStates, []string{Exited, Failed}},
	} {
		got := c.machine.States()
		slices.Sort(got)
		want := slices.Clone(c.states)
		slices.Sort(want)
		if !slices.Equal(got, want) {
			t.Errorf("%s States() = %v, want %v", c.name, got, want)
		}
		for _, s := range c.states {
			if !c.machine.Known(s) {
				t.Errorf("%s Known(%q) = false", c.name, s)
			}
			if got, want := c.machine.Terminal(s), slices.Contains(c.terminal, s); got != want {
				t.Errorf("%s Terminal(%q) = %v, want %v", c.name, s, got, want)
			}
		}
		for _, s := range []string{"", "bogus", "Waiting"} {
			if c.machine.Known(s) || c.machine.Terminal(s) {
				t.Errorf("%s: %q is known or terminal", c.name, s)
			}
		}
	}
	// The machines do not share states they should not: a gate is never
	// running, a task never approved, a run never waiting.
	if GateMachine.Known(Running) || TaskMachine.Known(Approved) || RunMachine.Known(Waiting) || TaskMachine.Known(Starting) {
		t.Error("task and gate states mixed")
	}
}

func TestCheckMessages(t *testing.T) {
	for _, c := range []struct {
		m        Machine
		from, to string
		want     string
		sentinel error
	}{
		{TaskMachine, Waiting, "bogus", `task t-1: unknown state "bogus"`, ErrUnknownState},
		{TaskMachine, "bogus", "bogus", `task t-1: unknown state "bogus"`, ErrUnknownState},
		{TaskMachine, Running, Running, "task t-1 is already running", ErrIllegal},
		{TaskMachine, Done, Done, "task t-1 is already done", ErrIllegal},
		{TaskMachine, Done, Waiting, "task t-1 is done, which is final; it cannot become waiting", ErrIllegal},
		{TaskMachine, Waiting, Done, "task t-1 is waiting; it cannot become done", ErrIllegal},
		{TaskMachine, "", Waiting, "task t-1 is ; it cannot become waiting", ErrIllegal},
		{GateMachine, Denied, Approved, "gate t-1 is denied, which is final; it cannot become approved", ErrIllegal},
		{GateMachine, Approved, Denied, "gate t-1 is approved; it cannot become denied", ErrIllegal},
		{RunMachine, Running, Starting, "run t-1 is running; it cannot become starting", ErrIllegal},
		{RunMachine, Exited, Running, "run t-1 is exited, which is final; it cannot become running", ErrIllegal},
		{RunMachine, Starting, Done, `run t-1: unknown state "done"`, ErrUnknownState},
	} {
		err := c.m.Check("t-1", c.from, c.to)
		if err == nil || err.Error() != c.want || !errors.Is(err, c.sentinel) || !errors.Is(err, ErrIllegal) {
			t.Errorf("Check(%q, %q) = %v, want %q (%v)", c.from, c.to, err, c.want, c.sentinel)
		}
	}
}
