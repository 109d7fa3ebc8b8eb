package grant

import (
	"os"
	"strings"
	"testing"

	"github.com/impyard/impyard/lib/judge"
	"github.com/impyard/impyard/lib/yard/yardtest"
)

const policy = `{"schema":"impyard.policy/1","rules":[
 {"name":"model-api","match":{"host":"api.openai.com"},"verdict":"allow"},
 {"name":"no-tracker","match":{"host":"*.tracker.example"},"verdict":"deny"},
 {"name":"default-deny","match":{"host":"*"},"verdict":"deny"}]}`

func TestRuleAndApply(t *testing.T) {
	y := yardtest.New(t)
	os.MkdirAll(y.Path("policies"), 0o750)
	os.WriteFile(y.PolicyPath(), []byte(policy), 0o640)

	rule, err := Rule("yuko", "", []byte(`{"name":"docs","match":{"host":"docs.python.org","method":"GET"},"verdict":"allow"}`))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(rule), `"name":"grant-yuko-docs"`) || !strings.Contains(string(rule), `"subject":"yuko"`) {
		t.Fatalf("rule not scoped to its imp: %s", rule)
	}
	if again, err := build("yuko", rule, true); string(again) != string(rule) {
		t.Errorf("the granted form is not a fixed point:\n%s\n%s %v", rule, again, err)
	}
	if _, err := build("rex", rule, true); err == nil || !strings.Contains(err.Error(), "may not set match.subject") {
		t.Errorf("yuko's grant in granted form for rex: %v", err)
	}
	detail, err := Apply(y, Grant{Imp: "yuko"}, rule)
	if err != nil {
		t.Fatal(err)
	}
	p, err := judge.Load(y.PolicyPath())
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, r := range p.Rules() {
		names = append(names, r.Name)
	}
	if got := strings.Join(names, ","); got != "model-api,no-tracker,grant-yuko-docs,default-deny" {
		t.Errorf("rules %s (%s)", got, detail)
	}
	if b, err := os.ReadFile(y.PolicyPath() + ".1"); err != nil || string(b) != policy {
		t.Errorf("backup missing or changed: %v", err)
	}
	if d, _ := Apply(y, Grant{Imp: "yuko"}, rule); !strings.Contains(d, "already present") {
		t.Errorf("second apply: %s", d)
	}
	if _, err := os.Stat(y.PolicyPath() + ".2"); err == nil {
		t.Errorf("second apply wrote a backup")
	}
}

// A proposal may not ask for what would take a grant past plain requests;
// the refusal names what was asked.
func TestRuleRefusesEscapes(t *testing.T) {
	for _, tc := range []struct{ rule, want string }{
		{`{"name":"x","match":{"host":"a.example","method":"CONNECT"},"verdict":"allow"}`, "CONNECT method"},
		{`{"name":"x","match":{"host":"a.example","method":["GET","connect"]},"verdict":"allow"}`, "CONNECT method"},
		{`{"name":"x","match":{"host":"a.example","method":"\u0043ONNECT"},"verdict":"allow"}`, "CONNECT method"},
		{`{"name":"x","match":{"host":"a.example","port":443},"verdict":"tunnel"}`, `"verdict": "tunnel"`},
		{`{"name":"x","match":{"host":"a.example","headerContains":{"Upgrade":"websocket"}},"verdict":"allow"}`, "headerContains on upgrade"},
		{`{"name":"x","match":{"host":"a.example","headerContains":{"x-a":"","upgrade":""}},"verdict":"allow"}`, "headerContains on upgrade"},
		{`{"name":"x","match":{"host":"127.0.0.1","network":"127.0.0.0/8"},"verdict":"allow"}`, "network allowance"},
		{`{"name":"x","match":{"host":"a.example","network":["10.0.0.0/8"]},"verdict":"allow"}`, "network allowance"},
		{`{"name":"x","match":{"host":"a.example","subject":"org"},"verdict":"allow"}`, "may not set match.subject"},
		{`{"name":"x","match":{"host":"a.example","subject":"yuko"},"verdict":"allow"}`, "may not set match.subject"},
		{`{"name":"x","match":{"host":"a.example","subject":["yuko","org"]},"verdict":"allow"}`, "may not set match.subject"},
		{`{"name":"x","match":{"host":"a.example","method":"GET","method":"CONNECT"},"verdict":"allow"}`, "duplicate"},
	} {
		_, err := Rule("yuko", "", []byte(tc.rule))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Rule(%s) = %v, want an error naming %q", tc.rule, err, tc.want)
		}
	}
}

func TestRuleRefuses(t *testing.T) {
	for _, bad := range []string{
		`{"name":"x","match":{"host":"a.example"},"verdict":"tunnel"}`,
		`{"name":"x","match":{"host":"a.example"},"verdict":"allow","inject":{"header":"authorization","secret":"resend"}}`,
		`{"name":"x","match":{"host":"a.example"},"verdict":"allow","mode":"report"}`,
		`{"name":"x","match":{"method":"GET"},"verdict":"allow"}`,
		`{"match":{"host":"a.example"},"verdict":"allow"}`,
		`{"name":"x","match":{"host":"a.example","port":0},"verdict":"allow"}`,
		`[1,2]`,
	} {
		if _, err := Rule("yuko", "", []byte(bad)); err == nil {
			t.Errorf("accepted %s", bad)
		}
	}
	y := yardtest.New(t)
	os.MkdirAll(y.Path("policies"), 0o750)
	os.WriteFile(y.PolicyPath(), []byte(policy), 0o640)
	raw := []byte(`{"match":{"host":"a.example"},"name":"x","verdict":"allow"}`)
	if _, err := Apply(y, Grant{Imp: "yuko"}, raw); err == nil || !strings.Contains(err.Error(), "not in granted form") {
		t.Errorf("ungranted rule applied: %v", err)
	}
	if b, _ := os.ReadFile(y.PolicyPath()); string(b) != policy {
		t.Errorf("policy changed by a refused grant")
	}
}
