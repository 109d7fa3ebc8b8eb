package supervisor

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/impyard/impyard/lib/config"
	"github.com/impyard/impyard/lib/ledger"
	"github.com/impyard/impyard/lib/pause"
	"github.com/impyard/impyard/lib/queue"
	"github.com/impyard/impyard/lib/state"
)

// tk is a task of imp; ids sort by creation, so "t-01" is older than "t-02".
func tk(id, imp string) *queue.Task { return &queue.Task{ID: id, Imp: imp} }

func later(t *queue.Task, at time.Time) *queue.Task { t.NotBefore = &at; return t }

func proactive(t *queue.Task) *queue.Task { t.Proactive = true; return t }

func held(t *queue.Task) *queue.Task { t.Reason = heldPrefix + "over"; return t }

// steps writes a plan as "t-01 t-02 !t-03 ~t-04" (! for a task failed,
// ~ for one held).
func steps(plan []Step) string {
	var out []string
	for _, st := range plan {
		switch {
		case st.Fail != "":
			out = append(out, "!"+st.Task.ID)
		case st.Hold != "":
			out = append(out, "~"+st.Task.ID)
		default:
			out = append(out, st.Task.ID)
		}
	}
	return strings.Join(out, " ")
}

func TestPlan(t *testing.T) {
	now := time.Date(2026, 11, 30, 8, 0, 0, 0, time.UTC)
	both := map[string]int{"a": 2, "b": 2, "c": 2}
	for _, c := range []struct {
		name             string
		waiting, running []*queue.Task
		lim              Limits
		want             string
	}{
		{name: "nothing waiting", lim: Limits{Global: 4}, want: ""},
		{name: "nothing waiting, boxes running", running: []*queue.Task{tk("t-00", "a")}, lim: Limits{Global: 4}, want: ""},
		{
			name:    "imps take turns",
			waiting: []*queue.Task{tk("t-01", "a"), tk("t-02", "a"), tk("t-03", "a"), tk("t-04", "b"), tk("t-05", "b"), tk("t-06", "c")},
			lim:     Limits{Global: 5, PerImp: both},
			want:    "t-01 t-04 t-06 t-02 t-05",
		},
		{
			name:    "turns in name order, not age",
			waiting: []*queue.Task{tk("t-01", "c"), tk("t-02", "b"), tk("t-03", "a")},
			lim:     Limits{Global: 3},
			want:    "t-03 t-02 t-01",
		},
		{
			// An imp under its own limit used to take back every slot it
			// freed, and the imp after it in name order never ran.
			name:    "a freed slot goes to the imp with fewer boxes",
			waiting: []*queue.Task{tk("t-01", "a"), tk("t-02", "a"), tk("t-03", "b")},
			running: []*queue.Task{tk("t-00", "a")},
			lim:     Limits{Global: 2, PerImp: map[string]int{"a": 2, "b": 1}},
			want:    "t-03",
		},
		{
			name:    "turns by boxes running, then name",
			waiting: []*queue.Task{tk("t-01", "a"), tk("t-02", "a"), tk("t-03", "b"), tk("t-04", "b"), tk("t-05", "c")},
			running: []*queue.Task{tk("t-00", "a"), tk("t-09", "c")},
			lim:     Limits{Global: 6, PerImp: both},
			want:    "t-03 t-01 t-04 t-05",
		},
		{
			name:    "per-imp limit",
			waiting: []*queue.Task{tk("t-01", "a"), tk("t-02", "a"), tk("t-03", "a")},
			lim:     Limits{Global: 10, PerImp: map[string]int{"a": 2}},
			want:    "t-01 t-02",
		},
		{
			name:    "per-imp limit counts running boxes",
			waiting: []*queue.Task{tk("t-01", "a"), tk("t-02", "a"), tk("t-03", "b")},
			running: []*queue.Task{tk("t-00", "a")},
			lim:     Limits{Global: 10, PerImp: map[string]int{"a": 2}},
			want:    "t-03 t-01",
		},
		{
			name:    "an imp without a limit runs one box",
			waiting: []*queue.Task{tk("t-01", "a"), tk("t-02", "a"), tk("t-03", "b"), tk("t-04", "b")},
			lim:     Limits{Global: 10, PerImp: map[string]int{"b": 0}},
			want:    "t-01 t-03",
		},
		{
			name:    "global limit counts running boxes",
			waiting: []*queue.Task{tk("t-01", "a"), tk("t-02", "b")},
			running: []*queue.Task{tk("t-00", "c")},
			lim:     Limits{Global: 2, PerImp: both},
			want:    "t-01",
		},
		{
			name:    "global limit full",
			waiting: []*queue.Task{tk("t-01", "a")},
			running: []*queue.Task{tk("t-00", "b"), tk("t-09", "c")},
			lim:     Limits{Global: 2, PerImp: both},
			want:    "",
		},
		{
			name:    "more waiting than slots",
			waiting: []*queue.Task{tk("t-01", "a"), tk("t-02", "a"), tk("t-03", "a"), tk("t-04", "a"), tk("t-05", "a")},
			lim:     Limits{Global: 3, PerImp: map[string]int{"a": 5}},
			want:    "t-01 t-02 t-03",
		},
		{
			name:    "oldest first within an imp",
			waiting: []*queue.Task{tk("t-03", "a"), tk("t-01", "a"), tk("t-02", "a")},
			lim:     Limits{Global: 3, PerImp: map[string]int{"a": 3}},
			want:    "t-01 t-02 t-03",
		},
		{
			name:    "not before a later time",
			waiting: []*queue.Task{later(tk("t-01", "a"), now.Add(time.Minute)), later(tk("t-02", "a"), now), tk("t-03", "b")},
			lim:     Limits{Global: 4, PerImp: both},
			want:    "t-02 t-03",
		},
		{
			name:    "nothing due",
			waiting: []*queue.Task{later(tk("t-01", "a"), now.Add(time.Second))},
			lim:     Limits{Global: 4},
			want:    "",
		},
		{
			name:    "an imp with no configuration has its tasks failed without a slot",
			waiting: []*queue.Task{tk("t-01", "a"), tk("t-02", "b"), tk("t-03", "b"), tk("t-04", "a")},
			lim:     Limits{Global: 2, PerImp: both, Broken: map[string]string{"b": "no imps/b/imp.toml"}},
			want:    "t-01 !t-02 !t-03 t-04",
		},
		{
			name:    "an imp whose configuration broke while its box runs",
			waiting: []*queue.Task{tk("t-01", "b"), tk("t-02", "b")},
			running: []*queue.Task{tk("t-00", "b")},
			lim:     Limits{Global: 2, Broken: map[string]string{"b": "imps/b/imp.toml: bad"}},
			want:    "!t-01 !t-02",
		},
		{
			name:    "proactive tasks of an imp over budget are held without a slot; owner tasks run",
			waiting: []*queue.Task{proactive(tk("t-01", "a")), tk("t-02", "a"), proactive(tk("t-03", "b")), proactive(tk("t-04", "a"))},
			lim:     Limits{Global: 2, PerImp: both, OverBudget: map[string]string{"a": "over"}},
			want:    "~t-01 ~t-04 t-02 t-03",
		},
		{
			name:    "a task held already is not held again",
			waiting: []*queue.Task{held(proactive(tk("t-01", "a"))), proactive(tk("t-02", "a"))},
			lim:     Limits{Global: 2, OverBudget: map[string]string{"a": "over"}},
			want:    "~t-02",
		},
		{
			name:    "a task held yesterday starts once the imp is under budget",
			waiting: []*queue.Task{held(proactive(tk("t-01", "a")))},
			lim:     Limits{Global: 2},
			want:    "t-01",
		},
		{
			name:    "a full yard fails nothing",
			waiting: []*queue.Task{tk("t-02", "b")},
			running: []*queue.Task{tk("t-00", "a")},
			lim:     Limits{Global: 1, Broken: map[string]string{"b": "no imps/b/imp.toml"}},
			want:    "",
		},
	} {
		t.Run(c.name, func(t *testing.T) {
			plan := Plan(c.waiting, c.running, c.lim, now)
			if got := steps(plan); got != c.want {
				t.Errorf("got %q, want %q", got, c.want)
			}
			for _, st := range plan {
				if st.Fail != "" && st.Fail != c.lim.Broken[st.Task.Imp] {
					t.Errorf("%s failed with %q", st.Task.ID, st.Fail)
				}
				if st.Hold != "" && st.Hold != heldPrefix+c.lim.OverBudget[st.Task.Imp] {
					t.Errorf("%s held with %q", st.Task.ID, st.Hold)
				}
			}
		})
	}
}

// TestPlanLeavesItsInputs: the dispatcher's lists are its own.
func TestPlanLeavesItsInputs(t *testing.T) {
	waiting := []*queue.Task{tk("t-02", "a"), tk("t-01", "a")}
	Plan(waiting, nil, Limits{Global: 2, PerImp: map[string]int{"a": 2}}, time.Now())
	if waiting[0].ID != "t-02" || waiting[1].ID != "t-01" {
		t.Errorf("waiting reordered: %s %s", waiting[0].ID, waiting[1].ID)
	}
}

// TestDispatchStartsWhatThePlanSays: dispatch fails the tasks of an imp
// with no configuration without a slot, and a task that fails for a reason
// of its own frees its slot for the next in turn, whose start then meets
// the infrastructure (no gateway CA here), which ends the pass and leaves
// it waiting.
func TestDispatchStartsWhatThePlanSays(t *testing.T) {
	s, _ := newSup(t)
	gw := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	defer gw.Close()
	writeImp(t, s.Yard, "yuko", fmt.Sprintf("rootfs = %q\ncommand = [\"x\"]\n", t.TempDir()))
	ghost1, _, _ := queue.Add(s.Yard, queue.AddOptions{Imp: "ghost", Text: "one", By: "alice", Actor: "test"})
	ghost2, _, _ := queue.Add(s.Yard, queue.AddOptions{Imp: "ghost", Text: "two", By: "alice", Actor: "test"})
	norepo, _, _ := queue.Add(s.Yard, queue.AddOptions{Imp: "yuko", Kind: queue.Code, Text: "code without a repository", By: "alice", Actor: "test"})
	next, _, _ := queue.Add(s.Yard, queue.AddOptions{Imp: "yuko", Text: "digest", By: "alice", Actor: "test"})
	org := &config.Org{}
	org.Supervisor.Concurrency = 1
	org.Gateway.Listen = strings.TrimPrefix(gw.URL, "http://")
	n, err := s.dispatch(context.Background(), org, &pause.State{})
	if n != 0 || err == nil || !strings.Contains(err.Error(), filepath.Join(s.Home, "ca", "ca.crt")) {
		t.Fatalf("dispatch: %d started, %v; want the missing CA", n, err)
	}
	for id, want := range map[string]string{ghost1: state.Failed, ghost2: state.Failed, norepo: state.Failed, next: state.Waiting} {
		if task, _ := queue.Get(s.Yard, id); task.State != want {
			t.Errorf("task %s (%s) is %s (%s), want %s", id, task.Text, task.State, task.Reason, want)
		}
	}
	if task, _ := queue.Get(s.Yard, ghost1); !strings.Contains(task.Reason, "ghost") {
		t.Errorf("an imp with no configuration: %q", task.Reason)
	}
}

// TestDispatchHoldsProactiveWorkOverBudget: a proactive task of an imp
// over its tokens_daily stays waiting with the reason, recorded once,
// while an owner task of the same imp goes on to start.
func TestDispatchHoldsProactiveWorkOverBudget(t *testing.T) {
	s, now := newSup(t)
	writeImp(t, s.Yard, "yuko", fmt.Sprintf("rootfs = %q\ncommand = [\"x\"]\n", t.TempDir()))
	pro, _, _ := queue.Add(s.Yard, queue.AddOptions{Imp: "yuko", Text: "digest", Proactive: true, By: "impsup", Actor: "test"})
	if err := ledger.Debit(s.Yard, ledger.Entry{Imp: "yuko", Kind: ledger.Tokens, Task: pro, Model: "gpt-5", InputTokens: 600, OutputTokens: 400, TS: *now}); err != nil {
		t.Fatal(err)
	}
	gw := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	defer gw.Close()
	org := &config.Org{Budget: map[string]config.Budget{"yuko": {TokensDaily: 1000}}}
	org.Supervisor.Concurrency = 2
	org.Gateway.Listen = strings.TrimPrefix(gw.URL, "http://")
	for range 2 {
		if _, err := s.dispatch(context.Background(), org, &pause.State{}); err != nil {
			t.Fatal(err)
		}
	}
	task, _ := queue.Get(s.Yard, pro)
	if task.State != state.Waiting || !strings.Contains(task.Reason, "used 1000 of its daily 1000 model tokens on proactive work") || !strings.Contains(task.Reason, "next UTC day") {
		t.Fatalf("over budget: %s %q", task.State, task.Reason)
	}
	holds := 0
	for _, h := range task.History {
		if strings.HasPrefix(h.Why, heldPrefix) {
			holds++
		}
	}
	if holds != 1 {
		t.Errorf("held %d times, want once: %+v", holds, task.History)
	}
	// Owner work of the same imp is not held: it goes on to start, and
	// meets the missing gateway CA.
	owner, _, _ := queue.Add(s.Yard, queue.AddOptions{Imp: "yuko", Text: "asked", By: "alice", Actor: "test"})
	if _, err := s.dispatch(context.Background(), org, &pause.State{}); err == nil || !strings.Contains(err.Error(), "ca.crt") {
		t.Fatalf("owner task: %v, want the missing CA", err)
	}
	if task, _ := queue.Get(s.Yard, owner); strings.HasPrefix(task.Reason, heldPrefix) {
		t.Errorf("owner task held: %q", task.Reason)
	}
	// The next UTC day the proactive task goes on to start too.
	*now = now.Add(24 * time.Hour)
	queue.Move(s.Yard, owner, queue.Change{To: state.Cancelled, By: "alice", Actor: "test"})
	if _, err := s.dispatch(context.Background(), org, &pause.State{}); err == nil || !strings.Contains(err.Error(), "ca.crt") {
		t.Fatalf("the next day: %v, want the start to meet the missing CA", err)
	}
}
