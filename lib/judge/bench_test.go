package judge

import (
	"fmt"
	"net/http"
	"strings"
	"testing"
)

// fiftyRules is a policy shaped like a real one: a mix of model APIs, MCP
// servers, org-only write hosts and read-only mirrors.
func fiftyRules(t testing.TB) *Policy {
	var rules []string
	for i := range 50 {
		var r string
		switch i % 5 {
		case 0:
			r = fmt.Sprintf(`{"name":"api-%d","match":{"protocol":"https","host":"svc%d.example.com","method":"POST","pathPrefix":["/v1/","/backend-api/"]},"verdict":"allow"}`, i, i)
		case 1:
			r = fmt.Sprintf(`{"name":"cdn-%d","match":{"host":"*.cdn%d.example.net","port":443},"verdict":"allow"}`, i, i)
		case 2:
			r = fmt.Sprintf(`{"name":"mcp-%d","match":{"host":"mcp%d.example.com","mcp":{"method":"tools/call","tool":["list_*","get_*","search_*"]}},"verdict":"allow"}`, i, i)
		case 3:
			r = fmt.Sprintf(`{"name":"org-%d","match":{"protocol":"https","host":"api%d.example.org","subject":"org","headerContains":{"content-type":"json"}},"verdict":"allow","inject":{"header":"authorization","secret":"s%d","format":"Bearer %%s"}}`, i, i, i)
		case 4:
			r = fmt.Sprintf(`{"name":"mirror-%d","match":{"host":["a%d.example.io","b%d.example.io"],"method":["GET","HEAD"],"maxBodySize":1024},"verdict":"allow"}`, i, i, i)
		}
		rules = append(rules, r)
	}
	return policy(t, strings.Join(rules, ","))
}

func benchRequest() *Request {
	return &Request{
		Subject:  "yuko",
		Protocol: "https",
		Method:   "POST",
		Host:     "svc40.example.com",
		Port:     443,
		Path:     "/backend-api/codex/responses",
		Header: http.Header{
			"Authorization":   {"Bearer IMPYARD_PLACEHOLDER_openai"},
			"Content-Type":    {"application/json"},
			"Accept":          {"text/event-stream"},
			"User-Agent":      {"pi/1.0"},
			"Accept-Encoding": {"gzip"},
			"Content-Length":  {"6500"},
			"Openai-Beta":     {"responses=experimental"},
			"Session_id":      {"0198e3c1-7c2e-7d1a-9a47-3b1f2e8c4d55"},
		},
		BodySize: 6500,
		Addr:     mustAddr("104.18.32.47"),
	}
}

func BenchmarkJudge50Rules(b *testing.B) {
	p := fiftyRules(b)
	r := benchRequest()
	if d := p.Judge(r); d.Verdict != Allow || d.Rule != "api-40" {
		b.Fatalf("benchmark request decided %+v", d)
	}
	b.ReportAllocs()
	for b.Loop() {
		p.Judge(r)
	}
}

// BenchmarkJudgeBaseline is the floor to compare with: a host allowlist
// as a map, the judge's two-host predecessor.
func BenchmarkJudgeBaseline(b *testing.B) {
	allow := map[string]bool{}
	for i := range 50 {
		allow[fmt.Sprintf("svc%d.example.com", i)] = true
	}
	r := benchRequest()
	b.ReportAllocs()
	for b.Loop() {
		if !allow[r.Host] {
			b.Fatal("not allowed")
		}
	}
}
