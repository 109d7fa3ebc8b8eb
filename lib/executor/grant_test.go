package executor

import (
	"errors"
	"os"
	"strings"
	"testing"

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
