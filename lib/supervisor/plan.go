package supervisor

import (
	"sort"
	"strings"
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
	// OverBudget names the imps whose proactive work is over a budget
	// today, with the reason: their proactive tasks stay waiting, each
	// held once with that reason, without taking a slot; owner tasks run.
	OverBudget map[string]string
}

// Step is one thing the dispatcher does with a waiting task: start it in
// a box, or, when Fail is set, fail it with that reason, or, when Hold is
// set, leave it waiting with that reason.
type Step struct {
	Task *queue.Task
	Fail string
	Hold string
}

// heldPrefix starts the reason of a task held for its budget: a task
// whose reason says so already is not held again.
const heldPrefix = "held: "

// Plan decides which waiting tasks start now, in order: tasks whose
// not-before time is later than now wait; within an imp the oldest goes
// first; imps take turns: the next slot goes to the imp with the fewest
// boxes running (counting those the plan starts), in name order among
// equals, so an imp that frees a slot does not take it back from one
// that waits; a task starts only while the running tasks leave room under
// the global limit and under its imp's; a proactive task of an imp over
// budget is held, once. It reads nothing and changes nothing: the
// dispatcher starts what it returns.
func Plan(waiting, running []*queue.Task, lim Limits, now time.Time) []Step {
	perImp := map[string]int{}
	for _, t := range running {
		perImp[t.Imp]++
	}
	total := len(running)
	byImp := map[string][]*queue.Task{}
	var imps []string
	var steps []Step
	for _, t := range oldestFirst(waiting) {
		if t.NotBefore != nil && t.NotBefore.After(now) {
			continue
		}
		if why, over := lim.OverBudget[t.Imp]; over && t.Proactive {
			if !strings.HasPrefix(t.Reason, heldPrefix) {
				steps = append(steps, Step{Task: t, Hold: heldPrefix + why})
			}
			continue
		}
		if byImp[t.Imp] == nil {
			imps = append(imps, t.Imp)
		}
		byImp[t.Imp] = append(byImp[t.Imp], t)
	}
	sort.Strings(imps)
	for total < lim.Global {
		imp := next(imps, byImp, perImp, lim)
		if imp == "" {
			break
		}
		t := byImp[imp][0]
		byImp[imp] = byImp[imp][1:]
		if why, broken := lim.Broken[imp]; broken {
			steps = append(steps, Step{Task: t, Fail: why})
			continue
		}
		steps = append(steps, Step{Task: t})
		total++
		perImp[imp]++
	}
	return steps
}

// next is the imp whose turn it is: of those with a task due and room
// under their own limit, the one with the fewest boxes running, the first
// in name order among equals; "" when none may start one.
func next(imps []string, byImp map[string][]*queue.Task, perImp map[string]int, lim Limits) string {
	best := ""
	for _, imp := range imps {
		if len(byImp[imp]) == 0 {
			continue
		}
		if _, broken := lim.Broken[imp]; !broken && perImp[imp] >= max(lim.PerImp[imp], 1) {
			continue
		}
		if best == "" || perImp[imp] < perImp[best] {
			best = imp
		}
	}
	return best
}

// oldestFirst sorts a copy of tasks by id, which is creation order.
func oldestFirst(tasks []*queue.Task) []*queue.Task {
	out := append([]*queue.Task(nil), tasks...)
	sort.SliceStable(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out
}
