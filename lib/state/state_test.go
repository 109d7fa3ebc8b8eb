package state

import (
	"errors"
	"testing"
)

// TestCheck: legal moves pass; every refusal wraps ErrIllegal and reads
// as it always has, for each of the three machines.
func TestCheck(t *testing.T) {
	for _, c := range []struct {
		m        Machine
		from, to string
		want     string // "" when legal
	}{
		{TaskMachine, Waiting, Running, ""},
		{GateMachine, Filed, Approved, ""},
		{RunMachine, Starting, Running, ""},
		{RunMachine, Starting, Exited, ""},
		{RunMachine, Starting, Failed, ""},
		{RunMachine, Running, Exited, ""},
		{RunMachine, Running, Failed, ""},
		{RunMachine, Running, Starting, "run r-1 is running; it cannot become starting"},
		{RunMachine, Running, Running, "run r-1 is already running"},
		{RunMachine, Exited, Running, "run r-1 is exited, which is final; it cannot become running"},
		{RunMachine, Failed, Exited, "run r-1 is failed, which is final; it cannot become exited"},
		{RunMachine, Starting, Done, `run r-1: unknown state "done"`},
		{GateMachine, Approved, Approved, "gate r-1 is already approved"},
		{TaskMachine, Done, Waiting, "task r-1 is done, which is final; it cannot become waiting"},
	} {
		err := c.m.Check("r-1", c.from, c.to)
		if c.want == "" {
			if err != nil {
				t.Errorf("%s %s -> %s: %v", c.m.kind, c.from, c.to, err)
			}
			continue
		}
		if !errors.Is(err, ErrIllegal) || err.Error() != c.want {
			t.Errorf("%s %s -> %s: %v, want %q wrapping ErrIllegal", c.m.kind, c.from, c.to, err, c.want)
		}
	}
	if !RunMachine.Terminal(Exited) || !RunMachine.Terminal(Failed) || RunMachine.Terminal(Starting) || RunMachine.Known(Waiting) {
		t.Errorf("run machine states: %v", RunMachine.States())
	}
}
