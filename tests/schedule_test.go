package tests

import (
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/impyard/impyard/lib/gate"
	"github.com/impyard/impyard/lib/queue"
	"github.com/impyard/impyard/lib/state"
)

// TestSchedulesAndContinuation: two [[schedule]] entries of one imp.toml
// each fire their own task under impsup once; the one with continue =
// true proposes an email, and when its gate is denied the next pass files
// its continuation, naming the gate and the outcome.
func TestSchedulesAndContinuation(t *testing.T) {
	b := newBoxYard(t)
	b.imp(t, "digest", map[string]string{"concurrency": "2"})
	conf := b.y.Path("imps", "digest", "imp.toml")
	base, _ := os.ReadFile(conf)
	sched := string(base) + `
[[schedule]]
cron = "@every 1s"
task = "weekly digest for team@ourco.com"
continue = true

[[schedule]]
cron = "@every 1s"
task = "check the sports pages"
`
	if err := os.WriteFile(conf, []byte(sched), 0o640); err != nil {
		t.Fatal(err)
	}
	b.once(t) // first sight: each entry starts counting
	if ts, _ := queue.List(b.y, queue.Filter{Imp: "digest"}); len(ts) != 0 {
		t.Fatalf("fired on first sight: %d tasks", len(ts))
	}
	time.Sleep(2100 * time.Millisecond)
	out := b.once(t)
	// Fired once each; the schedules go so later passes add nothing.
	os.WriteFile(conf, base, 0o640)
	ts, _ := queue.List(b.y, queue.Filter{Imp: "digest"})
	byText := map[string]*queue.Task{}
	for _, task := range ts {
		byText[task.Text] = task
	}
	digest, sports := byText["weekly digest for team@ourco.com"], byText["check the sports pages"]
	if len(ts) != 2 || digest == nil || sports == nil {
		t.Fatalf("tasks after the schedules came due: %+v\n%s", ts, out)
	}
	for _, task := range ts {
		if !task.Proactive || !slices.Contains(task.Labels, "schedule") || task.Continue != (task == digest) {
			t.Errorf("task %s: proactive %v labels %v continue %v", task.Text, task.Proactive, task.Labels, task.Continue)
		}
	}
	if digest.State != state.NeedsReview || sports.State != state.Done {
		t.Fatalf("digest %s (%s), sports %s (%s)\n%s", digest.State, digest.Reason, sports.State, sports.Reason, out)
	}
	gates, _ := gate.List(b.y, gate.Filter{Imp: "digest"})
	if len(gates) != 1 || gates[0].Task != digest.ID {
		t.Fatalf("gates: %+v", gates)
	}
	if out, err := b.run(t, "impgate", "deny", "--reason", "not this week", gates[0].ID); err != nil {
		t.Fatalf("deny: %v %s", err, out)
	}
	out = b.once(t)
	if task := b.task(t, digest.ID); task.State != state.Done {
		t.Errorf("the digest task after its gate was denied: %s (%s)", task.State, task.Reason)
	}
	var cont []*queue.Task
	ts, _ = queue.List(b.y, queue.Filter{Imp: "digest"})
	for _, task := range ts {
		if task.Continues == digest.ID {
			cont = append(cont, task)
		}
	}
	if len(cont) != 1 {
		t.Fatalf("continuations of %s: %d, want 1\n%s", digest.ID, len(cont), out)
	}
	c := cont[0]
	if !slices.Contains(c.Labels, "continuation") || !c.Continue || !c.Proactive ||
		!strings.Contains(c.Text, gates[0].ID) || !strings.Contains(c.Text, "denied") || !strings.Contains(c.Text, "not this week") {
		t.Errorf("continuation: labels %v continue %v proactive %v\n%s", c.Labels, c.Continue, c.Proactive, c.Text)
	}
	if len(c.Runs) == 0 {
		t.Errorf("the continuation did not run:\n%s", out)
	}
}
