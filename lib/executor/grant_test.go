package executor

import (
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/impyard/impyard/lib/approval"
	"github.com/impyard/impyard/lib/config"
	"github.com/impyard/impyard/lib/gate"
	"github.com/impyard/impyard/lib/grant"
	"github.com/impyard/impyard/lib/judge"
)

const grantPolicy = `{"schema":"impyard.policy/1","rules":[
 {"name":"model-api","match":{"host":"api.openai.com"},"verdict":"allow"},
 {"name":"default-deny","match":{"host":"*"},"verdict":"deny"}]}`

func ruleNames(t *testing.T, path string) string {
	t.Helper()
	p, err := judge.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, r := range p.Rules() {
		names = append(names, r.Name)
	}
	return strings.Join(names, ",")
}

func TestGrantAppliesTheApprovedRule(t *testing.T) {
	r := setup(t, "")
	os.MkdirAll(r.Yard.Path("policies"), 0o750)
	os.WriteFile(r.Yard.PolicyPath(), []byte(grantPolicy), 0o640)
	payload, err := grant.Rule("yuko", "", []byte(`{"name":"docs","match":{"host":"docs.python.org"},"verdict":"allow"}`))
	if err != nil {
		t.Fatal(err)
	}
	g := &gate.Gate{ID: "g-0123456789abcdef", Imp: "yuko", Intent: "egress-grant"}

	res, err := r.grant(g, payload)
	if err != nil {
		t.Fatal(err)
	}
	if res.Kind != config.EgressGrant || !strings.HasPrefix(res.Detail, "rule grant-yuko-docs inserted at position 2") {
		t.Errorf("result %+v", res)
	}
	if got, want := ruleNames(t, r.Yard.PolicyPath()), "model-api,grant-yuko-docs,default-deny"; got != want {
		t.Errorf("policy rules %s, want %s", got, want)
	}

	// Resumed after a crash: the rule is found, not added twice.
	res, err = r.grant(g, payload)
	if err != nil || res.Kind != config.EgressGrant || res.Detail != "rule grant-yuko-docs already present" {
		t.Errorf("again: %+v %v", res, err)
	}
	if got, want := ruleNames(t, r.Yard.PolicyPath()), "model-api,grant-yuko-docs,default-deny"; got != want {
		t.Errorf("policy rules after a second apply %s, want %s", got, want)
	}
}

// A payload that is not the rule Rule made (another imp's subject, an
// unscoped name) changes nothing, and is not worth retrying.
func TestGrantRefusesAnUngrantedRule(t *testing.T) {
	r := setup(t, "")
	os.MkdirAll(r.Yard.Path("policies"), 0o750)
	os.WriteFile(r.Yard.PolicyPath(), []byte(grantPolicy), 0o640)
	other, err := grant.Rule("rex", "", []byte(`{"name":"docs","match":{"host":"docs.python.org"},"verdict":"allow"}`))
	if err != nil {
		t.Fatal(err)
	}
	g := &gate.Gate{ID: "g-0123456789abcdef", Imp: "yuko", Intent: "egress-grant"}
	for _, payload := range [][]byte{
		other,
		[]byte(`{"name":"docs","match":{"host":"docs.python.org"},"verdict":"allow"}`),
		[]byte(`{"name":"docs","match":{"host":"docs.python.org"},"verdict":"allow","inject":"token"}`),
	} {
		res, err := r.grant(g, payload)
		var o *outcome
		if !errors.As(err, &o) || o.sent || o.transient || res != nil {
			t.Errorf("%s: got %+v %v, want a refusal, not sent, not transient", payload, res, err)
		}
	}
	if b, _ := os.ReadFile(r.Yard.PolicyPath()); string(b) != grantPolicy {
		t.Errorf("policy changed by a refused grant:\n%s", b)
	}
	if _, err := os.Stat(r.Yard.PolicyPath() + ".1"); err == nil {
		t.Errorf("a refused grant left a backup")
	}
}

// An hour's grant counts from its signed approval, whenever it runs, and
// the runner's rescan sweeps it once the runner's clock passes the hour.
func TestGrantExpiresFromItsApproval(t *testing.T) {
	r := setup(t, "")
	os.MkdirAll(r.Yard.Path("policies"), 0o750)
	os.WriteFile(r.Yard.PolicyPath(), []byte(grantPolicy), 0o640)
	payload, err := grant.Rule("yuko", "t-20260301-ab12", []byte(`{"name":"docs","match":{"host":"docs.python.org"},"verdict":"allow","expires":"1h","scope":"task"}`))
	if err != nil {
		t.Fatal(err)
	}
	approved := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	now := approved.Add(20 * time.Minute) // executed late: still counts from the approval
	r.Now = func() time.Time { return now }
	var logged []string
	r.Logf = func(format string, a ...any) { logged = append(logged, fmt.Sprintf(format, a...)) }
	g := &gate.Gate{ID: "g-0123456789abcdef", Imp: "yuko", Intent: "egress-grant", Task: "t-20260301-ab12",
		Approval: &approval.Approval{At: approved}}
	res, err := r.grant(g, payload)
	if err != nil || !strings.Contains(res.Detail, "for task t-20260301-ab12, until 2026-03-01T13:00:00Z") {
		t.Fatalf("grant: %+v %v", res, err)
	}
	r.sweepGrants()
	if got, want := ruleNames(t, r.Yard.PolicyPath()), "model-api,grant-yuko-docs,default-deny"; got != want {
		t.Errorf("before the hour: %s, want %s", got, want)
	}
	now = approved.Add(time.Hour)
	r.sweepGrants()
	if got, want := ruleNames(t, r.Yard.PolicyPath()), "model-api,default-deny"; got != want {
		t.Errorf("after the hour: %s, want %s", got, want)
	}
	if len(logged) != 1 || !strings.HasPrefix(logged[0], "expired grant-yuko-docs removed; previous policy kept as gateway.json.2") {
		t.Errorf("logged %q", logged)
	}
}
