package supervisor

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/robfig/cron/v3"

	"github.com/impyard/impyard/lib/config"
	"github.com/impyard/impyard/lib/event"
	"github.com/impyard/impyard/lib/pause"
)

// EventScheduleSkipped is the journal event of a schedule's times that
// came due while its imp was paused: recorded, never made up later.
const EventScheduleSkipped = "schedule-skipped"

// LabelStopped marks a task whose box a pause with --stop stopped: it
// waits in review while the pause holds (see settle).
const LabelStopped = "stopped"

// maxSkipped bounds the times one skipped event lists; the rest are
// counted.
const maxSkipped = 20

// paused reads the pause file for a pass. A file that does not read
// pauses the whole yard (see pause.Load), and is logged.
func (s *Supervisor) paused() *pause.State {
	ps, err := pause.Load(s.Yard)
	if err != nil {
		s.logOnce(pause.Path(s.Yard), "%v; nothing is dispatched until it is fixed or 'impsup resume' rewrites it", err)
	}
	return ps
}

// acknowledge tells impsup pause that this supervisor has applied ps:
// its pass dispatched nothing paused and sent every stop it asked for.
func (s *Supervisor) acknowledge(ps *pause.State) {
	s.mu.Lock()
	// Seq 0 is a yard never paused: nothing to acknowledge.
	done := ps.Seq == 0 || s.acked == ps.Seq && s.ackedOnce
	s.mu.Unlock()
	if done {
		return
	}
	if err := pause.Acknowledge(s.Yard, Actor, ps.Seq, s.now()); err != nil {
		s.logf("pause %d: acknowledging: %v", ps.Seq, err)
		return
	}
	s.mu.Lock()
	s.acked, s.ackedOnce = ps.Seq, true
	s.mu.Unlock()
}

// stops stops, as the ceiling would, the running boxes of imps paused
// with --stop; finish sends their tasks to review with the pause's
// reason.
func (s *Supervisor) stops(ps *pause.State) {
	s.mu.Lock()
	var stop []*liveRun
	for _, l := range s.live {
		if e := ps.Of(l.imp); e != nil && e.Stop && l.stopped == "" {
			l.stopped = fmt.Sprintf("stopped by pause %d (%s): %s", e.Seq, e.By, e.Reason)
			stop = append(stop, l)
		}
	}
	s.mu.Unlock()
	for _, l := range stop {
		s.logf("task %s: %s; stopping box %s", l.task, l.stopped, l.runID)
		go func() {
			if err := l.box.Kill(context.Background()); err != nil {
				s.logf("run %s: %v", l.runID, err)
			}
		}()
	}
}

// skip records the times sched came due between last and now while cfg's
// imp was paused, in its journal, so they are not made up after resume.
func (s *Supervisor) skip(cfg *config.Imp, e config.Schedule, sched cron.Schedule, last, now time.Time, why string) error {
	var times []string
	n := 0
	for t := sched.Next(last); !t.After(now); t = sched.Next(t) {
		if n < maxSkipped {
			times = append(times, t.UTC().Format(time.RFC3339))
		}
		n++
	}
	text := fmt.Sprintf("%s skipped %s: %s", e.Label(), strings.Join(times, ", "), why)
	if n > maxSkipped {
		text = fmt.Sprintf("%s skipped %d times (the first %s): %s", e.Label(), n, strings.Join(times, ", "), why)
	}
	s.logf("imp %s: %s", cfg.Name, text)
	return event.Record(s.Yard, event.Event{Event: EventScheduleSkipped, Imp: cfg.Name, Actor: Actor, By: "schedule", Why: text, TS: now})
}
