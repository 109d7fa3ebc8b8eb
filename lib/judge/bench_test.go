package judge

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
)

// fiftyRules is a policy shaped like a real one: a mix of model APIs, MCP
// servers, org-only write hosts and read-only mirrors.
func fiftyRules(t testing.TB) *Policy {
	return policy(t, strings.Join(fiftyRuleTexts(), ","))
}

func fiftyRuleTexts() []string {
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
	return rules
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

// judgeRules is fiftyRules with ten rules reading bodies: five deny
// carve-outs on the benchmark request's own host that read its JSON body
// (so each is evaluated, and fails), five MCP rules reading arguments.
func judgeRules(t testing.TB) *Policy {
	rules := fiftyRuleTexts()
	for i := range rules {
		switch {
		case i%10 == 4:
			rules[i] = fmt.Sprintf(`{"name":"no-model-%d","match":{"host":"svc40.example.com","json":{"/model":"banned-%d-*","/stream":[false,null]},"jsonAbsent":["/tools/0/web_search"]},"verdict":"deny"}`, i, i)
		case i%10 == 2:
			rules[i] = fmt.Sprintf(`{"name":"mcp-%d","match":{"host":"mcp%d.example.com","mcp":{"method":"tools/call","tool":"create_*","arguments":{"/repo":"ourco/*","/labels/0":["bug","docs"]}}},"verdict":"allow"}`, i, i)
		}
	}
	return policy(t, strings.Join(rules, ","))
}

// benchBody is a 4 KiB model API request body.
func benchBody() []byte {
	var msgs []string
	for i := 0; len(strings.Join(msgs, ",")) < 3800; i++ {
		msgs = append(msgs, fmt.Sprintf(`{"role":"user","content":[{"type":"input_text","text":"message %d: please summarise the build log and list the failing tests with their packages"}]}`, i))
	}
	body := `{"model":"gpt-5-codex","stream":true,"tools":[{"type":"function","name":"shell"}],"input":[` + strings.Join(msgs, ",") + `],"user":"`
	return []byte(body + strings.Repeat("u", 4096-len(body)-2) + `"}`)
}

// BenchmarkJudge judges a 4 KiB JSON body under fifty rules, ten of which
// read bodies or MCP arguments; compare with BenchmarkJudge50Rules, the
// same request under rules that read no body, measured in the same run.
func BenchmarkJudge(b *testing.B) {
	p := judgeRules(b)
	r := benchRequest()
	r.Body = benchBody()
	r.BodySize = int64(len(r.Body))
	if len(r.Body) != 4096 || !json.Valid(r.Body) {
		b.Fatalf("benchmark body is %d bytes, valid %v", len(r.Body), json.Valid(r.Body))
	}
	if d := p.Judge(r); d.Verdict != Allow || d.Rule != "api-40" {
		b.Fatalf("benchmark request decided %+v", d)
	}
	reads := 0
	readHook = func() { reads++ }
	p.Judge(r)
	readHook = nil
	if reads != 1 {
		b.Fatalf("body read %d times", reads)
	}
	b.ReportAllocs()
	b.SetBytes(int64(len(r.Body)))
	for b.Loop() {
		p.Judge(r)
	}
}
