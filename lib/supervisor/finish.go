package supervisor

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/impyard/impyard/lib/blob"
	"github.com/impyard/impyard/lib/box"
	"github.com/impyard/impyard/lib/gate"
	"github.com/impyard/impyard/lib/intent"
	"github.com/impyard/impyard/lib/pause"
	"github.com/impyard/impyard/lib/queue"
	"github.com/impyard/impyard/lib/run"
	"github.com/impyard/impyard/lib/state"
	"github.com/impyard/impyard/lib/store"
	"github.com/impyard/impyard/lib/token"
	"github.com/impyard/impyard/lib/transition"
	"github.com/impyard/impyard/lib/worktree"
)

// watch waits for a box in the background and accounts for its end.
func (s *Supervisor) watch(l *liveRun, r *run.Run) {
	s.mu.Lock()
	s.live[l.runID] = l
	s.mu.Unlock()
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		exit, err := l.box.Wait(context.Background())
		s.finish(l, r, exit, err)
		s.mu.Lock()
		delete(s.live, l.runID)
		s.mu.Unlock()
		s.poke()
	}()
}

// finish records how a box ended and moves its task on: failed for a
// non-zero exit, the ceiling or a box error; needs-review while gates it
// filed are open; done otherwise.
func (s *Supervisor) finish(l *liveRun, r *run.Run, exit box.Exit, waitErr error) {
	rto, rwhy := run.Exited, reason(exit)
	if waitErr != nil {
		rto, rwhy = run.Failed, waitErr.Error()
	}
	if nr := s.moveRun(r.ID, rto, rwhy, func(r *run.Run) {
		r.Exit = &run.Exit{Code: exit.Code, Signal: exit.Signal, Ceiling: exit.Ceiling, OOM: exit.OOM, Killed: exit.Killed, Reason: exit.Reason}
	}); nr != nil {
		r = nr
	}
	if err := token.RevokeRun(s.Home, r.ID); err != nil {
		s.logf("run %s: revoking its token: %v", r.ID, err)
	}
	to, why := state.Done, "box exited 0"
	s.mu.Lock()
	stopped := l.stopped
	s.mu.Unlock()
	switch {
	case stopped != "":
		// The owner stopped it: what it did so far is the owner's to judge.
		to, why = state.NeedsReview, stopped+"; "+reason(exit)
	case waitErr != nil:
		to, why = state.Failed, "box error: "+waitErr.Error()
	case exit.Ceiling:
		to, why = state.Failed, "ceiling: "+reason(exit)
	case exit.Code != 0:
		to, why = state.Failed, reason(exit)
	default:
		if cto, cwhy := s.collect(l, r); cto != "" {
			to, why = cto, cwhy
		} else if open, expired := openGates(s, l.task); len(open) > 0 {
			to, why = state.NeedsReview, "box exited 0; waiting on gates "+strings.Join(open, ", ")
		} else if len(expired) > 0 {
			to, why = state.NeedsReview, "box exited 0; "+expiredWhy(expired)
		}
	}
	t, err := queue.Get(s.Yard, l.task)
	if err == nil && t.State == state.Running {
		c := queue.Change{To: to, By: Actor, Actor: Actor, Why: why}
		if stopped != "" {
			c.Edit = func(t *queue.Task) error {
				if !slices.Contains(t.Labels, LabelStopped) {
					t.Labels = append(t.Labels, LabelStopped)
				}
				return nil
			}
		}
		_, err = queue.Move(s.Yard, l.task, c)
	}
	if err != nil {
		s.logf("task %s: %v", l.task, err)
	}
	s.logf("task %s: run %s ended (%s)", l.task, r.ID, why)
	// Cleanup is off the critical path: the task is settled already.
	if err := saveWorkspace(run.Path(s.Yard, r.ID, "work")); err != nil {
		s.logf("run %s: %v", r.ID, err)
	}
	if err := s.Runner.Delete(context.Background(), r.ID); err != nil {
		s.logf("run %s: cleanup: %v", r.ID, err)
	}
}

// collect takes what the box of a code task committed: a commit-and-push
// gate for new commits (to is "" then, so the open gate puts the task in
// needs-review), done "no changes" for none, failed for a box that broke
// the rules of its worktree. Other tasks are left alone.
func (s *Supervisor) collect(l *liveRun, r *run.Run) (to, why string) {
	t, err := queue.Get(s.Yard, l.task)
	if err != nil || t.Kind != queue.Code {
		return "", ""
	}
	wt := run.Path(s.Yard, r.ID, "worktree")
	if _, err := os.Stat(wt); err != nil {
		return state.Failed, "no worktree for run " + r.ID
	}
	branch := worktree.Branch(t.Imp, t.ID)
	repo := t.Repo
	if repo == "" {
		if cfg, err := s.loadImp(t.Imp); err == nil {
			repo = cfg.Repo
		}
	}
	b, err := store.ReadFile(run.Path(s.Yard, r.ID, baseFile))
	base := strings.TrimSpace(string(b))
	if err != nil || !worktree.IsSHA(base) {
		return state.Failed, fmt.Sprintf("box exited 0 but its work cannot be reviewed: no base sha for run %s (%v)", r.ID, err)
	}
	head, diff, stat, err := worktree.Collect(wt, branch, base, r.ID)
	if errors.Is(err, worktree.ErrNoChanges) {
		worktree.Remove(wt)
		return state.Done, "box exited 0; no changes"
	}
	if err != nil {
		return state.Failed, "box exited 0 but its work cannot be reviewed: " + err.Error()
	}
	sum, err := blob.Put(s.Yard, diff)
	if err != nil {
		return state.Failed, "storing the diff: " + err.Error()
	}
	payload, err := json.Marshal(intent.Push{Repo: repo, Branch: branch, Base: base, Head: head,
		Diff: blob.Prefix + sum, Stat: stat})
	if err != nil {
		return state.Failed, err.Error()
	}
	g, err := gate.File(s.Yard, gate.FileOptions{Imp: t.Imp, Intent: intent.CommitAndPush, Payload: payload, Task: t.ID, Run: r.ID,
		Rationale: fmt.Sprintf("push %s (%s..%s) from run %s", branch, base[:12], head[:12], r.ID), By: Actor, Actor: Actor,
		Trust: &gate.Trust{Level: "gate", Why: "filed by impsup for the new commits of a code task; every push waits for a human"}})
	if err != nil {
		return state.Failed, "filing the commit-and-push gate: " + err.Error()
	}
	s.logf("task %s: gate %s filed for %s at %s", t.ID, g.ID, branch, head)
	return "", ""
}

// cleanWorktrees removes the worktrees of a settled task's runs; the diff
// blobs and the records stay.
func (s *Supervisor) cleanWorktrees(t *queue.Task) {
	if t.Kind != queue.Code {
		return
	}
	for _, runID := range t.Runs {
		if err := worktree.Remove(run.Path(s.Yard, runID, "worktree")); err != nil {
			s.logf("run %s: removing its worktree: %v", runID, err)
		}
	}
}

func reason(e box.Exit) string {
	if e.Reason != "" {
		return e.Reason
	}
	if e.Signal != "" {
		return "killed by " + e.Signal
	}
	return fmt.Sprintf("box exited %d", e.Code)
}

// openGates lists the gates of a task not yet finished, and those that
// expired undecided.
func openGates(s *Supervisor, taskID string) (open, expired []string) {
	gate.Each(s.Yard, gate.Filter{All: true}, func(g *gate.Gate) error {
		switch {
		case g.Task != taskID:
		case !state.GateMachine.Terminal(g.State):
			open = append(open, g.ID)
		case g.State == state.Expired:
			expired = append(expired, g.ID)
		}
		return nil
	})
	return open, expired
}

// expiredWhy is why a task whose gates expired stays in review: nobody
// decided what it proposed, which is neither done nor a denial.
func expiredWhy(gates []string) string {
	return "gate " + strings.Join(gates, ", ") + " expired undecided; the owner reviews what it proposed"
}

// reviews reads the gates once and lets them move tasks on: settled
// reviews first, then continuations.
func (s *Supervisor) reviews() {
	// One read of the queue and one of the gates, keeping only the tasks
	// and gates these steps need. A gate whose task was filed after the
	// queue was read waits for the next pass, which its own filing
	// brings.
	var review []*queue.Task
	reviewed := map[string]bool{}
	continued := map[string]*queue.Task{}
	tasks := queue.Filter{Known: s.reviewed, Settled: func(t *queue.Task) bool {
		return final(t) || !t.Continue && t.State == state.Failed
	}}
	bad, _ := queue.Each(s.Yard, tasks, func(t *queue.Task) error {
		if t.State == state.NeedsReview {
			review = append(review, t)
			reviewed[t.ID] = true
		}
		if t.Continue {
			continued[t.ID] = t
		}
		// Read again only once its file changed: by hand, since nothing
		// moves a task out of done or cancelled.
		if final(t) {
			s.final[t.ID] = true
		} else if s.final[t.ID] {
			// The gates passed over as this task's no longer may be:
			// read them all again.
			delete(s.final, t.ID)
			s.gatesSeen = transition.NewKnown()
		}
		return nil
	})
	var gates []*gate.Gate
	finished := gate.Filter{All: true, Known: s.gatesSeen, Settled: func(g *gate.Gate) bool {
		return state.GateMachine.Terminal(g.State) && (g.Task == "" || s.final[g.Task])
	}}
	more, _ := gate.Each(s.Yard, finished, func(g *gate.Gate) error {
		if reviewed[g.Task] || continued[g.Task] != nil {
			gates = append(gates, g)
		}
		return nil
	})
	for _, err := range append(bad, more...) {
		s.logf("%v", err)
	}
	s.settle(review, gates, s.paused())
	s.continuations(continued, gates)
}

// final says whether reviews are done with t for good: done or cancelled,
// which no transition leaves, and no continuation asked for.
func final(t *queue.Task) bool {
	return !t.Continue && state.TaskMachine.Terminal(t.State)
}

// settle moves needs-review tasks on once all their gates are finished:
// failed if one failed, done otherwise (a denied gate is a decision, and
// the task's continuation, if it asked for one, carries it). A task with
// a gate that expired stays in review: nobody decided it. A task whose
// box a pause stopped (LabelStopped) stays while its imp is paused, and
// then fails, as it did not finish.
func (s *Supervisor) settle(tasks []*queue.Task, gates []*gate.Gate, ps *pause.State) {
	for _, t := range tasks {
		open, failed, outcomes := false, "", []string{}
		for _, g := range gates {
			if g.Task != t.ID {
				continue
			}
			if !state.GateMachine.Terminal(g.State) || g.State == state.Expired {
				open = true
				break
			}
			outcomes = append(outcomes, g.ID+" "+g.State)
			if g.State == state.Failed && failed == "" {
				failed = fmt.Sprintf("gate %s failed: %s", g.ID, g.History[len(g.History)-1].Why)
			}
		}
		if open {
			continue
		}
		stopped := slices.Contains(t.Labels, LabelStopped)
		if stopped && ps.Of(t.Imp) != nil {
			// The owner stopped it: it stays in review, its reason shown,
			// while the pause holds.
			continue
		}
		to, why := state.Done, "gates finished: "+strings.Join(outcomes, ", ")
		switch {
		case failed != "":
			to, why = state.Failed, failed
		case stopped:
			// Cut short, it is not done: failed, so impq retry runs it again.
			to, why = state.Failed, "stopped by a pause before it finished; 'impq retry "+t.ID+"' runs it again"
		}
		if _, err := queue.Move(s.Yard, t.ID, queue.Change{To: to, By: Actor, Actor: Actor, Why: why}); err != nil {
			s.logf("task %s: %v", t.ID, err)
			continue
		}
		s.cleanWorktrees(t)
	}
}

// continuations files, once per gate, a continuation task for each
// finished gate (executed, failed or denied) whose task asked for one;
// continued holds those tasks by id.
func (s *Supervisor) continuations(continued map[string]*queue.Task, gates []*gate.Gate) {
	for _, g := range gates {
		t := continued[g.Task]
		if t == nil || !state.GateMachine.Terminal(g.State) {
			continue
		}
		last := g.History[len(g.History)-1]
		text := fmt.Sprintf("Continue task %s. Gate %s (%s) ended %s at %s by %s: %s\n\nThe original task:\n%s",
			t.ID, g.ID, g.Intent, g.State, last.At.Format(time.RFC3339), last.By, last.Why, t.Text)
		_, existed, err := queue.Add(s.Yard, queue.AddOptions{Imp: t.Imp, Text: text, Kind: t.Kind, Proactive: t.Proactive,
			Labels: []string{"continuation"}, Repo: t.Repo, Base: t.Base, Continues: t.ID, Continue: t.Continue,
			Once: "continue:" + g.ID, By: Actor, Actor: Actor})
		if err != nil {
			s.logf("gate %s: continuation: %v", g.ID, err)
		} else if !existed {
			s.logf("gate %s ended %s: continuation of task %s filed", g.ID, g.State, t.ID)
		}
	}
}

// cancellations stops the boxes of tasks cancelled while they ran.
func (s *Supervisor) cancellations(ctx context.Context) {
	s.mu.Lock()
	var live []*liveRun
	for _, l := range s.live {
		live = append(live, l)
	}
	s.mu.Unlock()
	for _, l := range live {
		if t, err := queue.Get(s.Yard, l.task); err == nil && t.State == state.Cancelled {
			s.logf("task %s cancelled: stopping box %s", l.task, l.runID)
			if err := l.box.Kill(ctx); err != nil {
				s.logf("run %s: %v", l.runID, err)
			}
		}
	}
}
