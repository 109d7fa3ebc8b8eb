package judge

import (
	"encoding/json"
	"github.com/impyard/impyard/lib/id"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/impyard/impyard/lib/mcp"
)

// policy wraps rules (JSON objects) in a policy file.
func policy(t testing.TB, rules ...string) *Policy {
	t.Helper()
	return parse(t, `{"schema":"impyard.policy/1","rules":[`+strings.Join(rules, ",")+`]}`)
}

func parse(t testing.TB, data string) *Policy {
	t.Helper()
	p, err := Parse([]byte(data))
	if err != nil {
		t.Fatalf("Parse: %v\n%s", err, data)
	}
	return p
}

func TestBrokenPolicies(t *testing.T) {
	tests := map[string]string{
		"bad-meter.json":                    `rules[0] "a": meter: "grok" is not openai, anthropic or gemini`,
		"websocket-with-gemini-meter.json":  `rules[0] "a": websocket: the gateway reads usage from WebSocket frames only under meter openai`,
		"websocket-on-deny.json":            `rules[0] "a": websocket: only an allow rule lets a WebSocket through`,
		"websocket-string.json":             `rules[0] "a": websocket: cannot use JSON string as bool`,
		"bad-timeout.json":                  `rules[0] "a": timeout: "10 minutes" is not a duration like "600s" or "10m"`,
		"zero-timeout.json":                 `rules[0] "a": timeout: "0s" is not above 0 and at most 24h0m0s`,
		"long-timeout.json":                 `rules[0] "a": timeout: "25h" is not above 0 and at most 24h0m0s`,
		"tunnel-with-timeout.json":          `rules[0] "a": timeout: only an allow rule has an upstream to wait for`,
		"tunnel-with-meter.json":            `rules[0] "a": meter: only an allow rule meters: the gateway reads no response of a deny or tunnel rule`,
		"upgrade-with-meter.json":           `rules[0] "a": meter: a metering rule cannot allow a protocol upgrade: the gateway reads no usage after it`,
		"bad-cidr.json":                     `rules[0] "a": match.network: "10.0.0.0/33" is not a CIDR prefix like 10.0.0.0/8`,
		"bad-glob.json":                     `rules[0] "a": match.mcp.tool: bad glob "get_[": glob: syntax error at 5: unexpected end of input`,
		"bad-inject-format.json":            `rules[0] "a": inject.format: "Bearer %s %s" must hold exactly one %s and no other %`,
		"bad-inject-header.json":            `rules[0] "a": inject.header: "content-length" cannot carry a secret`,
		"bad-inject-secret.json":            `rules[0] "a": inject.secret: "Resend!" does not match ^[a-z0-9][a-z0-9._-]{0,63}$`,
		"bad-mcp-field.json":                `rules[0] "a": match.mcp: unknown field "Method" (names are case-sensitive: did you mean "method"?)`,
		"bad-method.json":                   `rules[0] "a": match.method: "GET POST" is not an HTTP method`,
		"bad-mode.json":                     `mode: "audit" is not enforce or report`,
		"bad-name.json":                     `rules[0] "Model API": name: "Model API" does not match ^[a-z0-9][a-z0-9._-]{0,63}$`,
		"bad-port-list.json":                `rules[0] "a": match.port: 70000 is not a port number (1..65535)`,
		"bad-port.json":                     `rules[0] "a": match.port: 0 is not a port number (1..65535)`,
		"bad-redact.json":                   `redact: "x-api key" is not a header name`,
		"bad-protocol.json":                 `rules[0] "a": match.protocol: "ftp" is not http or https`,
		"bad-rule-mode.json":                `rules[0] "a": mode: "Report" is not enforce or report`,
		"bad-schema.json":                   `schema: "impyard.gate/1" is not impyard.policy/<major>`,
		"bad-subject-glob.json":             "rules[0] \"a\": match.subject: bad glob \"{yuko,org\": glob: syntax error at 9: unclosed `{`",
		"bad-wildcard.json":                 `rules[0] "a": match.host: "api.*.com": a wildcard must be the whole host or a leading "*."`,
		"case-folded-field.json":            `rules[0] "model-api": unknown field "Verdict" (names are case-sensitive: did you mean "verdict"?)`,
		"cidr-host-bits.json":               `rules[0] "a": match.network: "127.0.0.1/8" has host bits set (did you mean 127.0.0.0/8?)`,
		"duplicate-key.json":                `duplicate key "rules" at $`,
		"duplicate-name.json":               `rules[1] "a": name: used by an earlier rule`,
		"duplicate-rule-key.json":           `rules[0] "a": duplicate key "verdict"`,
		"empty-host-list.json":              `rules[0] "a": match.host: must be a string or a non-empty array of strings`,
		"empty.json":                        `empty input at $`,
		"fractional-maxbodysize.json":       `rules[0] "a": match.maxBodySize: 1.5 is not a byte count (an integer from 0)`,
		"future-schema.json":                `schema: unsupported "impyard.policy/2" (this build reads "impyard.policy/1")`,
		"header-twice.json":                 `rules[0] "a": match.headerContains: header "upgrade" is named twice (names are case-insensitive)`,
		"inject-format-without-secret.json": `rules[0] "a": inject.format: "Bearer" must hold exactly one %s and no other %`,
		"inject-over-http.json":             `rules[1] "mail-any": inject: a rule that injects a secret must match protocol "https" only`,
		"inject-with-http.json":             `rules[0] "a": inject: a rule that injects a secret must match protocol "https" only`,
		"inject-without-header.json":        `rules[0] "a": inject.header: missing`,
		"mapped-cidr.json":                  `rules[0] "a": match.network: "::ffff:127.0.0.0/104" is IPv4-mapped; write the IPv4 prefix`,
		"missing-name.json":                 `rules[0]: name: missing`,
		"missing-rules.json":                `rules: missing (an empty list denies everything)`,
		"missing-verdict.json":              `rules[0] "a": verdict: missing (allow, deny or tunnel)`,
		"negative-maxbodysize.json":         `rules[0] "a": match.maxBodySize: -1 is not a byte count (an integer from 0)`,
		"no-schema.json":                    `schema: missing (want "impyard.policy/1")`,
		"not-object.json":                   `policy must be a JSON object`,
		"null-host.json":                    `rules[0] "a": match.host: must be a string or a non-empty array of strings`,
		"numeric-host.json":                 `rules[0] "a": match.host: host "2130706433": ambiguous numeric host (only a plain dotted quad is an IPv4 address)`,
		"relative-upstream-ca.json":         `upstreamCA: "certs/bundle.pem" is not an absolute path`,
		"string-port.json":                  `rules[0] "a": match.port: "443" is not a port number (1..65535)`,
		"trailing-data.json":                `invalid JSON at byte 45: invalid character '{' after top-level value`,
		"traversal-prefix.json":             `rules[0] "a": match.pathPrefix: "/v1/../admin" has a traversal spelling`,
		"truncated.json":                    `invalid JSON at byte 86: unexpected end of JSON input`,
		"tunnel-with-inject.json":           `rules[0] "a": inject: a tunnel rule cannot inject`,
		"tunnel-with-path.json":             `rules[0] "a": verdict: a tunnel rule can match only protocol, host, port, network and subject`,
		"unknown-field.json":                `unknown field "rule" at $`,
		"unknown-match-field.json":          `rules[1] "b": match: unknown field "hosts"`,
		"unknown-verdict.json":              `rules[0] "a": verdict: "permit" is not allow, deny or tunnel`,
		"wrong-type.json":                   `rules[0] "a": verdict: cannot use JSON number as string`,
	}
	files, err := filepath.Glob("testdata/broken/*.json")
	if err != nil {
		t.Fatal(err)
	}
	if len(files) != len(tests) {
		t.Errorf("%d fixtures in testdata/broken, %d in this table: keep them in step", len(files), len(tests))
	}
	for _, path := range files {
		want, ok := tests[filepath.Base(path)]
		if !ok {
			t.Errorf("%s: fixture without an expected error", path)
			continue
		}
		p, err := Load(path)
		if p != nil || err == nil {
			t.Errorf("%s: loaded; want error %s", path, want)
			continue
		}
		if got, want := err.Error(), path+": "+want; got != want {
			t.Errorf("Load(%s)\n got: %s\nwant: %s", path, got, want)
		}
		// What the gateway does with such a file: deny everything, with
		// the load error as the reason, whatever the file's mode.
		d := Broken(err).Judge(&Request{Protocol: "https", Method: "GET", Host: "example.com", Port: 443})
		if d.Verdict != Deny || d.WouldDeny || d.Reason != "policy unusable: "+err.Error() {
			t.Errorf("%s: broken policy judged %+v", path, d)
		}
	}
}

// TestParseLimits checks each numeric limit of the file format at the
// limit and one past it, with the refusal reason.
func TestParseLimits(t *testing.T) {
	for _, tc := range []struct{ data, err string }{
		// Majors start at 0: /0 is a well-formed major this build does
		// not read, /-1 is no major at all.
		{`{"schema":"impyard.policy/0","rules":[]}`, `schema: unsupported "impyard.policy/0" (this build reads "impyard.policy/1")`},
		{`{"schema":"impyard.policy/-1","rules":[]}`, `schema: "impyard.policy/-1" is not impyard.policy/<major>`},
		{`{"schema":"impyard.policy/1","rules":[{"name":"a","match":{"port":0},"verdict":"allow"}]}`, `rules[0] "a": match.port: 0 is not a port number (1..65535)`},
		{`{"schema":"impyard.policy/1","rules":[{"name":"a","match":{"port":[1,65536]},"verdict":"allow"}]}`, `rules[0] "a": match.port: 65536 is not a port number (1..65535)`},
		{`{"schema":"impyard.policy/1","rules":[{"name":"a","match":{"port":-1},"verdict":"allow"}]}`, `rules[0] "a": match.port: -1 is not a port number (1..65535)`},
		// A strict-decoding error in a rule past the end of the rules list
		// that encoding/json keeps (the last of two "rules" keys) is
		// reported as is: there is no rule to name.
		{`{"schema":"impyard.policy/1","rules":[{"name":"a","verdict":"allow"},{"name":"b","verdict":"deny","verdict":"allow"}],"rules":[{"name":"x","verdict":"deny"}]}`, `duplicate key "verdict" at $.rules[1]`},
		{`{"schema":"impyard.policy/1","rules":[{"name":"a","verdict":"allow"},{"name":"b","verdict":"deny","verdict":"allow"}],"rules":[]}`, `duplicate key "verdict" at $.rules[1]`},
	} {
		p, err := Parse([]byte(tc.data))
		if p != nil || err == nil || err.Error() != tc.err {
			t.Errorf("Parse(%s)\n got: %v\nwant: %s", tc.data, err, tc.err)
		}
	}

	// The first and last ports are ports.
	p := policy(t, `{"name":"edges","match":{"port":[1,65535]},"verdict":"allow"}`)
	for port, rule := range map[int]string{1: "edges", 2: "", 65534: "", 65535: "edges"} {
		r := base()
		r.Port = port
		if d := p.Judge(r); d.Rule != rule {
			t.Errorf("port %d: %+v, want rule %q", port, d, rule)
		}
	}
}

// TestTokens checks the characters of an HTTP token (method and header
// names): each edge of a-z, A-Z and 0-9 and the first and last of the
// other tchars are in, the byte past each range edge is out, in a rule
// and in a request.
func TestTokens(t *testing.T) {
	in := []string{"a", "z", "A", "Z", "0", "9", "!", "~", "`", "^", "|", "Z9!", "!A0z~"}
	out := []string{"@", "[", "/", ":", "{", "\"", " ", "\x7f", "(", ")", ",", "\\", "]", "}", "A:"}
	js := func(s string) string {
		b, err := json.Marshal(s)
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	quoted := make([]string, len(in))
	for i, m := range in {
		quoted[i] = js(m)
	}
	p := policy(t, `{"name":"m","match":{"method":[`+strings.Join(quoted, ",")+`]},"verdict":"allow"}`)
	for _, m := range in {
		r := base()
		r.Method = m
		if d := p.Judge(r); d.Verdict != Allow || d.Rule != "m" {
			t.Errorf("method %q: %+v, want rule %q", m, d, "m")
		}
	}
	for _, m := range out {
		_, err := Parse([]byte(`{"schema":"impyard.policy/1","rules":[{"name":"m","match":{"method":` + js(m) + `},"verdict":"allow"}]}`))
		if want := `rules[0] "m": match.method: ` + strconv.Quote(m) + ` is not an HTTP method`; err == nil || err.Error() != want {
			t.Errorf("method %q in a rule: %v, want %s", m, err, want)
		}
		_, err = Parse([]byte(`{"schema":"impyard.policy/1","rules":[{"name":"h","match":{"headerContains":{` + js("x"+m) + `:""}},"verdict":"allow"}]}`))
		if want := `rules[0] "h": match.headerContains: ` + strconv.Quote("x"+m) + ` is not a header name`; err == nil || err.Error() != want {
			t.Errorf("header %q in a rule: %v, want %s", "x"+m, err, want)
		}
		r := base()
		r.Method = m
		checkDecision(t, p.Judge(r), Decision{Reason: "method is not an HTTP token"})
	}
}

func TestLoadMissingFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "gateway.json")
	_, err := Load(path)
	if !os.IsNotExist(err) || !strings.Contains(err.Error(), path) {
		t.Errorf("Load of a missing file: %v", err)
	}
}

func TestParseAccepts(t *testing.T) {
	p := parse(t, `{
		"schema": "impyard.policy/1",
		"comment": ["top", "level"],
		"mode": "report",
		"upstreamCA": "/etc/impyard/upstream.pem",
		"rules": [
			{"name": "a", "comment": "one line", "verdict": "allow"},
			{"name": "b.c_d-9", "match": {}, "verdict": "deny", "mode": "enforce"},
			{"name": "pinned", "match": {"protocol": "https", "host": ["pinned.example.com", "*.pinned.example"], "port": [443, 8443], "network": ["203.0.113.0/24", "2001:db8::/32"], "subject": ["y*"]}, "verdict": "tunnel"},
			{"name": "inj", "match": {"protocol": "https", "host": "api.example.com", "headerContains": {"X-Api": ""}}, "verdict": "allow", "inject": {"header": "X-Api-Key", "secret": "example"}}
		]
	}`)
	if got, want := p.Rules(), []Rule{
		{Name: "a", Verdict: Allow, Mode: "report"},
		{Name: "b.c_d-9", Verdict: Deny, Mode: "enforce"},
		{Name: "pinned", Verdict: Tunnel, Mode: "report"},
		{Name: "inj", Verdict: Allow, Mode: "report"},
	}; !reflect.DeepEqual(got, want) {
		t.Errorf("Rules() = %+v, want %+v", got, want)
	}
	if p.Mode() != "report" || p.UpstreamCA() != "/etc/impyard/upstream.pem" {
		t.Errorf("Mode() = %q, UpstreamCA() = %q", p.Mode(), p.UpstreamCA())
	}
	if got, want := *p.rules[3].inject, (Inject{Header: "x-api-key", Secret: "example", Format: "%s"}); got != want {
		t.Errorf("inject = %+v, want %+v", got, want)
	}
	var nilPolicy *Policy
	if nilPolicy.Rules() != nil || nilPolicy.Mode() != "enforce" || nilPolicy.UpstreamCA() != "" {
		t.Error("nil policy accessors")
	}
}

// The shipped example must load and say what its comments say.
func TestShippedPolicy(t *testing.T) {
	p, err := Load("../../policies/gateway.json")
	if err != nil {
		t.Fatal(err)
	}
	public := mustAddr("104.18.0.1")
	call := func(method, tool string) *Request {
		r := &Request{Protocol: "https", Method: "POST", Host: "api.githubcopilot.com", Port: 443, Path: "/mcp/", Addr: public}
		r.MCP = liftOne(method, tool)
		return r
	}
	tests := []struct {
		name string
		req  *Request
		want Decision
	}{
		{"model call", &Request{Subject: "yuko", Protocol: "https", Method: "POST", Host: "chatgpt.com", Port: 443, Path: "/backend-api/codex/responses", BodySize: 6500, Addr: public},
			Decision{Verdict: Allow, Rule: "model-api", Reason: `rule "model-api" allows it`, Timeout: 600 * time.Second}},
		{"model GET", &Request{Subject: "yuko", Protocol: "https", Method: "GET", Host: "chatgpt.com", Port: 443, Path: "/backend-api/codex/responses", Addr: public},
			Decision{Reason: "no rule matched"}},
		{"model call before DNS", &Request{Protocol: "https", Method: "POST", Host: "api.anthropic.com", Port: 443, Path: "/v1/messages"},
			Decision{Verdict: Allow, Rule: "model-api", Reason: `rule "model-api" allows it`, Timeout: 600 * time.Second, NeedsAddr: true}},
		{"codex websocket", &Request{Subject: "yuko", Protocol: "https", Method: "GET", Host: "chatgpt.com", Port: 443, Path: "/backend-api/codex/responses", Addr: public,
			Header: http.Header{"Upgrade": {"websocket"}, "Connection": {"Upgrade"}, "Sec-Websocket-Key": {"dGhlIHNhbXBsZSBub25jZQ=="}}},
			Decision{Verdict: Allow, Rule: "model-api-websocket", Reason: `rule "model-api-websocket" allows it`, WebSocket: true, Timeout: 600 * time.Second}},
		{"another upgrade to the model", &Request{Subject: "yuko", Protocol: "https", Method: "GET", Host: "api.openai.com", Port: 443, Path: "/v1/responses", Addr: public,
			Header: http.Header{"Upgrade": {"h2c"}, "Connection": {"Upgrade"}, "Sec-Websocket-Key": {"dGhlIHNhbXBsZSBub25jZQ=="}}},
			Decision{Rule: "model-api-websocket", Reason: `request asks for a protocol upgrade and rule "model-api-websocket" does not allow it`}},
		{"model host on loopback", &Request{Protocol: "https", Method: "POST", Host: "api.openai.com", Port: 443, Path: "/v1/responses", Addr: mustAddr("127.0.0.1")},
			Decision{Rule: "model-api", Reason: `destination 127.0.0.1 is loopback and rule "model-api" does not allow that network`}},
		{"mcp initialize", call("initialize", ""),
			Decision{Verdict: Allow, Rule: "github-mcp-session", Reason: `rule "github-mcp-session" allows it`}},
		{"mcp read tool", call("tools/call", "get_issue"),
			Decision{Verdict: Allow, Rule: "github-mcp-readonly", Reason: `rule "github-mcp-readonly" allows it`}},
		{"mcp write tool", call("tools/call", "create_pull_request"),
			Decision{Reason: "no rule matched"}},
		{"email as org", &Request{Subject: "org", Protocol: "https", Method: "POST", Host: "api.resend.com", Port: 443, Path: "/emails", Addr: public,
			Placeholders: []Placeholder{{Where: "authorization", Secret: "resend"}}},
			Decision{Verdict: Allow, Rule: "email-send", Reason: `rule "email-send" allows it`, Inject: &Inject{Header: "authorization", Secret: "resend", Format: "Bearer %s"}}},
		{"email as an imp", &Request{Subject: "yuko", Protocol: "https", Method: "POST", Host: "api.resend.com", Port: 443, Path: "/emails", Addr: public},
			Decision{Reason: "no rule matched"}},
		{"resend placeholder to the model", &Request{Subject: "yuko", Protocol: "https", Method: "POST", Host: "api.openai.com", Port: 443, Path: "/v1/responses", Addr: public,
			Placeholders: []Placeholder{{Where: "body", Secret: "resend"}}},
			Decision{Rule: "model-api", Reason: `credential placeholder for "resend" in body and rule "model-api" does not inject it there`}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			checkDecision(t, p.Judge(tt.req), tt.want)
		})
	}
	if d := p.JudgeConnect("api.githubcopilot.com", 443, "yuko"); d.Verdict != Allow {
		t.Errorf("CONNECT to the MCP server: %+v, want allow (terminate)", d)
	}
	if d := p.JudgeConnect("example.com", 443, "yuko"); d.Verdict != Deny {
		t.Errorf("CONNECT to an unlisted host: %+v, want deny", d)
	}
}

func FuzzParse(f *testing.F) {
	seeds, _ := filepath.Glob("testdata/broken/*.json")
	seeds = append(seeds, "../../policies/gateway.json")
	for _, s := range seeds {
		data, err := os.ReadFile(s)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(data)
	}
	addrs := []netip.Addr{mustAddr("93.184.216.34"), mustAddr("127.0.0.1"), mustAddr("10.1.2.3"), mustAddr("2606:4700::1111")}
	reqs := []*Request{
		{Protocol: "https", Method: "POST", Host: "api.openai.com", Port: 443, Path: "/v1/x"},
		{Subject: "org", Protocol: "http", Method: "GET", Host: "127.0.0.1", Port: 80, Path: "/", Addr: mustAddr("127.0.0.1")},
		{Protocol: "https", Method: "POST", Host: "api.githubcopilot.com", Port: 443, Path: "/", MCP: liftOne("tools/call", "get_x")},
		{Subject: "yuko", Protocol: "https", Method: "GET", Host: "api.example.com", Port: 443, Path: "/v1/x", Header: http.Header{"Upgrade": {"websocket"}}},
		{Subject: "org", Protocol: "https", Method: "POST", Host: "api.resend.com", Port: 443, Path: "/emails", Placeholders: []Placeholder{{"authorization", "resend"}},
			MCP: &mcp.Lifted{Calls: []mcp.Call{{Method: "initialize"}, {Method: "tools/call", Tool: "send"}}, Batch: true}},
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		p, err := Parse(data)
		if err != nil {
			if p != nil {
				t.Fatal("policy and error")
			}
			return
		}
		seen := map[string]bool{}
		for _, r := range p.Rules() {
			if !id.ValidIntent(r.Name) || seen[r.Name] {
				t.Fatalf("bad or repeated rule name %q", r.Name)
			}
			seen[r.Name] = true
		}
		for _, r := range reqs {
			d := p.Judge(r)
			if d.Reason == "" {
				t.Fatalf("decision without a reason: %+v", d)
			}
			p.Explain(r)
			connect := p.JudgeConnect(r.Host, r.Port, r.Subject)
			// A deny without an address, at CONNECT or per request, holds
			// for every address: the gateway resolves no refused name.
			for _, a := range addrs {
				withAddr := *r
				withAddr.Addr = a
				if d.Verdict == Deny && !r.Addr.IsValid() && p.Judge(&withAddr).Verdict != Deny {
					t.Fatalf("phase 1 denied %+v, phase 2 with %s allows", r, a)
				}
				if connect.Verdict == Deny && r.Protocol == "https" && p.Judge(&withAddr).Verdict != Deny {
					t.Fatalf("CONNECT denied, request %+v with %s allowed", r, a)
				}
			}
		}
	})
}
