package judge

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"net/netip"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/impyard/impyard/lib/mcp"
)

func mustAddr(s string) netip.Addr { return netip.MustParseAddr(s) }

func liftOne(method, tool string) *mcp.Lifted {
	return &mcp.Lifted{Calls: []mcp.Call{{Method: method, Tool: tool}}}
}

func checkDecision(t *testing.T, got, want Decision) {
	t.Helper()
	if !reflect.DeepEqual(got, want) {
		t.Errorf("\n got: %+v\nwant: %+v", got, want)
	}
}

// base is a request to a public address, so that only the field under
// test decides.
func base() *Request {
	return &Request{
		Subject:  "yuko",
		Protocol: "https",
		Method:   "GET",
		Host:     "api.example.com",
		Port:     443,
		Path:     "/v1/items",
		Header:   http.Header{},
		Addr:     mustAddr("93.184.216.34"),
	}
}

// matchCase is a match field under test: base(), changed by mod, under a
// lone allow rule with match, is allowed when want is.
type matchCase struct {
	name  string
	match string
	mod   func(*Request)
	want  bool
}

func runMatchCases(t *testing.T, tests []matchCase) {
	t.Helper()
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := policy(t, `{"name":"r","match":`+tt.match+`,"verdict":"allow"}`)
			r := base()
			tt.mod(r)
			got := p.Judge(r)
			if (got.Verdict == Allow) != tt.want {
				t.Errorf("match %s, body %.80q: got %+v, want match=%v\ntrace: %+v", tt.match, r.Body, got, tt.want, p.Explain(r))
			}
			if !tt.want && got.Rule != "" {
				t.Errorf("a rule that does not match decided: %+v", got)
			}
		})
	}
}

func TestMatchFields(t *testing.T) {
	runMatchCases(t, []matchCase{
		{"no match field", `{}`, func(r *Request) {}, true},

		{"protocol", `{"protocol":"https"}`, func(r *Request) {}, true},
		{"protocol other", `{"protocol":"https"}`, func(r *Request) { r.Protocol = "http" }, false},
		{"protocol list", `{"protocol":["http","https"]}`, func(r *Request) { r.Protocol = "http" }, true},

		{"host exact", `{"host":"api.example.com"}`, func(r *Request) {}, true},
		{"host other", `{"host":"api.example.com"}`, func(r *Request) { r.Host = "api.example.org" }, false},
		{"host list", `{"host":["a.example.org","api.example.com"]}`, func(r *Request) {}, true},
		{"host written oddly in the rule", `{"host":"API.Example.COM."}`, func(r *Request) {}, true},
		{"host IDNA in the rule", `{"host":"BÜCHER.example"}`, func(r *Request) { r.Host = "xn--bcher-kva.example" }, true},
		{"wildcard subdomain", `{"host":"*.example.com"}`, func(r *Request) {}, true},
		{"wildcard deeper subdomain", `{"host":"*.example.com"}`, func(r *Request) { r.Host = "a.b.example.com" }, true},
		{"wildcard not the apex", `{"host":"*.example.com"}`, func(r *Request) { r.Host = "example.com" }, false},
		{"wildcard label boundary", `{"host":"*.example.com"}`, func(r *Request) { r.Host = "evilexample.com" }, false},
		{"wildcard suffix elsewhere", `{"host":"*.example.com"}`, func(r *Request) { r.Host = "example.com.evil.org" }, false},
		{"star", `{"host":"*"}`, func(r *Request) { r.Host = "anything.org" }, true},
		{"IPv6 host", `{"host":"[2606:4700::1111]"}`, func(r *Request) { r.Host = "2606:4700::1111"; r.Addr = netip.Addr{} }, true},

		{"port", `{"port":443}`, func(r *Request) {}, true},
		{"port other", `{"port":443}`, func(r *Request) { r.Port = 8443 }, false},
		{"port list", `{"port":[80,8443]}`, func(r *Request) { r.Port = 8443 }, true},

		{"method", `{"method":"GET"}`, func(r *Request) {}, true},
		{"method other", `{"method":"POST"}`, func(r *Request) {}, false},
		{"method case-insensitive", `{"method":"post"}`, func(r *Request) { r.Method = "POST" }, true},
		{"method case-insensitive in the request", `{"method":"POST"}`, func(r *Request) { r.Method = "post" }, true},
		{"method list", `{"method":["PUT","GET"]}`, func(r *Request) {}, true},
		// Case folding at each edge of A-Z, on either side.
		{"method A and Z", `{"method":"AZ"}`, func(r *Request) { r.Method = "AZ" }, true},
		{"method a and z in the request", `{"method":"AZ"}`, func(r *Request) { r.Method = "az" }, true},
		{"method a and z in the rule", `{"method":"az"}`, func(r *Request) { r.Method = "AZ" }, true},
		{"method @ is not folded", `{"method":"X` + "`" + `"}`, func(r *Request) { r.Method = "X@" }, false},

		{"path prefix", `{"pathPrefix":"/v1/"}`, func(r *Request) {}, true},
		{"path prefix other", `{"pathPrefix":"/v2/"}`, func(r *Request) {}, false},
		{"path prefix list", `{"pathPrefix":["/v2/","/v1/"]}`, func(r *Request) {}, true},
		{"path prefix is raw", `{"pathPrefix":"/v1/"}`, func(r *Request) { r.Path = "/v1%2Fitems" }, false},
		{"path with dots inside a segment", `{"pathPrefix":"/v1/"}`, func(r *Request) { r.Path = "/v1/a..b/..." }, true},
		{"traversal", `{"pathPrefix":"/v1/"}`, func(r *Request) { r.Path = "/v1/../admin" }, false},
		{"traversal at the end", `{"pathPrefix":"/v1/"}`, func(r *Request) { r.Path = "/v1/.." }, false},
		{"dot segment", `{"pathPrefix":"/v1/"}`, func(r *Request) { r.Path = "/v1/./admin" }, false},
		{"encoded traversal", `{"pathPrefix":"/v1/"}`, func(r *Request) { r.Path = "/v1/%2e%2E/admin" }, false},
		{"half-encoded traversal", `{"pathPrefix":"/v1/"}`, func(r *Request) { r.Path = "/v1/.%2e/admin" }, false},
		{"encoded slash", `{"pathPrefix":"/v1/"}`, func(r *Request) { r.Path = "/v1/a%2f..%2fadmin" }, false},
		{"encoded backslash", `{"pathPrefix":"/v1/"}`, func(r *Request) { r.Path = "/v1/a%5C..%5Cadmin" }, false},
		{"backslash", `{"pathPrefix":"/v1/"}`, func(r *Request) { r.Path = `/v1/..\admin` }, false},
		{"double-encoded traversal", `{"pathPrefix":"/v1/"}`, func(r *Request) { r.Path = "/v1/%252e%252e/admin" }, false},
		{"traversal behind a parameter", `{"pathPrefix":"/v1/"}`, func(r *Request) { r.Path = "/v1/..;/admin" }, false},

		{"header", `{"headerContains":{"x-api":"abc"}}`, func(r *Request) { http.Header(r.Header).Set("X-Api", "xxabcxx") }, true},
		{"header missing", `{"headerContains":{"x-api":"abc"}}`, func(r *Request) {}, false},
		{"header lacks the substring", `{"headerContains":{"x-api":"abc"}}`, func(r *Request) { http.Header(r.Header).Set("X-Api", "ab") }, false},
		{"header substring is case-sensitive", `{"headerContains":{"x-api":"abc"}}`, func(r *Request) { http.Header(r.Header).Set("X-Api", "ABC") }, false},
		{"header presence", `{"headerContains":{"X-API":""}}`, func(r *Request) { http.Header(r.Header).Set("X-Api", "") }, true},
		{"header under a non-canonical key", `{"headerContains":{"x-api":"abc"}}`, func(r *Request) { r.Header["x-api"] = []string{"abc"} }, true},
		{"header key folded at A and Z", `{"headerContains":{"x-az":""}}`, func(r *Request) { r.Header["X-AZ"] = []string{""} }, true},
		{"header key @ is not folded", `{"headerContains":{"x-` + "`" + `":""}}`, func(r *Request) { r.Header["X-@"] = []string{""} }, false},
		{"header any of its values", `{"headerContains":{"x-api":"abc"}}`, func(r *Request) { r.Header["X-Api"] = []string{"no", "abc"} }, true},
		{"headers all must hold", `{"headerContains":{"x-a":"","x-b":""}}`, func(r *Request) { http.Header(r.Header).Set("X-A", "1") }, false},

		{"body size at the limit", `{"maxBodySize":100}`, func(r *Request) { r.BodySize = 100 }, true},
		{"body size over", `{"maxBodySize":100}`, func(r *Request) { r.BodySize = 101 }, false},
		{"body size zero", `{"maxBodySize":0}`, func(r *Request) {}, true},
		{"body size one over zero", `{"maxBodySize":0}`, func(r *Request) { r.BodySize = 1 }, false},

		{"mcp method and tool", `{"mcp":{"method":"tools/call","tool":"get_*"}}`, func(r *Request) { r.MCP = liftOne("tools/call", "get_issue") }, true},
		{"mcp other tool", `{"mcp":{"method":"tools/call","tool":"get_*"}}`, func(r *Request) { r.MCP = liftOne("tools/call", "create_pull_request") }, false},
		{"mcp tool list", `{"mcp":{"tool":["list_*","get_*"]}}`, func(r *Request) { r.MCP = liftOne("tools/call", "list_issues") }, true},
		{"mcp tool glob alternatives", `{"mcp":{"tool":"{get,list}_*"}}`, func(r *Request) { r.MCP = liftOne("tools/call", "list_issues") }, true},
		{"mcp tool glob overlap", `{"mcp":{"tool":"get*get"}}`, func(r *Request) { r.MCP = liftOne("tools/call", "get") }, false},
		{"mcp tool on a call without one", `{"mcp":{"tool":"*"}}`, func(r *Request) { r.MCP = liftOne("initialize", "") }, false},
		{"mcp other method", `{"mcp":{"method":"tools/call"}}`, func(r *Request) { r.MCP = liftOne("tools/list", "") }, false},
		{"mcp method list", `{"mcp":{"method":["initialize","tools/list"]}}`, func(r *Request) { r.MCP = liftOne("tools/list", "") }, true},
		{"mcp method is case-sensitive", `{"mcp":{"method":"tools/call"}}`, func(r *Request) { r.MCP = liftOne("Tools/Call", "") }, false},
		{"mcp empty matches any call", `{"mcp":{}}`, func(r *Request) { r.MCP = liftOne("anything", "") }, true},
		{"mcp needs JSON-RPC", `{"mcp":{}}`, func(r *Request) {}, false},
		{"mcp lifted nothing", `{"mcp":{}}`, func(r *Request) { r.MCP = &mcp.Lifted{} }, false},
		{"no mcp field matches JSON-RPC too", `{"host":"api.example.com"}`, func(r *Request) { r.MCP = liftOne("tools/call", "x") }, true},

		{"network", `{"network":"93.184.216.0/24"}`, func(r *Request) {}, true},
		{"network other", `{"network":["10.0.0.0/8","fd00::/8"]}`, func(r *Request) {}, false},
		{"network IPv4-mapped address", `{"network":"93.184.216.0/24"}`, func(r *Request) { r.Addr = mustAddr("::ffff:93.184.216.34") }, true},

		{"subject", `{"subject":"yuko"}`, func(r *Request) {}, true},
		{"subject other", `{"subject":"org"}`, func(r *Request) {}, false},
		{"subject glob", `{"subject":"y*"}`, func(r *Request) {}, true},
		{"subject list", `{"subject":["org","yuko"]}`, func(r *Request) {}, true},
		{"subject unknown", `{"subject":"*"}`, func(r *Request) { r.Subject = "" }, false},

		{"all fields hold", `{"host":"api.example.com","method":"GET","port":443}`, func(r *Request) {}, true},
		{"one field fails", `{"host":"api.example.com","method":"GET","port":80}`, func(r *Request) {}, false},
	})
}

func TestDecisions(t *testing.T) {
	hostRule := func(name, verdict, extra string) string {
		return `{"name":"` + name + `","match":{"host":"api.example.com"` + extra + `},"verdict":"` + verdict + `"}`
	}
	tests := []struct {
		name   string
		policy *Policy
		mod    func(*Request)
		want   Decision
	}{
		{"default deny", policy(t), func(r *Request) {},
			Decision{Reason: "no rule matched"}},
		{"first match wins: allow", policy(t, hostRule("a", "allow", ""), hostRule("b", "deny", "")), func(r *Request) {},
			Decision{Verdict: Allow, Rule: "a", Reason: `rule "a" allows it`}},
		{"first match wins: deny", policy(t, hostRule("b", "deny", ""), hostRule("a", "allow", "")), func(r *Request) {},
			Decision{Rule: "b", Reason: `rule "b" denies it`}},
		{"a deny carves a hole", policy(t, hostRule("no-admin", "deny", `,"pathPrefix":"/v1/admin"`), hostRule("api", "allow", "")), func(r *Request) { r.Path = "/v1/admin/users" },
			Decision{Rule: "no-admin", Reason: `rule "no-admin" denies it`}},
		{"around the hole", policy(t, hostRule("no-admin", "deny", `,"pathPrefix":"/v1/admin"`), hostRule("api", "allow", "")), func(r *Request) {},
			Decision{Verdict: Allow, Rule: "api", Reason: `rule "api" allows it`}},
		{"traversal has its own reason", policy(t, hostRule("v1", "allow", `,"pathPrefix":"/v1/"`)), func(r *Request) { r.Path = "/v1/%2e%2e/admin" },
			Decision{Reason: "path has a traversal spelling (dot segment, encoded slash or backslash) that no path rule accepts"}},
		{"traversal allowed by a rule without paths", policy(t, hostRule("v1", "allow", `,"pathPrefix":"/v1/"`), hostRule("any", "allow", "")), func(r *Request) { r.Path = "/v1/%2e%2e/admin" },
			Decision{Verdict: Allow, Rule: "any", Reason: `rule "any" allows it`}},
		{"tunnel rule allows a request it sees", policy(t, hostRule("pinned", "tunnel", "")), func(r *Request) { r.Protocol = "http"; r.Port = 80 },
			Decision{Verdict: Allow, Rule: "pinned", Reason: `rule "pinned" allows it`}},

		// Report mode.
		{"report: default deny", parse(t, `{"schema":"impyard.policy/1","mode":"report","rules":[]}`), func(r *Request) {},
			Decision{Verdict: Allow, Reason: "no rule matched", WouldDeny: true}},
		{"report: deny rule", parse(t, `{"schema":"impyard.policy/1","mode":"report","rules":[`+hostRule("b", "deny", "")+`]}`), func(r *Request) {},
			Decision{Verdict: Allow, Rule: "b", Reason: `rule "b" denies it`, WouldDeny: true}},
		{"report: one rule", policy(t, `{"name":"b","match":{"host":"api.example.com"},"verdict":"deny","mode":"report"}`), func(r *Request) {},
			Decision{Verdict: Allow, Rule: "b", Reason: `rule "b" denies it`, WouldDeny: true}},
		{"report: one rule leaves the default deny", policy(t, `{"name":"b","match":{"host":"other.example.com"},"verdict":"deny","mode":"report"}`), func(r *Request) {},
			Decision{Reason: "no rule matched"}},
		{"report: a rule may insist on enforce", parse(t, `{"schema":"impyard.policy/1","mode":"report","rules":[{"name":"b","verdict":"deny","mode":"enforce"}]}`), func(r *Request) {},
			Decision{Rule: "b", Reason: `rule "b" denies it`}},
		{"report: still no open door", parse(t, `{"schema":"impyard.policy/1","mode":"report","rules":[]}`), func(r *Request) { r.Addr = mustAddr("10.1.2.3") },
			Decision{Reason: `destination 10.1.2.3 is private and report mode does not allow that network`}},
		{"report: still no upgrade", parse(t, `{"schema":"impyard.policy/1","mode":"report","rules":[]}`), func(r *Request) { http.Header(r.Header).Set("Upgrade", "websocket") },
			Decision{Reason: `request asks for a protocol upgrade and report mode does not allow it`}},
		{"report: before DNS", parse(t, `{"schema":"impyard.policy/1","mode":"report","rules":[]}`), func(r *Request) { r.Addr = netip.Addr{} },
			Decision{Verdict: Allow, Reason: "no rule matched", WouldDeny: true, NeedsAddr: true}},

		// Subject.
		{"org only", policy(t, hostRule("org-only", "allow", `,"subject":"org"`)), func(r *Request) { r.Subject = "org" },
			Decision{Verdict: Allow, Rule: "org-only", Reason: `rule "org-only" allows it`}},
		{"org only, as an imp", policy(t, hostRule("org-only", "allow", `,"subject":"org"`)), func(r *Request) {},
			Decision{Reason: "no rule matched"}},

		// Upgrades and nested CONNECT.
		{"websocket upgrade", policy(t, hostRule("a", "allow", "")), func(r *Request) {
			http.Header(r.Header).Set("Upgrade", "websocket")
			http.Header(r.Header).Set("Connection", "Upgrade")
		},
			Decision{Rule: "a", Reason: `request asks for a protocol upgrade and rule "a" does not allow it`}},
		{"h2c upgrade by Connection alone", policy(t, hostRule("a", "allow", "")), func(r *Request) { r.Header["connection"] = []string{"keep-alive, UPGRADE"} },
			Decision{Rule: "a", Reason: `request asks for a protocol upgrade and rule "a" does not allow it`}},
		{"upgrade header under a lower-case key", policy(t, hostRule("a", "allow", "")), func(r *Request) { r.Header["upgrade"] = []string{"h2c"} },
			Decision{Rule: "a", Reason: `request asks for a protocol upgrade and rule "a" does not allow it`}},
		{"websocket allowed by name", policy(t, hostRule("ws", "allow", `,"headerContains":{"upgrade":"websocket"}`)), func(r *Request) {
			http.Header(r.Header).Set("Upgrade", "websocket")
			http.Header(r.Header).Set("Connection", "Upgrade")
		},
			Decision{Verdict: Allow, Rule: "ws", Reason: `rule "ws" allows it`}},
		{"nested CONNECT", policy(t, hostRule("a", "allow", "")), func(r *Request) { r.Method = "CONNECT" },
			Decision{Rule: "a", Reason: `request is a nested CONNECT and rule "a" does not allow it`}},
		{"nested CONNECT allowed by name", policy(t, hostRule("a", "allow", `,"method":"CONNECT"`)), func(r *Request) { r.Method = "CONNECT" },
			Decision{Verdict: Allow, Rule: "a", Reason: `rule "a" allows it`}},

		// Refused before any rule.
		{"non-canonical host", policy(t, hostRule("a", "allow", "")), func(r *Request) { r.Host = "API.example.com" },
			Decision{Reason: "host is not in canonical form"}},
		{"numeric host", policy(t, `{"name":"a","verdict":"allow"}`), func(r *Request) { r.Host = "2130706433" },
			Decision{Reason: "host is not in canonical form"}},
		{"unknown protocol", policy(t, `{"name":"a","verdict":"allow"}`), func(r *Request) { r.Protocol = "ftp" },
			Decision{Reason: "protocol is not http or https"}},
		{"no port", policy(t, `{"name":"a","verdict":"allow"}`), func(r *Request) { r.Port = 0 },
			Decision{Reason: "port is not 1..65535"}},
		{"no method", policy(t, `{"name":"a","verdict":"allow"}`), func(r *Request) { r.Method = "" },
			Decision{Reason: "method is not an HTTP token"}},
		{"unknown body size", policy(t, `{"name":"a","verdict":"allow"}`), func(r *Request) { r.BodySize = -1 },
			Decision{Reason: "body size unknown"}},
		{"body not liftable", policy(t, `{"name":"a","verdict":"allow"}`), func(r *Request) { r.MCPError = `JSON-RPC key "Method" must be spelled "method"` },
			Decision{Reason: `JSON-RPC key "Method" must be spelled "method"`}},
		{"address differs from the IP host", policy(t, `{"name":"a","verdict":"allow"}`), func(r *Request) { r.Host = "93.184.216.35" },
			Decision{Reason: "resolved address is not the IP host"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := base()
			tt.mod(r)
			checkDecision(t, tt.policy.Judge(r), tt.want)
		})
	}
}

func TestUnusablePolicy(t *testing.T) {
	var none *Policy
	r := base()
	checkDecision(t, none.Judge(r), Decision{Reason: "policy unusable: no policy loaded"})
	checkDecision(t, Broken(errors.New("gateway.json: boom")).Judge(r), Decision{Reason: "policy unusable: gateway.json: boom"})
	checkDecision(t, Broken(nil).JudgeConnect("api.example.com", 443, "yuko"), Decision{Reason: "policy unusable"})
	if got := none.Explain(r); !reflect.DeepEqual(got, []Trace{{Why: "policy unusable: no policy loaded"}}) {
		t.Errorf("Explain on a nil policy: %+v", got)
	}
	checkDecision(t, policy(t).Judge(nil), Decision{Reason: "no request"})
}

// The two phases: without an address the judge decides what it can; with
// one it decides for good.
func TestNetworkPhases(t *testing.T) {
	loopback := []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}
	p := policy(t,
		`{"name":"no-private","match":{"network":["10.0.0.0/8"]},"verdict":"deny"}`,
		`{"name":"local-upstream","match":{"host":"upstream.test","network":"127.0.0.0/8"},"verdict":"allow"}`,
		`{"name":"public","match":{"host":["*.example.com","upstream.test"]},"verdict":"allow"}`,
		`{"name":"literal","match":{"host":"127.0.0.1"},"verdict":"allow"}`,
	)
	tests := []struct {
		name string
		host string
		addr string
		want Decision
	}{
		{"phase 1: network rule awaits the address", "upstream.test", "",
			Decision{Verdict: Allow, Rule: "local-upstream", Reason: `rule "local-upstream" allows it if the destination address is in its network`, NeedsAddr: true, Networks: loopback}},
		{"phase 2: inside the network", "upstream.test", "127.0.0.1",
			Decision{Verdict: Allow, Rule: "local-upstream", Reason: `rule "local-upstream" allows it`, Networks: loopback}},
		{"phase 2: outside, a later rule", "upstream.test", "93.184.216.34",
			Decision{Verdict: Allow, Rule: "public", Reason: `rule "public" allows it`}},
		{"phase 2: outside, not public", "upstream.test", "192.168.1.10",
			Decision{Rule: "public", Reason: `destination 192.168.1.10 is private and rule "public" does not allow that network`}},
		{"phase 1: deny rule with network waits", "api.example.com", "",
			Decision{Verdict: Allow, Rule: "public", Reason: `rule "public" allows it`, NeedsAddr: true}},
		{"phase 2: deny rule with network holds", "api.example.com", "10.9.9.9",
			Decision{Rule: "no-private", Reason: `rule "no-private" denies it`}},
		{"phase 2: public", "api.example.com", "93.184.216.34",
			Decision{Verdict: Allow, Rule: "public", Reason: `rule "public" allows it`}},
		{"phase 2: name resolving to loopback", "api.example.com", "127.0.0.1",
			Decision{Rule: "public", Reason: `destination 127.0.0.1 is loopback and rule "public" does not allow that network`}},
		{"phase 2: IPv4-mapped loopback", "api.example.com", "::ffff:127.0.0.1",
			Decision{Rule: "public", Reason: `destination 127.0.0.1 is loopback and rule "public" does not allow that network`}},
		{"phase 2: NAT64 loopback", "api.example.com", "64:ff9b::7f00:1",
			Decision{Rule: "public", Reason: `destination 64:ff9b::7f00:1 is nat64 loopback and rule "public" does not allow that network`}},
		{"phase 2: metadata service", "api.example.com", "169.254.169.254",
			Decision{Rule: "public", Reason: `destination 169.254.169.254 is link-local and rule "public" does not allow that network`}},
		{"IP host is its own address", "127.0.0.1", "",
			Decision{Rule: "literal", Reason: `destination 127.0.0.1 is loopback and rule "literal" does not allow that network`}},
		{"phase 1: no rule, no DNS", "other.org", "",
			Decision{Reason: "no rule matched"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := base()
			r.Host = tt.host
			r.Addr = netip.Addr{}
			if tt.addr != "" {
				r.Addr = mustAddr(tt.addr)
			}
			checkDecision(t, p.Judge(r), tt.want)
		})
	}
}

// A deny without an address must stay a deny whatever the address turns
// out to be: the gateway resolves no name the judge refused.
func TestPhaseOneDenyIsFinal(t *testing.T) {
	policies := []*Policy{
		policy(t, `{"name":"d","match":{"network":"93.184.216.0/24"},"verdict":"deny"}`, `{"name":"h","match":{"host":"api.example.com","method":"POST"},"verdict":"allow"}`),
		policy(t, `{"name":"d","match":{"network":"10.0.0.0/8"},"verdict":"deny"}`, `{"name":"x","match":{"host":"api.example.com"},"verdict":"deny"}`, `{"name":"a","match":{"host":"*"},"verdict":"allow"}`),
		policy(t, `{"name":"a","match":{"host":"api.example.com","network":"127.0.0.0/8"},"verdict":"deny"}`),
		policy(t, `{"name":"a","match":{"protocol":"https","host":"api.example.com"},"verdict":"allow","inject":{"header":"authorization","secret":"s"}}`),
	}
	addrs := []string{"127.0.0.1", "10.1.1.1", "93.184.216.34", "::1", "2606:4700::1111", "64:ff9b::a01:101"}
	for i, p := range policies {
		for _, ph := range [][]Placeholder{nil, {{Where: "url", Secret: "s"}}} {
			r := base()
			r.Addr = netip.Addr{}
			r.Placeholders = ph
			if d := p.Judge(r); d.Verdict != Deny {
				continue
			}
			for _, a := range addrs {
				r.Addr = mustAddr(a)
				if d := p.Judge(r); d.Verdict != Deny {
					t.Errorf("policy %d, placeholders %v: phase 1 denied, phase 2 with %s: %+v", i, ph, a, d)
				}
			}
		}
	}
}

func TestPlaceholders(t *testing.T) {
	p := policy(t,
		`{"name":"email","match":{"protocol":"https","host":"api.resend.com"},"verdict":"allow","inject":{"header":"Authorization","secret":"resend","format":"Bearer %s"}}`,
		`{"name":"plain","match":{"host":"api.example.com"},"verdict":"allow"}`,
	)
	inject := &Inject{Header: "authorization", Secret: "resend", Format: "Bearer %s"}
	tests := []struct {
		name string
		host string
		ph   []Placeholder
		want Decision
	}{
		{"none", "api.resend.com", nil,
			Decision{Verdict: Allow, Rule: "email", Reason: `rule "email" allows it`, Inject: inject}},
		{"where the rule injects", "api.resend.com", []Placeholder{{"authorization", "resend"}},
			Decision{Verdict: Allow, Rule: "email", Reason: `rule "email" allows it`, Inject: inject}},
		{"in the URL", "api.resend.com", []Placeholder{{"authorization", "resend"}, {"url", "resend"}},
			Decision{Rule: "email", Reason: `credential placeholder for "resend" in url and rule "email" does not inject it there`}},
		{"another secret", "api.resend.com", []Placeholder{{"authorization", "openai"}},
			Decision{Rule: "email", Reason: `credential placeholder for "openai" in authorization and rule "email" does not inject it there`}},
		{"malformed", "api.resend.com", []Placeholder{{"body", ""}},
			Decision{Rule: "email", Reason: `credential placeholder for "" in body and rule "email" does not inject it there`}},
		{"to a rule that injects nothing", "api.example.com", []Placeholder{{"authorization", "resend"}},
			Decision{Rule: "plain", Reason: `credential placeholder for "resend" in authorization and rule "plain" does not inject it there`}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := base()
			r.Host = tt.host
			r.Placeholders = tt.ph
			checkDecision(t, p.Judge(r), tt.want)
		})
	}
}

func TestFindPlaceholders(t *testing.T) {
	h := http.Header{
		"Authorization": {"Bearer IMPYARD_PLACEHOLDER_resend"},
		"X-Other":       {"a", "IMPYARD_PLACEHOLDER_openai and IMPYARD_PLACEHOLDER_openai"},
		"x-lower":       {"IMPYARD_PLACEHOLDER_Upper"},
	}
	body := []byte(`{"key":"IMPYARD_PLACEHOLDER_resend.IMPYARD_PLACEHOLDER_"}`)
	got := FindPlaceholders(h, "https://api.example.com/x?k=IMPYARD_PLACEHOLDER_a-b_c.d", body)
	want := []Placeholder{
		{"authorization", "resend"},
		{"body", ""},
		{"body", "resend."},
		{"url", "a-b_c.d"},
		{"x-lower", ""},
		{"x-other", "openai"},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("got  %+v\nwant %+v", got, want)
	}
	if got := FindPlaceholders(nil, "https://x/", []byte("impyard_placeholder_x")); got != nil {
		t.Errorf("no placeholders: got %+v", got)
	}
}

// TestPlaceholderSecretEdges checks the characters a placeholder's secret
// name is read with: each edge of a-z and 0-9 is in it, the byte past
// each edge ends it.
func TestPlaceholderSecretEdges(t *testing.T) {
	for _, tc := range []struct{ after, secret string }{
		{"a`", "a"}, {"`a", ""},
		{"z{", "z"}, {"{z", ""},
		{"0/", "0"}, {"/0", ""},
		{"9:", "9"}, {":9", ""},
		{"._-Z", "._-"}, {"@", ""},
	} {
		got := FindPlaceholders(nil, "/x?k=IMPYARD_PLACEHOLDER_"+tc.after, nil)
		if want := []Placeholder{{"url", tc.secret}}; !reflect.DeepEqual(got, want) {
			t.Errorf("after the prefix %q: got %+v, want %+v", tc.after, got, want)
		}
	}

	// A placeholder whose name runs through every edge passes only under
	// the rule that injects that very name, in that header.
	p := policy(t, `{"name":"keyed","match":{"protocol":"https","host":"api.example.com"},"verdict":"allow","inject":{"header":"authorization","secret":"a-z.0_9","format":"Bearer %s"}}`)
	r := base()
	http.Header(r.Header).Set("Authorization", "Bearer IMPYARD_PLACEHOLDER_a-z.0_9")
	r.Placeholders = FindPlaceholders(r.Header, r.Path, nil)
	checkDecision(t, p.Judge(r), Decision{Verdict: Allow, Rule: "keyed", Reason: `rule "keyed" allows it`,
		Inject: &Inject{Header: "authorization", Secret: "a-z.0_9", Format: "Bearer %s"}})
	http.Header(r.Header).Set("Authorization", "Bearer IMPYARD_PLACEHOLDER_a-z.0_9z")
	r.Placeholders = FindPlaceholders(r.Header, r.Path, nil)
	checkDecision(t, p.Judge(r), Decision{Rule: "keyed", Reason: `credential placeholder for "a-z.0_9z" in authorization and rule "keyed" does not inject it there`})
}

func TestBatches(t *testing.T) {
	p := policy(t,
		`{"name":"session","match":{"host":"api.example.com","mcp":{"method":["initialize","tools/list"]}},"verdict":"allow"}`,
		`{"name":"read","match":{"host":"api.example.com","mcp":{"method":"tools/call","tool":["get_*","list_*"]}},"verdict":"allow"}`,
		`{"name":"keyed","match":{"protocol":"https","host":"api.example.com","mcp":{"method":"tools/call","tool":"send_*"}},"verdict":"allow","inject":{"header":"authorization","secret":"k"}}`,
		`{"name":"watch","match":{"host":"api.example.com","mcp":{"method":"tools/call","tool":"watch_*"}},"verdict":"deny","mode":"report"}`,
	)
	tests := []struct {
		name  string
		calls []mcp.Call
		batch bool
		want  Decision
	}{
		{"one call", []mcp.Call{{Method: "tools/call", Tool: "get_issue"}}, false,
			Decision{Verdict: Allow, Rule: "read", Reason: `rule "read" allows it`}},
		{"batch, one rule", []mcp.Call{{Method: "tools/call", Tool: "get_issue"}, {Method: "tools/call", Tool: "list_issues"}}, true,
			Decision{Verdict: Allow, Rule: "read", Reason: `rule "read" allows it`}},
		{"batch, two rules", []mcp.Call{{Method: "initialize"}, {Method: "tools/call", Tool: "get_issue"}}, true,
			Decision{Verdict: Allow, Rule: "session", Reason: "every call in the batch is allowed"}},
		{"batch hiding a write", []mcp.Call{{Method: "tools/list"}, {Method: "tools/call", Tool: "get_issue"}, {Method: "tools/call", Tool: "create_pull_request"}}, true,
			Decision{Reason: `batch call 2 (method "tools/call", tool "create_pull_request"): no rule matched`}},
		{"batch mixing credentials", []mcp.Call{{Method: "tools/call", Tool: "get_issue"}, {Method: "tools/call", Tool: "send_mail"}}, true,
			Decision{Rule: "keyed", Reason: `batch call 1 (method "tools/call", tool "send_mail"): allowed by a rule with another credential than the calls before it`}},
		{"batch with a would-deny", []mcp.Call{{Method: "tools/call", Tool: "get_issue"}, {Method: "tools/call", Tool: "watch_repo"}}, true,
			Decision{Verdict: Allow, Rule: "watch", Reason: `batch call 1 (method "tools/call", tool "watch_repo"): rule "watch" denies it`, WouldDeny: true}},
		{"odd-case method", []mcp.Call{{Method: "Tools/Call"}}, false,
			Decision{Reason: "no rule matched"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := base()
			r.Method = "POST"
			r.MCP = &mcp.Lifted{Calls: tt.calls, Batch: tt.batch}
			checkDecision(t, p.Judge(r), tt.want)
		})
	}
}

// TestBatchNetworksAndCredentials checks what a batch allowed by several
// rules carries: a network only when one rule allowed every call, and a
// credential when every call's rule injects the same one, even if the
// rules are different.
func TestBatchNetworksAndCredentials(t *testing.T) {
	p := policy(t,
		`{"name":"read","match":{"host":"api.example.com","network":"93.184.216.0/24","mcp":{"method":"tools/call","tool":"get_*"}},"verdict":"allow"}`,
		`{"name":"list","match":{"host":"api.example.com","network":"93.184.216.0/24","mcp":{"method":"tools/call","tool":"list_*"}},"verdict":"allow"}`,
		`{"name":"send","match":{"protocol":"https","host":"api.example.com","mcp":{"method":"tools/call","tool":"send_*"}},"verdict":"allow","inject":{"header":"authorization","secret":"k","format":"Bearer %s"}}`,
		`{"name":"post","match":{"protocol":"https","host":"api.example.com","mcp":{"method":"tools/call","tool":"post_*"}},"verdict":"allow","inject":{"header":"authorization","secret":"k","format":"Bearer %s"}}`,
		`{"name":"page","match":{"protocol":"https","host":"api.example.com","mcp":{"method":"tools/call","tool":"page_*"}},"verdict":"allow","inject":{"header":"authorization","secret":"k2","format":"Bearer %s"}}`,
	)
	nets := []netip.Prefix{netip.MustParsePrefix("93.184.216.0/24")}
	k := &Inject{Header: "authorization", Secret: "k", Format: "Bearer %s"}
	tests := []struct {
		name  string
		tools []string
		want  Decision
	}{
		{"one network rule", []string{"get_a", "get_b"},
			Decision{Verdict: Allow, Rule: "read", Reason: `rule "read" allows it`, Networks: nets}},
		{"two network rules", []string{"get_a", "list_b"},
			Decision{Verdict: Allow, Rule: "read", Reason: "every call in the batch is allowed"}},
		{"two rules, one credential", []string{"send_a", "post_b"},
			Decision{Verdict: Allow, Rule: "send", Reason: "every call in the batch is allowed", Inject: k}},
		{"two rules, two credentials", []string{"send_a", "page_b"},
			Decision{Rule: "page", Reason: `batch call 1 (method "tools/call", tool "page_b"): allowed by a rule with another credential than the calls before it`}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := base()
			r.Method = "POST"
			r.MCP = &mcp.Lifted{Batch: true}
			for _, tool := range tt.tools {
				r.MCP.Calls = append(r.MCP.Calls, mcp.Call{Method: "tools/call", Tool: tool})
			}
			checkDecision(t, p.Judge(r), tt.want)
		})
	}
}

// From body to decision, as the gateway does it.
func TestLiftedBodies(t *testing.T) {
	p := policy(t, `{"name":"read","match":{"host":"api.example.com","mcp":{"method":"tools/call","tool":"get_*"}},"verdict":"allow"}`)
	tests := []struct {
		body string
		want Decision
	}{
		{`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"get_issue"}}`,
			Decision{Verdict: Allow, Rule: "read", Reason: `rule "read" allows it`}},
		{`{"jsonrpc":"2.0","id":1,"method":"Tools/Call","params":{"name":"get_issue"}}`,
			Decision{Reason: "no rule matched"}},
		{`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"get_issue","Name":"delete_repo"}}`,
			Decision{Reason: `tools/call params key "Name" must be spelled "name"`}},
		{`[{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"get_issue"}},{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"delete_repo"}}]`,
			Decision{Reason: `batch call 1 (method "tools/call", tool "delete_repo"): no rule matched`}},
	}
	for _, tt := range tests {
		r := base()
		r.Method = "POST"
		lifted, err := mcp.Lift("text/plain", []byte(tt.body))
		if err != nil {
			r.MCPError = err.Error()
		} else {
			r.MCP = &lifted
		}
		checkDecision(t, p.Judge(r), tt.want)
	}
}

func TestJudgeConnect(t *testing.T) {
	loopback := []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}
	tests := []struct {
		name   string
		policy *Policy
		host   string
		addr   string
		want   Decision
	}{
		{"tunnel, phase 1", policy(t, `{"name":"pinned","match":{"host":"pinned.example.com"},"verdict":"tunnel"}`), "pinned.example.com", "",
			Decision{Verdict: Tunnel, Rule: "pinned", Reason: `rule "pinned" tunnels it`, NeedsAddr: true}},
		{"tunnel, public address", policy(t, `{"name":"pinned","match":{"host":"pinned.example.com"},"verdict":"tunnel"}`), "pinned.example.com", "93.184.216.34",
			Decision{Verdict: Tunnel, Rule: "pinned", Reason: `rule "pinned` + `" tunnels it`}},
		{"tunnel to loopback", policy(t, `{"name":"pinned","match":{"host":"pinned.example.com"},"verdict":"tunnel"}`), "pinned.example.com", "127.0.0.1",
			Decision{Rule: "pinned", Reason: `destination 127.0.0.1 is loopback and rule "pinned" does not allow that network`}},
		{"tunnel inside its network", policy(t, `{"name":"local","match":{"host":"pinned.example.com","network":"127.0.0.0/8"},"verdict":"tunnel"}`, `{"name":"rest","match":{"host":"pinned.example.com"},"verdict":"allow"}`), "pinned.example.com", "127.0.0.1",
			Decision{Verdict: Tunnel, Rule: "local", Reason: `rule "local" tunnels it`, Networks: loopback}},
		{"tunnel network, phase 1", policy(t, `{"name":"local","match":{"host":"pinned.example.com","network":"127.0.0.0/8"},"verdict":"tunnel"}`, `{"name":"rest","match":{"host":"pinned.example.com"},"verdict":"allow"}`), "pinned.example.com", "",
			Decision{Verdict: Tunnel, Rule: "local", Reason: `rule "local" allows it if the destination address is in its network`, NeedsAddr: true, Networks: loopback}},
		{"tunnel network, outside it", policy(t, `{"name":"local","match":{"host":"pinned.example.com","network":"127.0.0.0/8"},"verdict":"tunnel"}`, `{"name":"rest","match":{"host":"pinned.example.com"},"verdict":"allow"}`), "pinned.example.com", "93.184.216.34",
			Decision{Verdict: Allow, Rule: "rest", Reason: `rule "rest" allows it`}},
		{"request rules are skipped for the tunnel", policy(t, `{"name":"api","match":{"host":"x.example.com","method":"POST"},"verdict":"allow"}`, `{"name":"pinned","match":{"host":"x.example.com"},"verdict":"tunnel"}`), "x.example.com", "93.184.216.34",
			Decision{Verdict: Tunnel, Rule: "pinned", Reason: `rule "pinned" tunnels it`}},
		{"request rules are skipped for the tunnel, even maxBodySize 0", policy(t, `{"name":"api","match":{"host":"x.example.com","maxBodySize":0},"verdict":"allow"}`, `{"name":"pinned","match":{"host":"x.example.com"},"verdict":"tunnel"}`), "x.example.com", "93.184.216.34",
			Decision{Verdict: Tunnel, Rule: "pinned", Reason: `rule "pinned" tunnels it`}},
		{"terminate: a host rule", policy(t, `{"name":"api","match":{"host":"x.example.com"},"verdict":"allow"}`, `{"name":"pinned","match":{"host":"x.example.com"},"verdict":"tunnel"}`), "x.example.com", "",
			Decision{Verdict: Allow, Rule: "api", Reason: `rule "api" allows it`, NeedsAddr: true}},
		{"terminate: a request rule may match", policy(t, `{"name":"api","match":{"host":"x.example.com","pathPrefix":"/v1/"},"verdict":"allow"}`), "x.example.com", "",
			Decision{Verdict: Allow, Reason: "some rules match requests to this host: each request is judged", NeedsAddr: true}},
		{"terminate: request rule before a host deny", policy(t, `{"name":"api","match":{"host":"x.example.com","method":"GET"},"verdict":"allow"}`, `{"name":"no","match":{"host":"x.example.com"},"verdict":"deny"}`), "x.example.com", "",
			Decision{Verdict: Allow, Reason: "some rules match requests to this host: each request is judged", NeedsAddr: true}},
		{"deny: host deny rule", policy(t, `{"name":"no","match":{"host":"x.example.com"},"verdict":"deny"}`, `{"name":"api","match":{"host":"x.example.com"},"verdict":"allow"}`), "x.example.com", "",
			Decision{Rule: "no", Reason: `rule "no" denies it`}},
		{"deny: only request deny rules", policy(t, `{"name":"no","match":{"host":"x.example.com","method":"POST"},"verdict":"deny"}`), "x.example.com", "",
			Decision{Reason: "no rule matched"}},
		{"deny: no rule for the host", policy(t, `{"name":"api","match":{"host":"x.example.com"},"verdict":"allow"}`), "y.example.com", "",
			Decision{Reason: "no rule matched"}},
		{"deny: http-only rule", policy(t, `{"name":"api","match":{"host":"x.example.com","protocol":"http"},"verdict":"allow"}`), "x.example.com", "",
			Decision{Reason: "no rule matched"}},
		{"deny: other subject", policy(t, `{"name":"org","match":{"host":"x.example.com","subject":"org"},"verdict":"allow"}`), "x.example.com", "",
			Decision{Reason: "no rule matched"}},
		{"report: terminate and judge", parse(t, `{"schema":"impyard.policy/1","mode":"report","rules":[]}`), "x.example.com", "",
			Decision{Verdict: Allow, Reason: "no rule matched", WouldDeny: true, NeedsAddr: true}},
		{"not canonical", policy(t, `{"name":"api","verdict":"allow"}`), "X.example.com", "",
			Decision{Reason: "host is not in canonical form"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var d Decision
			if tt.addr == "" {
				d = tt.policy.JudgeConnect(tt.host, 443, "yuko")
			} else {
				d = tt.policy.JudgeConnectAddr(tt.host, 443, "yuko", mustAddr(tt.addr))
			}
			checkDecision(t, d, tt.want)
		})
	}
}

func TestExplain(t *testing.T) {
	p := policy(t,
		`{"name":"model","match":{"host":"api.openai.com","method":"POST"},"verdict":"allow"}`,
		`{"name":"post-only","match":{"host":"*.example.com","method":["POST","PUT"]},"verdict":"allow"}`,
		`{"name":"v2","match":{"pathPrefix":["/v2/"]},"verdict":"allow"}`,
		`{"name":"keyed","match":{"headerContains":{"x-key":"k1"}},"verdict":"allow"}`,
		`{"name":"tools","match":{"mcp":{"tool":"get_*"}},"verdict":"allow"}`,
		`{"name":"big","match":{"maxBodySize":10},"verdict":"allow"}`,
		`{"name":"org","match":{"subject":"org"},"verdict":"allow"}`,
		`{"name":"private","match":{"network":"10.0.0.0/8"},"verdict":"deny"}`,
		`{"name":"local","match":{"network":"127.0.0.0/8"},"verdict":"allow"}`,
		`{"name":"rest","match":{"port":443},"verdict":"deny"}`,
		`{"name":"never","verdict":"allow"}`,
	)
	r := base()
	r.BodySize = 20
	r.Addr = netip.Addr{}
	want := []Trace{
		{Rule: "model", Why: "host api.example.com not in [api.openai.com]"},
		{Rule: "post-only", Why: "method GET not in [POST PUT]"},
		{Rule: "v2", Why: `path "/v1/items" has no prefix in [/v2/]`},
		{Rule: "keyed", Why: `no header x-key containing "k1"`},
		{Rule: "tools", Why: "not a JSON-RPC request"},
		{Rule: "big", Why: "body size 20 over 10"},
		{Rule: "org", Why: `subject "yuko" not in [org]`},
		{Rule: "private", Why: "deny rule for network [10.0.0.0/8] waits for the destination address"},
		{Rule: "local", Matched: true, Why: "matches if the destination address is in [127.0.0.0/8]"},
	}
	if got := p.Explain(r); !reflect.DeepEqual(got, want) {
		t.Errorf("Explain:\n got: %+v\nwant: %+v", got, want)
	}
	r.Addr = mustAddr("93.184.216.34")
	got := p.Explain(r)
	want = append(want[:7],
		Trace{Rule: "private", Why: "destination 93.184.216.34 not in [10.0.0.0/8]"},
		Trace{Rule: "local", Why: "destination 93.184.216.34 not in [127.0.0.0/8]"},
		Trace{Rule: "rest", Matched: true, Why: "matches: deny"},
	)
	if !reflect.DeepEqual(got, want) {
		t.Errorf("Explain with an address:\n got: %+v\nwant: %+v", got, want)
	}

	r.MCP = &mcp.Lifted{Calls: []mcp.Call{{Method: "initialize"}, {Method: "tools/call", Tool: "get_x"}}, Batch: true}
	got = p.Explain(r)
	if len(got) != 15 || got[4].Why != `batch call 0 (method "initialize"): JSON-RPC method "initialize" calls no tool, and the rule names tools [get_*]` ||
		got[14] != (Trace{Rule: "tools", Matched: true, Why: `batch call 1 (method "tools/call", tool "get_x"): matches: allow`}) {
		t.Errorf("Explain of a batch: %+v", got)
	}

	r = base()
	r.Subject = ""
	r.Path = "/v2/../x"
	r.BodySize = 20
	got = p.Explain(r)
	if got[2].Why != `path "/v2/../x" has a traversal spelling` || got[6].Why != "no subject, and the rule names subjects [org]" {
		t.Errorf("Explain: %+v", got)
	}
}

func TestVerdictString(t *testing.T) {
	for v, want := range map[Verdict]string{Deny: "deny", Allow: "allow", Tunnel: "tunnel", 7: "verdict(7)"} {
		if got := v.String(); got != want {
			t.Errorf("%d.String() = %q, want %q", int(v), got, want)
		}
	}
	var d Decision
	if d.Verdict != Deny {
		t.Error("the zero Decision does not deny")
	}
}

// TestWildcardNeedsALabel checks that *.example.com covers a name with
// at least one label before .example.com and never the suffix itself.
// Judge refuses a host like ".example.com" before any rule (it is not
// canonical); hostMatch holds the line on its own too, so that a caller
// that skips that check still cannot match the bare suffix.
func TestWildcardNeedsALabel(t *testing.T) {
	p := policy(t, `{"name":"w","match":{"host":"*.example.com"},"verdict":"allow"}`)
	m := &p.rules[0].m
	for host, want := range map[string]bool{
		"a.example.com":  true,
		".example.com":   false,
		"example.com":    false,
		"xexample.com":   false,
		"a.example.com.": false,
	} {
		if got := m.hostMatch(host); got != want {
			t.Errorf("hostMatch(%q) = %v, want %v", host, got, want)
		}
	}
	r := base()
	r.Host = ".example.com"
	checkDecision(t, p.Judge(r), Decision{Reason: "host is not in canonical form"})
}

// TestASCIIEqualFold checks the fold at each edge of A-Z and the byte
// past each edge, in both argument positions.
func TestASCIIEqualFold(t *testing.T) {
	for _, tc := range []struct {
		a, b string
		want bool
	}{
		{"A", "a", true}, {"Z", "z", true}, {"AZ", "az", true}, {"AZ", "AZ", true}, {"az", "az", true},
		{"@", "`", false}, {"[", "{", false},
		{"A", "b", false}, {"Z", "y", false}, {"a", "ab", false},
	} {
		for _, ab := range [][2]string{{tc.a, tc.b}, {tc.b, tc.a}} {
			if got := asciiEqualFold(ab[0], ab[1]); got != tc.want {
				t.Errorf("asciiEqualFold(%q, %q) = %v, want %v", ab[0], ab[1], got, tc.want)
			}
		}
	}
}

func TestTraversal(t *testing.T) {
	for p, want := range map[string]bool{
		"/":              false,
		"/v1/items":      false,
		"/v1/a.b/c..d/":  false,
		"/v1/.../x":      false,
		"/v1/%41%42":     false,
		"/v1/%25":        false,
		"/v1/100%25off":  false,
		"/v1/.":          true,
		"/v1/..":         true,
		"/v1/%2E":        true,
		"/v1/%2e./":      true,
		"/v1/.%2E;x=1/":  true,
		"/v1/a%2Fb":      true,
		"/v1/a%5cb":      true,
		"/v1/%252F":      true,
		"/v1/%252e%252e": true,
		`/v1\x`:          true,
		"/v1/%":          false,
		"/v1/%2":         false,
	} {
		if got := traversal(p); got != want {
			t.Errorf("traversal(%q) = %v, want %v", p, got, want)
		}
	}
}

func TestRequestLevelFieldsListed(t *testing.T) {
	// Every field that only a request shows must keep a rule from being
	// a tunnel rule; this catches a field added to one list but not the
	// other.
	for _, m := range []string{`{"method":"GET"}`, `{"pathPrefix":"/"}`, `{"headerContains":{"a":""}}`, `{"maxBodySize":1}`, `{"maxBodySize":0}`, `{"mcp":{}}`} {
		_, err := Parse([]byte(`{"schema":"impyard.policy/1","rules":[{"name":"t","match":` + m + `,"verdict":"tunnel"}]}`))
		if err == nil || !strings.Contains(err.Error(), "a tunnel rule can match only") {
			t.Errorf("tunnel rule with %s: %v", m, err)
		}
	}
}

// TestPhaseInvariants checks, over many small policies built from
// typical rules, what the gateway relies on when it skips work: a deny
// without an address holds for every address, a CONNECT deny holds for
// every request through that CONNECT, and no allow reaches a special
// address outside the deciding rule's network.
func TestPhaseInvariants(t *testing.T) {
	frags := []string{
		`"match":{"host":"api.example.com"},"verdict":"allow"`,
		`"match":{"host":"*.example.com","method":"POST"},"verdict":"allow"`,
		`"match":{"network":"127.0.0.0/8"},"verdict":"allow"`,
		`"match":{"network":"10.0.0.0/8"},"verdict":"deny"`,
		`"match":{"host":"api.example.com","network":"93.184.216.0/24"},"verdict":"deny"`,
		`"match":{"host":"api.example.com","network":["127.0.0.0/8","93.184.216.0/24"]},"verdict":"tunnel"`,
		`"match":{"host":"api.example.com"},"verdict":"tunnel"`,
		`"match":{"host":"api.example.com"},"verdict":"deny"`,
		`"match":{"host":"api.example.com","pathPrefix":"/v1/"},"verdict":"deny","mode":"report"`,
		`"match":{"protocol":"https","subject":"org"},"verdict":"allow","inject":{"header":"authorization","secret":"k"}`,
		`"match":{"mcp":{"tool":"get_*"}},"verdict":"allow"`,
		`"match":{"protocol":"https","mcp":{"method":"initialize"},"network":"127.0.0.0/8"},"verdict":"allow","inject":{"header":"authorization","secret":"k"}`,
		`"match":{"headerContains":{"upgrade":""}},"verdict":"allow"`,
		`"match":{"port":8443,"network":"10.0.0.0/8"},"verdict":"allow"`,
		`"match":{"protocol":"http"},"verdict":"allow"`,
		`"match":{"network":"::/0"},"verdict":"deny"`,
		`"match":{"subject":"y*","maxBodySize":10},"verdict":"deny"`,
	}
	addrs := []netip.Addr{mustAddr("127.0.0.1"), mustAddr("10.1.1.1"), mustAddr("93.184.216.34"), mustAddr("8.8.8.8"), mustAddr("::1")}
	var reqs []*Request
	for _, subject := range []string{"", "yuko", "org"} {
		for _, method := range []string{"GET", "POST"} {
			for _, lifted := range []*mcp.Lifted{nil, liftOne("tools/call", "get_x"), liftOne("initialize", ""), {Calls: []mcp.Call{{Method: "initialize"}, {Method: "tools/call", Tool: "get_x"}}, Batch: true}} {
				for _, ph := range [][]Placeholder{nil, {{"authorization", "k"}}} {
					for _, upgrade := range []bool{false, true} {
						for _, port := range []int{443, 8443} {
							r := &Request{Subject: subject, Protocol: "https", Method: method, Host: "api.example.com", Port: port, Path: "/v1/x", BodySize: 20, Header: http.Header{}, MCP: lifted, Placeholders: ph}
							if upgrade {
								http.Header(r.Header).Set("Upgrade", "websocket")
							}
							reqs = append(reqs, r)
						}
					}
				}
			}
		}
	}
	rng := rand.New(rand.NewPCG(1, 2))
	for n := range 400 {
		var rules []string
		for i := range 1 + rng.IntN(5) {
			rules = append(rules, fmt.Sprintf(`{"name":"r%d",%s}`, i, frags[rng.IntN(len(frags))]))
		}
		mode := []string{"enforce", "report"}[rng.IntN(2)]
		p := parse(t, `{"schema":"impyard.policy/1","mode":"`+mode+`","rules":[`+strings.Join(rules, ",")+`]}`)
		for _, port := range []int{443, 8443} {
			connect := p.JudgeConnect("api.example.com", port, "yuko")
			for _, a := range addrs {
				c2 := p.JudgeConnectAddr("api.example.com", port, "yuko", a)
				if connect.Verdict == Deny && c2.Verdict != Deny {
					t.Fatalf("policy %d %v: CONNECT denied, with %s: %+v", n, rules, a, c2)
				}
				if class, special := Special(a); special && c2.Verdict == Tunnel && !containsAddr(c2.Networks, a) {
					t.Fatalf("policy %d %v: tunnel to %s address %s: %+v", n, rules, class, a, c2)
				}
			}
		}
		for _, r := range reqs {
			phase1 := p.Judge(r)
			connect := p.JudgeConnect(r.Host, r.Port, r.Subject)
			for _, a := range addrs {
				withAddr := *r
				withAddr.Addr = a
				d := p.Judge(&withAddr)
				switch {
				case phase1.Verdict == Deny && d.Verdict != Deny:
					t.Fatalf("policy %d %v, %+v: phase 1 denied (%s), with %s: %+v", n, rules, r, phase1.Reason, a, d)
				case connect.Verdict == Deny && d.Verdict != Deny:
					t.Fatalf("policy %d %v, %+v: CONNECT denied (%s), with %s: %+v", n, rules, r, connect.Reason, a, d)
				case d.Verdict != Deny && d.NeedsAddr:
					t.Fatalf("policy %d %v, %+v with %s: NeedsAddr after the address: %+v", n, rules, r, a, d)
				}
				if class, special := Special(a); special && d.Verdict != Deny && (r.MCP == nil || !r.MCP.Batch) {
					if !containsAddr(d.Networks, a) {
						t.Fatalf("policy %d %v, %+v: allowed %s address %s outside the rule's network: %+v", n, rules, r, class, a, d)
					}
				}
			}
			if phase1.Verdict != Deny && !phase1.NeedsAddr {
				t.Fatalf("policy %d %v, %+v: allowed a named host without asking for its address: %+v", n, rules, r, phase1)
			}
		}
	}
}

func TestMeterOfTheDecidingRule(t *testing.T) {
	p := policy(t,
		`{"name": "openai", "match": {"protocol": "https", "host": "api.openai.com"}, "verdict": "allow", "meter": "openai"}`,
		`{"name": "anthropic", "match": {"protocol": "https", "host": "api.anthropic.com"}, "verdict": "allow", "meter": "anthropic"}`,
		`{"name": "plain", "match": {"protocol": "https", "host": "example.com"}, "verdict": "allow"}`)
	for host, want := range map[string]string{"api.openai.com": MeterOpenAI, "api.anthropic.com": MeterAnthropic, "example.com": ""} {
		d := p.Judge(&Request{Protocol: "https", Method: "POST", Host: host, Port: 443, Addr: netip.MustParseAddr("93.184.216.34")})
		if d.Verdict != Allow || d.Meter != want {
			t.Errorf("%s: %v meter %q, want allow meter %q", host, d.Verdict, d.Meter, want)
		}
	}
}

// A websocket rule lets a WebSocket handshake through, and only that:
// another upgrade, or a WebSocket upgrade listing another protocol too,
// stays denied; without the key a WebSocket is denied as before.
func TestWebSocketRule(t *testing.T) {
	p := policy(t,
		`{"name": "responses", "match": {"protocol": "https", "host": "api.openai.com", "pathPrefix": "/v1/responses"}, "verdict": "allow", "websocket": true, "meter": "openai", "timeout": "600s"}`,
		`{"name": "plain", "match": {"protocol": "https", "host": "api.example.com"}, "verdict": "allow", "websocket": false}`)
	ws := func(host, method string, h http.Header) Decision {
		return p.Judge(&Request{Protocol: "https", Method: method, Host: host, Port: 443, Path: "/v1/responses", Header: h, Addr: mustAddr("93.184.216.34")})
	}
	up := http.Header{"Upgrade": {"websocket"}, "Connection": {"Upgrade"}}
	if d := ws("api.openai.com", "GET", up); d.Verdict != Allow || !d.WebSocket || d.Meter != MeterOpenAI || d.Timeout != 600*time.Second {
		t.Errorf("websocket under a websocket rule: %+v", d)
	}
	if d := ws("api.openai.com", "POST", http.Header{}); d.Verdict != Allow || d.WebSocket {
		t.Errorf("a plain request under a websocket rule: %+v", d)
	}
	for name, tc := range map[string]struct {
		host, method string
		h            http.Header
	}{
		"h2c":                  {"api.openai.com", "GET", http.Header{"Upgrade": {"h2c"}, "Connection": {"Upgrade"}}},
		"two protocols":        {"api.openai.com", "GET", http.Header{"Upgrade": {"websocket, h2c"}, "Connection": {"Upgrade"}}},
		"two Upgrade fields":   {"api.openai.com", "GET", http.Header{"Upgrade": {"websocket", "websocket"}}},
		"POST":                 {"api.openai.com", "POST", up},
		"websocket: false":     {"api.example.com", "GET", up},
		"connection upgrade":   {"api.openai.com", "GET", http.Header{"Connection": {"upgrade"}}},
		"lower-case field key": {"api.openai.com", "GET", http.Header{"upgrade": {"h2c"}}},
	} {
		if d := ws(tc.host, tc.method, tc.h); d.Verdict != Deny || d.WebSocket || !strings.Contains(d.Reason, "protocol upgrade") {
			t.Errorf("%s: %+v, want denied as an upgrade", name, d)
		}
	}
}

// A rule's timeout rides on its decisions; other rules have none.
func TestRuleTimeout(t *testing.T) {
	p := policy(t,
		`{"name": "slow", "match": {"protocol": "https", "host": "api.anthropic.com"}, "verdict": "allow", "meter": "anthropic", "timeout": "10m"}`,
		`{"name": "near", "match": {"host": "localhost", "network": "127.0.0.0/8"}, "verdict": "allow", "timeout": "1.5s"}`,
		`{"name": "plain", "match": {"protocol": "https", "host": "example.com"}, "verdict": "allow"}`)
	for host, want := range map[string]time.Duration{"api.anthropic.com": 10 * time.Minute, "localhost": 1500 * time.Millisecond, "example.com": 0} {
		r := &Request{Protocol: "https", Method: "POST", Host: host, Port: 443}
		d := p.Judge(r)
		if d.Timeout != want {
			t.Errorf("%s before the address: timeout %v, want %v", host, d.Timeout, want)
		}
		r.Addr = mustAddr("93.184.216.34")
		if host == "localhost" {
			r.Addr = mustAddr("127.0.0.1")
		}
		if d := p.Judge(r); d.Verdict != Allow || d.Timeout != want {
			t.Errorf("%s: %v timeout %v, want allow %v", host, d.Verdict, d.Timeout, want)
		}
	}
}

// Credentials holds for an anonymous request that only a rule scoped to
// a subject would allow, and for nothing else.
func TestCredentials(t *testing.T) {
	p := policy(t,
		`{"name": "open", "match": {"protocol": "https", "host": "example.com"}, "verdict": "allow"}`,
		`{"name": "git", "match": {"host": "git.example.com", "pathPrefix": "/repo.git/", "subject": "yuko", "network": "10.0.0.0/8"}, "verdict": "allow"}`,
		`{"name": "deny-scoped", "match": {"host": "secret.example.com", "subject": "*"}, "verdict": "deny"}`,
		`{"name": "pipe", "match": {"host": "pinned.example.com", "subject": "yuko"}, "verdict": "tunnel"}`)
	req := func(subject, method, host, path string) *Request {
		return &Request{Subject: subject, Protocol: "http", Method: method, Host: host, Port: 80, Path: path, Header: http.Header{}}
	}
	for _, tc := range []struct {
		r    *Request
		want bool
	}{
		{req("", "GET", "git.example.com", "/repo.git/info/refs"), true},
		{req("", "CONNECT", "git.example.com", ""), true},
		{req("", "CONNECT", "pinned.example.com", ""), true},
		{req("", "GET", "git.example.com", "/other.git/info/refs"), false},
		{req("yuko", "GET", "git.example.com", "/repo.git/info/refs"), false},
		{req("", "GET", "secret.example.com", "/"), false},
		{req("", "GET", "example.com", "/"), false},
		{req("", "GET", "Git.Example.com", "/repo.git/"), false},
	} {
		if got := p.Credentials(tc.r); got != tc.want {
			t.Errorf("%s %s%s subject %q: Credentials %v, want %v", tc.r.Method, tc.r.Host, tc.r.Path, tc.r.Subject, got, tc.want)
		}
	}
	if (*Policy)(nil).Credentials(req("", "GET", "git.example.com", "/repo.git/")) {
		t.Error("a nil policy asks for credentials")
	}
}

func TestGeminiMeter(t *testing.T) {
	p := policy(t, `{"name": "gemini", "match": {"protocol": "https", "host": "generativelanguage.googleapis.com"}, "verdict": "allow", "meter": "gemini"}`)
	d := p.Judge(&Request{Protocol: "https", Method: "POST", Host: "generativelanguage.googleapis.com", Port: 443, Addr: mustAddr("142.250.74.10")})
	if d.Verdict != Allow || d.Meter != MeterGemini {
		t.Errorf("%+v, want allow metered by gemini", d)
	}
}
