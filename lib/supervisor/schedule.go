package supervisor

import (
	"errors"

	"github.com/robfig/cron/v3"

	"github.com/impyard/impyard/lib/config"
	"github.com/impyard/impyard/lib/queue"
)

// ParseSchedule reads an imp.toml schedule: five cron fields or a
// descriptor such as @hourly.
func ParseSchedule(spec string) (cron.Schedule, error) {
	return cron.ParseStandard(spec)
}

// schedules files a task for every [[schedule]] entry of every imp that
// came due since it last fired; a paused imp's are skipped (see fire). An entry never stacks a task on one of its
// own still waiting or running, and after downtime it fires once, not
// once per missed time. When each entry last fired is kept in its marker
// in queue/<imp>/ (see scheduleMarkOf); a marker that cannot be read is
// logged and replaced (see recoverMark), never left to keep the entry
// from firing again. An imp.toml that does not load is logged once,
// naming the file, line and entry, and fires nothing until it is fixed;
// an entry that cannot fire (a bad cron, an unknown key) is logged the
// same way and skipped, and the imp's other entries fire.
func (s *Supervisor) schedules() {
	ps := s.paused()
	names, err := config.ImpNames(s.Yard)
	if err != nil {
		return
	}
	for _, name := range names {
		cfg, err := s.loadImp(name)
		if errors.Is(err, config.ErrNoImpConfig) {
			continue
		}
		if err != nil {
			s.logOnce(config.ImpPath(s.Yard, name), "imp %s: no schedule fires: %v", name, err)
			continue
		}
		if bad := cfg.Schedule.Bad; len(bad) > 0 {
			s.logOnce(config.ImpPath(s.Yard, name), "imp %s: skipping what cannot fire, the rest fires: %v", name, errors.Join(bad...))
		}
		for _, e := range cfg.Schedule.List {
			s.fire(cfg, e, ps.Why(name))
		}
	}
}

// scheduleMarkOf is the marker of an entry: .schedule for the old single
// schedule key (so a yard keeps its time across the change), else
// .schedule-<key>.
func scheduleMarkOf(e config.Schedule) string {
	if e.Key == "" {
		return scheduleMark
	}
	return scheduleMark + "-" + e.Key
}

// fire files e's task if it came due, unless the imp is paused (paused
// says why): then the times it came due are recorded as skipped and its
// marker moves on, so they are not made up after resume.
func (s *Supervisor) fire(cfg *config.Imp, e config.Schedule, paused string) {
	sched, err := ParseSchedule(e.Cron)
	if err != nil {
		s.logf("imp %s: %s %q: %v", cfg.Name, e.Label(), e.Cron, err)
		return
	}
	now := s.now()
	mk := scheduleMarkOf(e)
	last, ok, err := s.readMark(cfg.Name, mk)
	if err != nil {
		if last, ok = s.recoverMark(cfg.Name, mk, err, now); !ok {
			return
		}
	} else if !ok {
		// First sight of this entry: start counting from now.
		if err := s.writeMark(cfg.Name, mk, now); err != nil {
			s.logOnce(queue.MarkPath(s.Yard, cfg.Name, mk), "imp %s: %s: %v", cfg.Name, e.Label(), err)
		}
		return
	}
	if sched.Next(last).After(now) {
		return
	}
	if paused != "" {
		if err := s.skip(cfg, e, sched, last, now, paused); err != nil {
			// Unrecorded, the times are not skipped: the next pass tries
			// again rather than lose them silently.
			s.logf("imp %s: %s: %v", cfg.Name, e.Label(), err)
			return
		}
		if err := s.writeMark(cfg.Name, mk, now); err != nil {
			s.logf("imp %s: %s: %v", cfg.Name, e.Label(), err)
		}
		return
	}
	text := e.Task
	if text == "" {
		text = "scheduled run (" + e.Cron + ")"
	}
	unique := "schedule:" + cfg.Name
	if e.Key != "" {
		unique += ":" + e.Key
	}
	taskID, existed, err := queue.Add(s.Yard, queue.AddOptions{Imp: cfg.Name, Text: text, Kind: e.Kind, Proactive: e.Proactive,
		Continue: e.Continue, Labels: []string{"schedule"}, Unique: unique, Repo: cfg.Repo, By: "schedule", Actor: Actor})
	switch {
	case errors.Is(err, queue.ErrUnrecorded):
		s.logf("imp %s: %s fired task %s; warning: %v", cfg.Name, e.Label(), taskID, err)
	case err != nil:
		s.logf("imp %s: %s: %v", cfg.Name, e.Label(), err)
		return
	case existed:
		s.logf("imp %s: %s due but task %s is still waiting or running; not stacking another", cfg.Name, e.Label(), taskID)
	default:
		s.logf("imp %s: %s fired task %s", cfg.Name, e.Label(), taskID)
	}
	if err := s.writeMark(cfg.Name, mk, now); err != nil {
		s.logf("imp %s: %s: %v", cfg.Name, e.Label(), err)
	}
}
