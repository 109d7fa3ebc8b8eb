// Package supervisor is impsup's loop: it fires schedules, dispatches
// waiting tasks into boxes with bounded concurrency (global, and per imp,
// fair across imps), briefs each box, turns each box's exit into the
// task's outcome, settles tasks waiting on their gates, and files
// continuation tasks when gates resolve.
//
// Guarantees:
//   - A task runs at most once at a time: it moves waiting -> running
//     under its queue's lock before its box starts, and only one
//     supervisor works on a yard (runs/.impsup.lock).
//   - No task is lost to a supervisor crash: a restart adopts every box
//     that still runs, takes the exit of every box that ended meanwhile,
//     fails (with the reason) a running task whose box is gone, and
//     removes containers no task owns.
//   - Every decided gate and every mailbox message reaches exactly one
//     box's brief: a brief is recorded as told only once its box started
//     (see Brief).
//   - Infrastructure trouble (containerd or the gateway down) leaves
//     tasks waiting; only a task's own trouble (its imp's configuration)
//     fails it.
package supervisor

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/impyard/impyard/lib/box"
	"github.com/impyard/impyard/lib/config"
	"github.com/impyard/impyard/lib/ledger"
	"github.com/impyard/impyard/lib/pause"
	"github.com/impyard/impyard/lib/queue"
	"github.com/impyard/impyard/lib/run"
	"github.com/impyard/impyard/lib/state"
	"github.com/impyard/impyard/lib/store"
	"github.com/impyard/impyard/lib/transition"
	"github.com/impyard/impyard/lib/yard"
)

// Actor signs the supervisor's transitions.
const Actor = "impsup"

// Supervisor runs one yard's tasks.
type Supervisor struct {
	Yard   *yard.Yard
	Home   string
	Runner *box.Runner
	// ReadyTimeout bounds the wait for the gateway to serve a new box.
	ReadyTimeout time.Duration
	// Now is replaceable for schedule tests.
	Now  func() time.Time
	Logf func(format string, a ...any)
	// Ready, if set, is called once by Run after it recovered and made
	// its first pass: the yard is supervised from then on.
	Ready func()

	mu   sync.Mutex
	live map[string]*liveRun // run id -> box
	wg   sync.WaitGroup
	// wake asks the loop for another pass, e.g. when a box ends.
	wake chan struct{}
	// logged is the last problem logged per file (see logOnce).
	logged map[string]string
	// configs is org.toml and each imp.toml as the supervisor acts on
	// them: one refused as unsafe leaves the last good one in force.
	configs config.Keeper

	// What passes, one at a time, are done with, so the next pass stats
	// those files instead of reading them (see transition.Known): the
	// tasks dispatch never starts (neither waiting nor running), the
	// tasks reviews never settle nor continue (finished, failed or
	// cancelled, no continuation asked for), and the finished gates of
	// tasks that can never need them again (final).
	dispatched, reviewed, gatesSeen *transition.Known
	// final holds the tasks done or cancelled that asked for no
	// continuation: nothing ever moves them again.
	final map[string]bool
	// acked is the pause Seq last acknowledged, once ackedOnce.
	acked     int
	ackedOnce bool
}

type liveRun struct {
	runID string
	task  string
	imp   string
	box   *box.Box
	// stopped is the pause that stopped the box, "" while none did.
	stopped string
}

func (s *Supervisor) logf(format string, a ...any) {
	if s.Logf != nil {
		s.Logf(format, a...)
	}
}

// loadImp reads an imp's imp.toml, keeping the last good one when a
// writer of the yard's edit is refused (config.Keeper).
func (s *Supervisor) loadImp(name string) (*config.Imp, error) {
	return s.configs.LoadImp(s.Yard, name, s.logf)
}

func (s *Supervisor) now() time.Time {
	if s.Now != nil {
		return s.Now()
	}
	return time.Now()
}

// Lock makes this the yard's only supervisor until unlock.
func Lock(y *yard.Yard) (unlock func(), err error) {
	if _, err := run.MkRoot(y); err != nil {
		return nil, err
	}
	unlock, ok, err := store.TryLock(run.DaemonLock(y, Actor))
	if err != nil {
		return nil, err
	}
	if !ok {
		return nil, fmt.Errorf("%w on %s", ErrRunning, y.Root)
	}
	return unlock, nil
}

func (s *Supervisor) init() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.live == nil {
		s.live = map[string]*liveRun{}
		s.wake = make(chan struct{}, 1)
		s.dispatched, s.reviewed, s.gatesSeen = transition.NewKnown(), transition.NewKnown(), transition.NewKnown()
		s.final = map[string]bool{}
	}
}

func (s *Supervisor) poke() {
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

// Pass does one round: schedules, settled reviews, continuations,
// cancellations, stops asked by a pause, and dispatch of what may start
// now, nothing of a paused imp; then it acknowledges the pause it
// applied. It returns how many boxes it started.
func (s *Supervisor) Pass(ctx context.Context) (int, error) {
	s.init()
	// Stops first: they need no configuration, and a pass that
	// dispatches nothing has applied a pause all the same.
	ps := s.paused()
	s.stops(ps)
	org, err := s.configs.Load(s.Yard, s.logf)
	if err != nil {
		s.acknowledge(ps)
		return 0, fmt.Errorf("nothing dispatched: %w", err)
	}
	s.schedules()
	s.reviews()
	s.cancellations(ctx)
	n, err := s.dispatch(ctx, org, ps)
	s.acknowledge(ps)
	return n, err
}

// Wait blocks until every box this supervisor watches has ended and been
// accounted for.
func (s *Supervisor) Wait() { s.wg.Wait() }

// Running is the number of boxes being watched.
func (s *Supervisor) Running() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.live)
}

// startable reads the waiting and running tasks: one read of the queue
// serves both states, passing over the files of tasks in neither state
// that an earlier pass read, while each stays the same file.
func (s *Supervisor) startable() (waiting, running []*queue.Task) {
	f := queue.Filter{Known: s.dispatched, Settled: func(t *queue.Task) bool {
		return t.State != state.Waiting && t.State != state.Running
	}}
	bad, _ := queue.Each(s.Yard, f, func(t *queue.Task) error {
		switch t.State {
		case state.Waiting:
			waiting = append(waiting, t)
		case state.Running:
			running = append(running, t)
		}
		return nil
	})
	for _, err := range bad {
		s.logf("%v", err)
	}
	return waiting, running
}

// dispatch starts what Plan says may start now. A task that does not
// start for a reason of its own frees its slot, so the plan is made again
// over what is left until it has nothing more to start.
func (s *Supervisor) dispatch(ctx context.Context, org *config.Org, ps *pause.State) (int, error) {
	all, running := s.startable()
	// A paused imp's tasks stay waiting, untouched, until it resumes.
	var waiting []*queue.Task
	for _, t := range all {
		if ps.Of(t.Imp) == nil {
			waiting = append(waiting, t)
		}
	}
	// Each imp's configuration is read once a pass.
	cfgs := map[string]*config.Imp{}
	lim := Limits{Global: org.Supervisor.Concurrency, PerImp: map[string]int{}, Broken: map[string]string{}, OverBudget: map[string]string{}}
	checked := map[string]bool{}
	for _, t := range waiting {
		if !t.Proactive || checked[t.Imp] {
			continue
		}
		checked[t.Imp] = true
		err := ledger.Check(s.Yard, org, t.Imp, true, s.now())
		switch {
		case errors.Is(err, ledger.ErrOverBudget):
			lim.OverBudget[t.Imp] = err.Error() + "; it starts on the next UTC day or when the owner raises the cap"
		case err != nil:
			s.logf("budget of %s: %v", t.Imp, err)
		}
	}
	for _, t := range waiting {
		if _, seen := cfgs[t.Imp]; seen {
			continue
		}
		cfg, err := s.loadImp(t.Imp)
		cfgs[t.Imp] = cfg
		if err != nil {
			lim.Broken[t.Imp] = err.Error()
			continue
		}
		lim.PerImp[t.Imp] = cfg.Concurrency
	}
	started := 0
	for {
		steps := Plan(waiting, running, lim, s.now())
		if len(steps) == 0 {
			return started, nil
		}
		done := map[string]bool{}
		for _, st := range steps {
			done[st.Task.ID] = true
			if st.Fail != "" {
				// The task cannot start: fail it, visibly, with the reason.
				s.failWaiting(st.Task, st.Fail)
				continue
			}
			if st.Hold != "" {
				s.hold(st.Task, st.Hold)
				continue
			}
			ok, err := s.start(ctx, org, cfgs[st.Task.Imp], st.Task)
			if err != nil {
				// Infrastructure: the task stays waiting and the pass ends.
				return started, err
			}
			if ok {
				started++
				running = append(running, st.Task)
			}
		}
		var left []*queue.Task
		for _, t := range waiting {
			if !done[t.ID] {
				left = append(left, t)
			}
		}
		waiting = left
	}
}

func (s *Supervisor) hold(t *queue.Task, why string) {
	if _, err := queue.Hold(s.Yard, t.ID, Actor, Actor, why); err != nil {
		s.logf("task %s: %v", t.ID, err)
		return
	}
	s.logf("task %s %s", t.ID, why)
}

func (s *Supervisor) failWaiting(t *queue.Task, why string) {
	if _, err := queue.Move(s.Yard, t.ID, queue.Change{To: state.Failed, By: Actor, Actor: Actor, Why: "cannot start: " + why}); err != nil {
		s.logf("task %s: %v", t.ID, err)
		return
	}
	s.logf("task %s failed before starting: %s", t.ID, why)
}
