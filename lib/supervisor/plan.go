package supervisor

import (
	"sort"
	"time"

	"github.com/impyard/impyard/lib/queue"
)

// Limits bound how many boxes run at once.
type Limits struct {
	// Global is the yard's limit ([supervisor] concurrency in org.toml).
	Global int
	// PerImp is each imp's limit (concurrency in its imp.toml); an imp
	// not named, or at 0, runs one box at a time.
	PerImp map[string]int
	// Broken names the imps whose configuration cannot be read, with the
	// reason: their tasks cannot start, so the plan fails them, one per
	// turn, without taking a slot.
	Broken map[string]string
}

// Step is one thing the dispatcher does with a waiting task: start it in
// a box, or, when Fail is set, fail it with that reason.
type Step struct {
	Task *queue.Task
	Fail string
}

// Plan decides which waiting tasks start now, in order: tasks whose
// not-before time is later than now wait; within an imp the oldest goes
// first; imps take turns, one task each per round, in name order; a task
// starts only while the running tasks leave room under the global limit
// and under its imp's. It reads nothing and changes nothing: the
// dispatcher starts what it returns.
func Plan(waiting, running []*queue.Task, lim Limits, now time.Time) []Step {
	perImp := map[string]int{}
	for _, t := range running {
		perImp[t.Imp]++
	}
	total := len(running)
	byImp := map[string][]*queue.Task{}
	var imps []string
	for _, t := range oldestFirst(waiting) {
		if t.NotBefore != nil && t.NotBefore.After(now) {
			continue
		}
		if byImp[t.Imp] == nil {
			imps = append(imps, t.Imp)
		}
		byImp[t.Imp] = append(byImp[t.Imp], t)
	}
	sort.Strings(imps)
	var steps []Step
	for progress := true; progress && total < lim.Global; {
		progress = false
		for _, imp := range imps {
			if total >= lim.Global || len(byImp[imp]) == 0 {
				continue
			}
			t := byImp[imp][0]
			if why, broken := lim.Broken[imp]; broken {
				byImp[imp] = byImp[imp][1:]
				steps = append(steps, Step{Task: t, Fail: why})
				progress = true
				continue
			}
			if perImp[imp] >= max(lim.PerImp[imp], 1) {
				continue
			}
			byImp[imp] = byImp[imp][1:]
			steps = append(steps, Step{Task: t})
			total++
			perImp[imp]++
			progress = true
		}
	}
	return steps
}

// oldestFirst sorts a copy of tasks by id, which is creation order.
func oldestFirst(tasks []*queue.Task) []*queue.Task {
	out := append([]*queue.Task(nil), tasks...)
	sort.SliceStable(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out
}
