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

// schedules files a proactive task for every imp whose schedule came due
// since it last fired. It never stacks one on a task still waiting or
// running, and after downtime it fires once, not once per missed time.
// When it last fired is kept in queue/<imp>/.schedule; a marker that
// cannot be read is logged and replaced (see recoverMark), never left to
// keep the schedule from firing again.
func (s *Supervisor) schedules() {
	names, err := config.ImpNames(s.Yard)
	if err != nil {
		return
	}
	now := s.now()
	for _, name := range names {
		cfg, err := config.LoadImp(s.Yard, name)
		if err != nil || cfg.Schedule == "" {
			continue
		}
		sched, err := ParseSchedule(cfg.Schedule)
		if err != nil {
			s.logf("imp %s: schedule %q: %v", cfg.Name, cfg.Schedule, err)
			continue
		}
		last, ok, err := s.readMark(cfg.Name, scheduleMark)
		if err != nil {
			if last, ok = s.recoverMark(cfg.Name, scheduleMark, err, now); !ok {
				continue
			}
		} else if !ok {
			// First sight of this schedule: start counting from now.
			if err := s.writeMark(cfg.Name, scheduleMark, now); err != nil {
				s.logOnce(queue.MarkPath(s.Yard, cfg.Name, scheduleMark), "imp %s: schedule: %v", cfg.Name, err)
			}
			continue
		}
		if sched.Next(last).After(now) {
			continue
		}
		text := cfg.ScheduleTask
		if text == "" {
			text = "scheduled run (" + cfg.Schedule + ")"
		}
		taskID, existed, err := queue.Add(s.Yard, queue.AddOptions{Imp: cfg.Name, Text: text, Proactive: true,
			Labels: []string{"schedule"}, Unique: "schedule:" + cfg.Name, Repo: cfg.Repo, By: "schedule", Actor: Actor})
		switch {
		case errors.Is(err, queue.ErrUnrecorded):
			s.logf("imp %s: schedule fired task %s; warning: %v", cfg.Name, taskID, err)
		case err != nil:
			s.logf("imp %s: schedule: %v", cfg.Name, err)
			continue
		case existed:
			s.logf("imp %s: schedule due but task %s is still waiting or running; not stacking another", cfg.Name, taskID)
		default:
			s.logf("imp %s: schedule fired task %s", cfg.Name, taskID)
		}
		if err := s.writeMark(cfg.Name, scheduleMark, now); err != nil {
			s.logf("imp %s: schedule: %v", cfg.Name, err)
		}
	}
}
