package judge

import (
	"strings"
	"testing"

	"github.com/impyard/impyard/lib/mcp"
)

func TestGateVerdict(t *testing.T) {
	p := policy(t,
		`{"name":"sum","match":{"host":"mcp.impyard","mcp":{"method":"tools/call","tool":"get-sum"}},"verdict":"gate"}`,
		`{"name":"read","match":{"host":"mcp.impyard","mcp":{"method":"tools/call","tool":"echo"}},"verdict":"allow"}`)
	r := base()
	r.Method, r.Host, r.Addr = "POST", "mcp.impyard", mustAddr("93.184.216.34")
	r.MCP = liftOne("tools/call", "get-sum")
	if d := p.Judge(r); d.Verdict != Gate || d.Rule != "sum" || d.Reason != `rule "sum" gates it` {
		t.Errorf("gated call: %+v", d)
	}
	r.MCP = liftOne("tools/call", "echo")
	if d := p.Judge(r); d.Verdict != Allow || d.Rule != "read" {
		t.Errorf("allowed call: %+v", d)
	}
	// A gate holds one call: one in a batch denies the batch, calls
	// around it included.
	r.MCP = &mcp.Lifted{Batch: true, Calls: []mcp.Call{{Method: "tools/call", Tool: "echo"}, {Method: "tools/call", Tool: "get-sum"}}}
	if d := p.Judge(r); d.Verdict != Deny || !strings.Contains(d.Reason, "a gated call must be sent alone") {
		t.Errorf("batch with a gated call: %+v", d)
	}
	// A CONNECT to the door is terminated, so that each call is judged.
	if d := p.JudgeConnect("mcp.impyard", 443, "yuko"); d.Verdict != Allow {
		t.Errorf("CONNECT: %+v", d)
	}
	if Gate.String() != "gate" {
		t.Errorf("Gate is %q", Gate.String())
	}
}

func TestGateRuleRefused(t *testing.T) {
	for _, rule := range []string{
		`{"name":"a","match":{"host":"h"},"verdict":"gate"}`,
		`{"name":"a","match":{"mcp":{"method":"tools/list"}},"verdict":"gate"}`,
		`{"name":"a","match":{"mcp":{"method":"tools/call"}},"verdict":"gate"}`,
		`{"name":"a","match":{"mcp":{"method":["tools/call","tools/list"],"tool":"x"}},"verdict":"gate"}`,
		`{"name":"a","match":{"protocol":"https","mcp":{"method":"tools/call","tool":"x"}},"verdict":"gate","inject":{"header":"authorization","secret":"s","format":"Bearer %s"}}`,
		`{"name":"a","match":{"network":"10.0.0.0/8","mcp":{"method":"tools/call","tool":"x"}},"verdict":"gate"}`,
	} {
		_, err := Parse([]byte(`{"schema":"impyard.policy/1","rules":[` + rule + `]}`))
		if err == nil || !strings.Contains(err.Error(), "a gate rule") {
			t.Errorf("%s: got %v, want a gate rule refused", rule, err)
		}
	}
}
