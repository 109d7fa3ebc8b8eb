package executor

import (
	"encoding/json"
	"testing"

	"github.com/impyard/impyard/lib/gate"
	"github.com/impyard/impyard/lib/id"
	"github.com/impyard/impyard/lib/intent"
	"github.com/impyard/impyard/lib/queue"
	"github.com/impyard/impyard/lib/state"
)

// prGate is what chain filed, read back from the yard.
func prGates(t *testing.T, r *Runner, intent string) []*gate.Gate {
	t.Helper()
	gates, bad := gate.List(r.Yard, gate.Filter{All: true})
	if len(bad) > 0 {
		t.Fatal(bad)
	}
	var out []*gate.Gate
	for _, g := range gates {
		if g.Intent == intent {
			out = append(out, g)
		}
	}
	return out
}

func TestChainFilesOnePullRequestGate(t *testing.T) {
	for _, c := range []struct {
		name     string
		taskBase string // "" files no task
		wantBase string
	}{
		{"task base with refs/heads/", "refs/heads/release-2", "release-2"},
		{"task base as a branch name", "dev", "dev"},
		{"task without a base", "-", "main"},
		{"no task in the queue", "", "main"},
	} {
		t.Run(c.name, func(t *testing.T) {
			r := setup(t, "")
			taskID := id.New(id.Task)
			if c.taskBase != "" {
				base := c.taskBase
				if base == "-" {
					base = ""
				}
				var err error
				if taskID, _, err = queue.Add(r.Yard, queue.AddOptions{Imp: "yuko", Text: "fix it", Kind: queue.Code, Base: base, By: "alice", Actor: "test"}); err != nil {
					t.Fatal(err)
				}
			}
			push := &gate.Gate{ID: "g-0123456789abcdef", Imp: "yuko", Intent: "commit-and-push", Task: taskID, Run: id.New(id.Run)}
			p := intent.Push{Branch: "imp/yuko/fix", Stat: " a | 1 +\n"}

			first, err := r.chain(push, "open-pr", "imp/yuko/fix", p)
			if err != nil {
				t.Fatal(err)
			}
			// A resumed push finds the gate it already filed.
			again, err := r.chain(push, "open-pr", "imp/yuko/fix", p)
			if err != nil || again != first {
				t.Errorf("second chain: %q %v, want the first gate %s", again, err, first)
			}
			got := prGates(t, r, "open-pr")
			if len(got) != 1 {
				t.Fatalf("%d open-pr gates filed, want 1", len(got))
			}
			g := got[0]
			if g.ID != first || g.State != state.Filed || g.Imp != "yuko" || g.Task != taskID || g.Run != push.Run || g.Rationale != "chained after gate "+push.ID {
				t.Errorf("filed %+v", g)
			}
			b, err := g.Frozen()
			if err != nil {
				t.Fatal(err)
			}
			var pr map[string]string
			if err := json.Unmarshal(b, &pr); err != nil {
				t.Fatal(err)
			}
			want := map[string]string{"title": "imp/yuko/fix", "head": "imp/yuko/fix", "base": c.wantBase, "body": " a | 1 +\n"}
			if len(pr) != len(want) {
				t.Errorf("payload %v, want %v", pr, want)
			}
			for k, v := range want {
				if pr[k] != v {
					t.Errorf("payload %s = %q, want %q", k, pr[k], v)
				}
			}
		})
	}
}

// Each push gate gets its own follow-up, and a gate of another intent or
// another task does not count as one.
func TestChainIsPerPushGate(t *testing.T) {
	r := setup(t, "")
	task := id.New(id.Task)
	one := &gate.Gate{ID: "g-0000000000000001", Imp: "yuko", Task: task}
	two := &gate.Gate{ID: "g-0000000000000002", Imp: "yuko", Task: task}
	p := intent.Push{Stat: "s"}
	a, err := r.chain(one, "open-pr", "imp/yuko/a", p)
	if err != nil {
		t.Fatal(err)
	}
	b, err := r.chain(two, "open-pr", "imp/yuko/a", p)
	if err != nil || b == a {
		t.Errorf("second push gate: %q %v, want a gate of its own", b, err)
	}
	c, err := r.chain(one, "open-draft-pr", "imp/yuko/a", p)
	if err != nil || c == a || c == b {
		t.Errorf("another intent: %q %v, want a gate of its own", c, err)
	}
	other := &gate.Gate{ID: one.ID, Imp: "yuko", Task: id.New(id.Task)}
	d, err := r.chain(other, "open-pr", "imp/yuko/a", p)
	if err != nil || d == a {
		t.Errorf("another task: %q %v, want a gate of its own", d, err)
	}
	if n := len(prGates(t, r, "open-pr")); n != 3 {
		t.Errorf("%d open-pr gates, want 3", n)
	}
}

func TestChainRefusesABadImp(t *testing.T) {
	r := setup(t, "")
	if gid, err := r.chain(&gate.Gate{ID: "g-0000000000000001", Imp: "../x"}, "open-pr", "b", intent.Push{}); err == nil {
		t.Errorf("filed %s for an invalid imp", gid)
	}
}
