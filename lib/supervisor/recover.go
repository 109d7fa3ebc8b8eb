package supervisor

import (
	"context"
	"fmt"
	"os"
	"time"

	"github.com/impyard/impyard/lib/box"
	"github.com/impyard/impyard/lib/mcpserv"
	"github.com/impyard/impyard/lib/netns"
	"github.com/impyard/impyard/lib/queue"
	"github.com/impyard/impyard/lib/run"
	"github.com/impyard/impyard/lib/state"
	"github.com/impyard/impyard/lib/token"
)

// Recover reconciles containerd with the queue after a restart: a running
// task whose box still exists is adopted (if it ended meanwhile, its real
// exit is taken), one whose box is gone fails with the reason, and
// containers no running task owns are removed.
func (s *Supervisor) Recover(ctx context.Context) error {
	s.init()
	infos, err := s.Runner.List(ctx)
	if err != nil {
		return err
	}
	byRun := map[string]box.Info{}
	for _, in := range infos {
		byRun[in.ID] = in
	}
	running, _ := queue.List(s.Yard, queue.Filter{State: state.Running})
	owned := map[string]bool{}
	adopted := map[string]bool{}
	for _, t := range running {
		if len(t.Runs) == 0 {
			s.failRunning(t.ID, "running with no run recorded")
			continue
		}
		runID := t.Runs[len(t.Runs)-1]
		owned[runID] = true
		r, rerr := run.Read(s.Yard, runID)
		if in, ok := byRun[runID]; ok && (in.Status == "" || in.Status == "created") {
			// The container was made but its process never started: the
			// supervisor stopped in between. The leftover is removed below.
			owned[runID] = false
			s.failRunning(t.ID, fmt.Sprintf("box of run %s never started: the supervisor stopped while creating it", runID))
			continue
		}
		if _, ok := byRun[runID]; !ok || rerr != nil {
			why := fmt.Sprintf("box of run %s is gone: the supervisor restarted and containerd has no such container", runID)
			s.failRunning(t.ID, why)
			if rerr == nil && r.Live() {
				s.moveRun(runID, run.Failed, why, nil)
			}
			continue
		}
		b, err := s.Runner.Adopt(ctx, runID, s.ceilingLeft(t.Imp, r))
		if err != nil {
			s.failRunning(t.ID, "cannot adopt box of run "+runID+": "+err.Error())
			continue
		}
		adopted[runID] = true
		// The box ran: its brief told what it carries, even if the
		// supervisor stopped before recording so.
		if err := s.delivered(t.Imp, runID); err != nil {
			s.logf("run %s: recording what its brief told: %v", runID, err)
		}
		s.logf("task %s: adopted box %s", t.ID, runID)
		s.watch(&liveRun{runID: runID, task: t.ID, imp: t.Imp, box: b}, r)
	}
	// A boxed MCP server's box is the gateway's, which removes it.
	for _, in := range infos {
		if !owned[in.ID] && !mcpserv.IsServerBox(in.Labels) {
			s.logf("removing leftover container %s", in.ID)
			if err := s.Runner.Delete(ctx, in.ID); err != nil {
				s.logf("container %s: %v", in.ID, err)
			}
		}
	}
	s.sweepRuns(adopted)
	// A queue whose last transition lost its records to a cut may never
	// move again: its records are written now, not at its next add.
	for _, err := range queue.Repair(s.Yard) {
		s.logf("%v", err)
	}
	// A run that ended unseen (the supervisor or the host went down while
	// its box ran) still has its token: revoked, nothing that kept it is
	// let back in.
	if err := token.RevokeRuns(s.Home, func(runID string) bool {
		r, err := run.Read(s.Yard, runID)
		return !adopted[runID] && err == nil && !r.Live()
	}); err != nil {
		s.logf("tokens: %v", err)
	}
	return nil
}

// sweepRuns closes the records of runs no box carries on: a transition a
// killed supervisor left unrecorded is recorded, a run it died while
// starting is marked failed, and a namespace or workspace left behind is
// removed or saved.
func (s *Supervisor) sweepRuns(adopted map[string]bool) {
	ids, err := run.List(s.Yard)
	if err != nil {
		s.logf("runs: %v", err)
		return
	}
	for _, runID := range ids {
		if adopted[runID] {
			continue
		}
		if err := run.Repair(s.Yard, runID); err != nil {
			s.logf("run %s: %v", runID, err)
		}
		r, err := run.Read(s.Yard, runID)
		if err != nil {
			continue
		}
		if err := saveWorkspace(run.Path(s.Yard, runID, "work")); err != nil {
			s.logf("run %s: %v", runID, err)
		}
		if r.NetNS != "" {
			if _, err := os.Stat(r.NetNS); err == nil {
				if err := netns.Remove(r.NetNS); err != nil {
					s.logf("run %s: %v", runID, err)
				}
			}
		}
		if r.Live() {
			s.moveRun(runID, run.Failed, "the supervisor stopped before the box ran", nil)
		}
	}
}

// ceilingLeft is what remains of an adopted box's ceiling.
func (s *Supervisor) ceilingLeft(imp string, r *run.Run) time.Duration {
	ceiling := box.DefaultCeiling
	if cfg, err := s.loadImp(imp); err == nil && cfg.Ceiling.Duration > 0 {
		ceiling = cfg.Ceiling.Duration
	}
	if r.Started == nil {
		return ceiling
	}
	return max(ceiling-time.Since(*r.Started), time.Second)
}

func (s *Supervisor) failRunning(taskID, why string) {
	if _, err := queue.Move(s.Yard, taskID, queue.Change{To: state.Failed, By: Actor, Actor: Actor, Why: why}); err != nil {
		s.logf("task %s: %v", taskID, err)
		return
	}
	s.logf("task %s failed: %s", taskID, why)
}
