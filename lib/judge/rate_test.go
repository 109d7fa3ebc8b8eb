package judge

import (
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/impyard/impyard/lib/mcp"
	"github.com/impyard/impyard/lib/rate"
)

// A rule's rate is parsed with it, is only for allow rules, and reaches
// the decision of every request the rule allows, each rated rule of a
// batch once.
func TestRuleRate(t *testing.T) {
	for rl, want := range map[string]string{
		`{"name":"x","match":{"host":"a"},"verdict":"allow","rate":"many"}`:  `rules[0] "x": rate: rate "many": a rate is "N/PERIOD"`,
		`{"name":"x","match":{"host":"a"},"verdict":"allow","rate":"0/1m"}`:  `rules[0] "x": rate: rate "0/1m": count must be 1 to`,
		`{"name":"x","match":{"host":"a"},"verdict":"deny","rate":"5/1m"}`:   `rules[0] "x": rate: only an allow rule has requests to count`,
		`{"name":"x","match":{"host":"a"},"verdict":"tunnel","rate":"5/1m"}`: `rules[0] "x": rate: only an allow rule`,
		`{"name":"x","match":{"host":"a"},"verdict":"allow","rate":5}`:       `rules[0] "x": rate:`,
	} {
		_, err := Parse([]byte(`{"schema":"impyard.policy/1","rules":[` + rl + `]}`))
		if err == nil || !strings.HasPrefix(err.Error(), want) {
			t.Errorf("%s: %v, want %q", rl, err, want)
		}
	}
	p := policy(t,
		`{"name":"init","match":{"mcp":{"method":"initialize"}},"verdict":"allow","rate":"10/1m"}`,
		`{"name":"tools","match":{"mcp":{"method":"tools/call"}},"verdict":"allow","rate":"2/1h"}`,
		`{"name":"plain","match":{"host":"api.example.com"},"verdict":"allow"}`,
	)
	r := base()
	if d := p.Judge(r); d.Verdict != Allow || d.Rule != "plain" || d.Rated != nil {
		t.Errorf("a rule without a rate: %+v", d)
	}
	r.MCP = &mcp.Lifted{Calls: []mcp.Call{{Method: "tools/call", Tool: "a"}}}
	if d := p.Judge(r); !reflect.DeepEqual(d.Rated, []Rated{{"tools", rate.Limit{N: 2, Period: time.Hour}}}) {
		t.Errorf("one call: rated %+v", d.Rated)
	}
	r.MCP = &mcp.Lifted{Calls: []mcp.Call{{Method: "initialize"}, {Method: "tools/call", Tool: "a"}, {Method: "tools/call", Tool: "b"}}, Batch: true}
	want := []Rated{{"init", rate.Limit{N: 10, Period: time.Minute}}, {"tools", rate.Limit{N: 2, Period: time.Hour}}}
	if d := p.Judge(r); d.Verdict != Allow || !reflect.DeepEqual(d.Rated, want) {
		t.Errorf("a batch: %v rated %+v, want %+v", d.Verdict, d.Rated, want)
	}
	r.MCP = &mcp.Lifted{Calls: []mcp.Call{{Method: "tools/call", Tool: "a"}}}
	got := p.Explain(r)
	if last := got[len(got)-1]; last.Rule != "tools" || last.Why != "matches: allow, at most 2/1h per subject (past it 429 with Retry-After)" {
		t.Errorf("Explain: %+v", got)
	}
}
