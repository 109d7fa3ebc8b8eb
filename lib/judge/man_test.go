package judge

import (
	"os"
	"strings"
	"testing"

	"github.com/impyard/impyard/lib/mcp"
)

// manRules reads the display of impgw(8) that holds the rules reading
// query, body and MCP arguments, as a policy.
func manRules(t *testing.T) *Policy {
	t.Helper()
	b, err := os.ReadFile("../../man/impgw.8")
	if err != nil {
		t.Fatal(err)
	}
	var block []string
	literal := false
	for line := range strings.SplitSeq(string(b), "\n") {
		switch {
		case strings.HasPrefix(line, ".Bd -literal"):
			literal, block = true, nil
		case strings.HasPrefix(line, ".Ed"):
			if text := strings.Join(block, "\n"); literal && strings.Contains(text, `"search-no-token"`) {
				return parse(t, `{"schema":"impyard.policy/1","rules":[`+text+`]}`)
			}
			literal = false
		case literal:
			block = append(block, line)
		}
	}
	t.Fatal("impgw.8 has no display of the search-no-token rule")
	return nil
}

// The four rules the man page shows do what their comments say.
func TestManPageRules(t *testing.T) {
	p := manRules(t)
	at := func(host, method, path string) *Request {
		r := base()
		r.Host, r.Method, r.Path = host, method, path
		return r
	}
	body := func(r *Request, b string) *Request {
		jsonReq(b)(r)
		r.Method = "POST"
		return r
	}
	lift := func(r *Request, b string) *Request {
		l, err := mcp.Lift("application/json", []byte(b))
		if err != nil {
			t.Fatal(err)
		}
		body(r, b).MCP = &l
		return r
	}
	q := func(r *Request, query string) *Request { r.Query = query; return r }
	issue := func(owner, repo string) string {
		return `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"create_issue","arguments":{"owner":"` + owner + `","repo":"` + repo + `","title":"t"}}}`
	}
	tests := []struct {
		name string
		r    *Request
		want string // deciding rule; "" for a deny
	}{
		{"search", q(at("api.example.com", "GET", "/search"), "q=cats"), "search-no-token"},
		{"search with a token", q(at("api.example.com", "GET", "/search"), "q=cats&token=x"), ""},
		{"search without q", q(at("api.example.com", "GET", "/search"), "page=2"), ""},
		{"issue with bug", body(at("api.github.com", "POST", "/repos/ourco/app/issues"), `{"title":"t","labels":["bug"]}`), "issues-allowed-label"},
		{"issue with two labels", body(at("api.github.com", "POST", "/repos/ourco/app/issues"), `{"title":"t","labels":["bug","p0"]}`), ""},
		{"issue with another label", body(at("api.github.com", "POST", "/repos/ourco/app/issues"), `{"title":"t","labels":["p0"]}`), ""},
		{"issue elsewhere", body(at("api.github.com", "POST", "/repos/evil/app/issues"), `{"title":"t","labels":["bug"]}`), ""},
		{"create_issue in app", lift(at("api.githubcopilot.com", "POST", "/mcp"), issue("ourco", "app")), "create-issue-in-app"},
		{"create_issue in infra", lift(at("api.githubcopilot.com", "POST", "/mcp"), issue("ourco", "infra")), ""},
		{"batch with one call outside", lift(at("api.githubcopilot.com", "POST", "/mcp"), "["+issue("ourco", "app")+","+issue("other", "app")+"]"), ""},
		{"mini model", body(at("api.openai.com", "POST", "/v1/responses"), `{"model":"gpt-5-mini","input":"hi"}`), "mini-model-no-tools"},
		{"mini model with browsing", body(at("api.openai.com", "POST", "/v1/responses"), `{"model":"gpt-5-mini","input":"hi","tools":[{"type":"web_search"}]}`), ""},
		{"another model", body(at("api.openai.com", "POST", "/v1/responses"), `{"model":"gpt-5","input":"hi"}`), ""},
	}
	for _, tt := range tests {
		d := p.Judge(tt.r)
		if d.Rule != tt.want || (d.Verdict == Allow) != (tt.want != "") {
			t.Errorf("%s: got %+v, want rule %q\ntrace: %+v", tt.name, d, tt.want, p.Explain(tt.r))
		}
	}
}

// The shipped policy's comments show a query rule and an MCP argument rule;
// written into its rules, each is a valid rule that does what it says.
func TestShippedPolicyExamples(t *testing.T) {
	b, err := os.ReadFile("../../policies/gateway.json")
	if err != nil {
		t.Fatal(err)
	}
	var examples []string
	for line := range strings.SplitSeq(string(b), "\n") {
		_, rule, ok := strings.Cut(line, "not enabled here: ")
		if !ok {
			continue
		}
		rule, _, _ = strings.Cut(rule, `}.`)
		examples = append(examples, strings.ReplaceAll(rule, `\"`, `"`)+"}")
	}
	if len(examples) != 2 {
		t.Fatalf("found %d example rules in the shipped policy's comments, want 2", len(examples))
	}
	p := policy(t, examples...)
	r := base()
	r.Path, r.Query = "/search", "q=cats"
	if d := p.Judge(r); d.Rule != "search-no-token" {
		t.Errorf("query example: %+v", d)
	}
	r.Query = "q=cats&token=x"
	if d := p.Judge(r); d.Verdict != Deny {
		t.Errorf("query example with a token: %+v", d)
	}
	r = base()
	r.Host, r.Method = "api.githubcopilot.com", "POST"
	r.MCP = call(t, "create_issue", `{"owner":"ourco","repo":"app"}`)
	if d := p.Judge(r); d.Rule != "create-issue-in-app" {
		t.Errorf("MCP example: %+v", d)
	}
	r.MCP = call(t, "create_issue", `{"owner":"ourco","repo":"infra"}`)
	if d := p.Judge(r); d.Verdict != Deny {
		t.Errorf("MCP example in another repo: %+v", d)
	}
}
