package executor

import (
	"context"
	"os"
	"testing"

	"github.com/impyard/impyard/internal/tracetest"
	"github.com/impyard/impyard/lib/grant"
	"github.com/impyard/impyard/lib/home"
	"github.com/impyard/impyard/lib/state"
	"github.com/impyard/impyard/lib/store"
)

// An executed gate's local effect is durable before the gate is marked
// executed, and the approval is durably marked used before the effect: a
// power cut can leave neither an executed gate whose effect is gone (the
// owner's message lost, never retried) nor an effect whose approval could
// be replayed. Read from the store's operation trace of one execution of
// each executor kind that writes a local file: the owner's
// notification log, memory.md, the gateway's policy.
func TestEffectDurableBeforeExecuted(t *testing.T) {
	for _, c := range []struct {
		intent, org, payload string
		effect               func(r *Runner) string
		prepare              func(t *testing.T, r *Runner) string // the payload, when it needs the yard
	}{
		{"message-user", "[executors.message-user]\nkind = \"message-user\"\n", `{"text":"disk nearly full"}`,
			func(r *Runner) string { return r.Yard.Path("notifications.jsonl") }, nil},
		{"memory-promote", "[executors.memory-promote]\nkind = \"memory\"\n", `{"text":"the owner reads digests on Mondays","reason":"told so"}`,
			func(r *Runner) string { return r.Yard.Path("imps", "yuko", "memory.md") }, nil},
		{"egress-grant", "[executors.egress-grant]\nkind = \"egress-grant\"\n", "",
			func(r *Runner) string { return r.Yard.PolicyPath() },
			func(t *testing.T, r *Runner) string {
				if err := os.MkdirAll(r.Yard.Path("policies"), 0o750); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(r.Yard.PolicyPath(), []byte(grantPolicy), 0o640); err != nil {
					t.Fatal(err)
				}
				payload, err := grant.Rule("yuko", "", []byte(`{"name":"docs","match":{"host":"docs.python.org"},"verdict":"allow"}`))
				if err != nil {
					t.Fatal(err)
				}
				return string(payload)
			}},
	} {
		t.Run(c.intent, func(t *testing.T) {
			r := setup(t, c.org)
			// A home not made yet: executed/ and the home itself are new.
			r.Home += "/home"
			if err := os.MkdirAll(r.Yard.Path("imps", "yuko"), 0o750); err != nil {
				t.Fatal(err)
			}
			payload := c.payload
			if c.prepare != nil {
				payload = c.prepare(t, r)
			}
			g := approved(t, r, c.intent, payload)
			rec := tracetest.Record(t)
			out, err := r.Execute(context.Background(), g.ID)
			if err != nil || out.State != state.Executed {
				t.Fatalf("%v %v", out, err)
			}
			ops := rec.Ops()
			effect, marker := c.effect(r), home.Dir(r.Home).Executed(g.ID)
			first, executed := -1, -1
			for i, op := range ops {
				if first < 0 && (op.Path == effect || op.To == effect) {
					first = i
				}
				if op.Kind == store.OpRename && op.To == r.Yard.Path("gates", "resolved", g.ID+".json") {
					executed = i
				}
			}
			if first < 0 || executed < first {
				t.Fatalf("no effect on %s before the last gate write (%d, %d):\n%s", effect, first, executed, rec)
			}
			if err := rec.Durable(first, r.Home, marker); err != nil {
				t.Errorf("the approval is not marked used before the effect: %v\n%s", err, rec)
			}
			if err := rec.Durable(executed, r.Yard.Root, effect); err != nil {
				t.Errorf("the effect is not durable before the gate is marked executed: %v\n%s", err, rec)
			}
		})
	}
}
