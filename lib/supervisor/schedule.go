package supervisor

import (
	"os"
	"time"

	"github.com/robfig/cron/v3"

	"github.com/impyard/impyard/lib/config"
	"github.com/impyard/impyard/lib/queue"
	"github.com/impyard/impyard/lib/store"
)

// ParseSchedule reads an imp.toml schedule: five cron fields or a
// descriptor such as @hourly.
func ParseSchedule(spec string) (cron.Schedule, error) {
	return cron.ParseStandard(spec)
}

// schedules files a proactive task for every imp whose schedule came due
// since it last fired. It never stacks one on a task still waiting or
// running, and after downtime it fires once, not once per missed time.
func (s *Supervisor) schedules() {
	entries, err := os.ReadDir(s.Yard.Path("imps"))
	if err != nil {
		return
	}
	now := s.now()
	for _, e := range entries {
		if !e.IsDir() {
			continue
		}
		cfg, err := config.LoadImp(s.Yard, e.Name())
		if err != nil || cfg.Schedule == "" {
			continue
		}
		sched, err := ParseSchedule(cfg.Schedule)
		if err != nil {
			s.logf("imp %s: schedule %q: %v", cfg.Name, cfg.Schedule, err)
			continue
		}
		d, err := s.Yard.QueueDir(cfg.Name)
		if err != nil {
			continue
		}
		mark := d.Path() + "/.schedule"
		last := now
		if b, err := store.ReadFile(mark); err == nil {
			if t, err := time.Parse(time.RFC3339Nano, string(b)); err == nil {
				last = t
			}
		} else {
			// First sight of this schedule: start counting from now.
			os.WriteFile(mark, []byte(now.UTC().Format(time.RFC3339Nano)), 0o640)
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
		if err != nil {
			s.logf("imp %s: schedule: %v", cfg.Name, err)
			continue
		}
		if existed {
			s.logf("imp %s: schedule due but task %s is still waiting or running; not stacking another", cfg.Name, taskID)
		} else {
			s.logf("imp %s: schedule fired task %s", cfg.Name, taskID)
		}
		os.WriteFile(mark, []byte(now.UTC().Format(time.RFC3339Nano)), 0o640)
	}
}
