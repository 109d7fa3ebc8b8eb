package supervisor

import (
	"github.com/impyard/impyard/lib/box"
	"github.com/impyard/impyard/lib/queue"
	"github.com/impyard/impyard/lib/run"
	"github.com/impyard/impyard/lib/store"
)

// newRun files the run of task t, starting, in the namespace ns under
// runtime rt.
func (s *Supervisor) newRun(runID string, t *queue.Task, ns string, rt box.Runtime) (*run.Run, error) {
	return run.Create(s.Yard, &run.Run{ID: runID, Imp: t.Imp, Task: t.ID, NetNS: ns,
		Runtime: rt.Name, RuntimeVersion: rt.Version, Created: store.Now()}, Actor, Actor, "task "+t.ID)
}

// moveRun moves a run on through the run machine, with edit (if any)
// changing its other fields in the same write, and returns it as written.
// A refusal is logged and nil returned: the task's own transition decides
// what happens next, the run's record only tells it.
func (s *Supervisor) moveRun(runID, to, why string, edit func(r *run.Run)) *run.Run {
	c := run.Change{To: to, By: Actor, Actor: Actor, Why: why}
	if edit != nil {
		c.Edit = func(r *run.Run) error { edit(r); return nil }
	}
	r, err := run.Move(s.Yard, runID, c)
	if err != nil {
		s.logf("run %s: %v", runID, err)
		return nil
	}
	return r
}

// failRun fails a run whose box was never made, filing it first when it
// was not filed yet, so even a run that got no further has its record.
func (s *Supervisor) failRun(runID string, t *queue.Task, ns string, rt box.Runtime, filed bool, why string) {
	if !filed {
		if _, err := s.newRun(runID, t, ns, rt); err != nil {
			s.logf("run %s: %v", runID, err)
			return
		}
	}
	s.moveRun(runID, run.Failed, why, nil)
}
