package judge

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/impyard/impyard/lib/mcp"
)

// jsonReq is base() as a JSON POST carrying body.
func jsonReq(body string) func(*Request) {
	return func(r *Request) {
		r.Method = "POST"
		http.Header(r.Header).Set("Content-Type", "application/json")
		r.Body = []byte(body)
		r.BodySize = int64(len(body))
	}
}

// call lifts one tools/call as lib/mcp does, arguments included.
func call(t *testing.T, tool, args string) *mcp.Lifted {
	t.Helper()
	body := `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"` + tool + `"`
	if args != "" {
		body += `,"arguments":` + args
	}
	l, err := mcp.Lift("application/json", []byte(body+"}}"))
	if err != nil {
		t.Fatalf("lifting %s: %v", body, err)
	}
	return &l
}

func TestQueryMatch(t *testing.T) {
	tests := []struct {
		name  string
		match string
		query string
		want  bool
	}{
		{"named parameter", `{"query":{"q":"cats*"}}`, "q=cats+and+dogs", true},
		{"plus is a space", `{"query":{"q":"cats and dogs"}}`, "q=cats+and+dogs", true},
		{"percent-decoded once", `{"query":{"q":"a/b"}}`, "q=a%2Fb", true},
		{"encoded name", `{"query":{"q":"x"}}`, "%71=x", true},
		{"value not matching", `{"query":{"q":"cats*"}}`, "q=dogs", false},
		{"missing parameter", `{"query":{"q":"*"}}`, "p=1", false},
		{"empty query", `{"query":{"q":"*"}}`, "", false},
		{"empty value matches star", `{"query":{"q":"*"}}`, "q=", true},
		{"name without =", `{"query":{"q":"*"}}`, "q", true},
		{"repeated name, every value must match", `{"query":{"q":"cats*"}}`, "q=cats&q=dogs", false},
		{"repeated name, all match", `{"query":{"q":"cats*"}}`, "q=cats&q=catsup", true},
		{"glob list", `{"query":{"sort":["asc","desc"]}}`, "sort=desc", true},
		{"null means absent", `{"query":{"q":"*","token":null}}`, "q=a", true},
		{"null refuses present", `{"query":{"q":"*","token":null}}`, "q=a&token=s3cret", false},
		{"null refuses present without value", `{"query":{"token":null}}`, "token", false},
		{"null refuses encoded name", `{"query":{"token":null}}`, "%74oken=x", false},
		{"names are case-sensitive", `{"query":{"token":null}}`, "Token=x", true},
		{"other parameters allowed", `{"query":{"q":"*"}}`, "q=a&page=2", true},
		{"queryExact refuses others", `{"query":{"q":"*"},"queryExact":true}`, "q=a&page=2", false},
		{"queryExact with only named", `{"query":{"q":"*","page":"[0-9]"},"queryExact":true}`, "page=2&q=a", true},
		{"queryExact alone: no query at all", `{"queryExact":true}`, "", true},
		{"queryExact alone refuses any", `{"queryExact":true}`, "a=1", false},
		{"empty pieces skipped", `{"query":{"q":"a"},"queryExact":true}`, "&&q=a&", true},

		// Hostile spellings: all unreadable, so no match.
		{"%00 in value", `{"query":{"q":"a*"}}`, "q=a%00b", false},
		{"%00 in name hides token", `{"query":{"token":null}}`, "token%00=x", false},
		{"raw control character", `{"query":{"q":"*"}}`, "q=a\x01", false},
		{"double-encoded value", `{"query":{"q":"*"}}`, "q=%2541", false},
		{"double-encoded name", `{"query":{"token":null}}`, "%2574oken=x", false},
		{"malformed escape", `{"query":{"q":"*"}}`, "q=%zz", false},
		{"lone percent", `{"query":{"q":"*"}}`, "q=100%", false},
		{"semicolon separator", `{"query":{"token":null}}`, "q=a;token=x", false},
		{"encoded semicolon is a character", `{"query":{"q":"a;b"}}`, "q=a%3Bb", true},
		{"percent that is not an escape after decoding", `{"query":{"q":"100%"}}`, "q=100%25", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := policy(t, `{"name":"r","match":`+tt.match+`,"verdict":"allow"}`)
			r := base()
			r.Query = tt.query
			got := p.Judge(r)
			if (got.Verdict == Allow) != tt.want {
				t.Errorf("match %s, query %q: got %+v, want match=%v\ntrace: %+v", tt.match, tt.query, got, tt.want, p.Explain(r))
			}
		})
	}
}

func TestJSONMatch(t *testing.T) {
	issue := `{"title":"crash","labels":["bug","p1"],"milestone":3,"draft":false,"assignee":null,"meta":{"a/b":"slash","m~n":"tilde"}}`
	runMatchCases(t, []matchCase{
		{"string glob", `{"json":{"/title":"cr*"}}`, jsonReq(issue), true},
		{"string glob fails", `{"json":{"/title":"x*"}}`, jsonReq(issue), false},
		{"number equal", `{"json":{"/milestone":3}}`, jsonReq(issue), true},
		{"number by value", `{"json":{"/milestone":3.0}}`, jsonReq(issue), true},
		{"number written otherwise in the body", `{"json":{"/milestone":3}}`, jsonReq(`{"milestone":3e0}`), true},
		{"number other", `{"json":{"/milestone":4}}`, jsonReq(issue), false},
		{"big integers exact", `{"json":{"/n":9007199254740993}}`, jsonReq(`{"n":9007199254740992}`), false},
		{"boolean", `{"json":{"/draft":false}}`, jsonReq(issue), true},
		{"boolean other", `{"json":{"/draft":true}}`, jsonReq(issue), false},
		{"null", `{"json":{"/assignee":null}}`, jsonReq(issue), true},
		{"null is not absent", `{"json":{"/nothing":null}}`, jsonReq(issue), false},
		{"any of", `{"json":{"/milestone":[1,2,3]}}`, jsonReq(issue), true},
		{"any of mixed", `{"json":{"/title":["bug*",true,"crash"]}}`, jsonReq(issue), true},
		{"string is not a number", `{"json":{"/milestone":"3"}}`, jsonReq(issue), false},
		{"number is not a string", `{"json":{"/title":"*"}}`, jsonReq(`{"title":7}`), false},
		{"glob does not match an object", `{"json":{"/meta":"*"}}`, jsonReq(issue), false},
		{"pointer into an array", `{"json":{"/labels/0":"bug"}}`, jsonReq(issue), true},
		{"pointer into an array, other index", `{"json":{"/labels/1":"bug"}}`, jsonReq(issue), false},
		{"array index past the end", `{"json":{"/labels/2":"*"}}`, jsonReq(issue), false},
		{"array index with a leading zero", `{"json":{"/labels/00":"bug"}}`, jsonReq(issue), false},
		{"array index -", `{"json":{"/labels/-":"*"}}`, jsonReq(issue), false},
		{"escaped slash in pointer", `{"json":{"/meta/a~1b":"slash"}}`, jsonReq(issue), true},
		{"escaped tilde in pointer", `{"json":{"/meta/m~0n":"tilde"}}`, jsonReq(issue), true},
		{"whole document", `{"json":{"":7}}`, jsonReq(`7`), true},
		{"escaped key in the body", `{"json":{"/title":"crash"}}`, jsonReq(`{"\u0074itle":"crash"}`), true},
		{"escaped value in the body", `{"json":{"/title":"a\"b"}}`, jsonReq(`{"title":"a\u0022b"}`), true},
		{"jsonAbsent", `{"jsonAbsent":["/tools"]}`, jsonReq(`{"model":"m"}`), true},
		{"jsonAbsent present", `{"jsonAbsent":["/tools"]}`, jsonReq(`{"model":"m","tools":[]}`), false},
		{"jsonAbsent null is present", `{"jsonAbsent":["/tools"]}`, jsonReq(`{"tools":null}`), false},
		{"both kinds", `{"json":{"/model":"gpt-*"},"jsonAbsent":["/tools"]}`, jsonReq(`{"model":"gpt-5"}`), true},
		{"content type +json", `{"json":{"/a":1}}`, func(r *Request) {
			jsonReq(`{"a":1}`)(r)
			http.Header(r.Header).Set("Content-Type", "application/vnd.api+json; charset=utf-8")
		}, true},

		// Hostile or unreadable bodies match nothing.
		{"duplicate key on the path", `{"json":{"/title":"crash"}}`, jsonReq(`{"title":"crash","title":"rm -rf"}`), false},
		{"duplicate key, allowed value last", `{"json":{"/title":"crash"}}`, jsonReq(`{"title":"rm -rf","title":"crash"}`), false},
		{"duplicate key, same value twice", `{"json":{"/title":"crash"}}`, jsonReq(`{"title":"crash","title":"crash"}`), false},
		{"duplicate key off every path is no matter", `{"json":{"/title":"crash"}}`, jsonReq(`{"title":"crash","x":1,"x":2}`), true},
		{"duplicate key spelled with an escape", `{"json":{"/title":"crash"}}`, jsonReq(`{"\u0074itle":"rm","title":"crash"}`), false},
		{"duplicate key deeper", `{"json":{"/meta/x":1}}`, jsonReq(`{"meta":{"x":2,"x":1}}`), false},
		{"duplicate parent", `{"json":{"/meta/x":1}}`, jsonReq(`{"meta":{"x":2},"meta":{"x":1}}`), false},
		{"jsonAbsent with duplicate", `{"jsonAbsent":["/tools"]}`, jsonReq(`{"tools":1,"tools":2}`), false},
		{"not JSON", `{"jsonAbsent":["/tools"]}`, jsonReq(`{"model":`), false},
		{"trailing garbage", `{"json":{"/a":1}}`, jsonReq(`{"a":1} {"a":2}`), false},
		{"bad escape", `{"json":{"/a":1}}`, jsonReq(`{"a":1,"b":"\x"}`), false},
		{"leading zero number", `{"json":{"/a":1}}`, jsonReq(`{"a":01}`), false},
		{"raw control in string", `{"json":{"/a":1}}`, jsonReq("{\"a\":1,\"b\":\"\x00\"}"), false},
		{"not declared JSON", `{"json":{"/a":1}}`, func(r *Request) { jsonReq(`{"a":1}`)(r); http.Header(r.Header).Set("Content-Type", "text/plain") }, false},
		{"no content type", `{"json":{"/a":1}}`, func(r *Request) { jsonReq(`{"a":1}`)(r); http.Header(r.Header).Del("Content-Type") }, false},
		{"two content types", `{"json":{"/a":1}}`, func(r *Request) { jsonReq(`{"a":1}`)(r); http.Header(r.Header).Add("Content-Type", "text/plain") }, false},
		{"body not the size judged", `{"json":{"/a":1}}`, func(r *Request) { jsonReq(`{"a":1}`)(r); r.BodySize++ }, false},
		{"body over the limit", `{"json":{"/a":1}}`, jsonReq(`{"a":1,"pad":"` + strings.Repeat("x", MaxJSONBody) + `"}`), false},
		{"deep nesting", `{"jsonAbsent":["/x"]}`, jsonReq(strings.Repeat("[", maxDepth+2) + strings.Repeat("]", maxDepth+2)), false},
		{"no body", `{"jsonAbsent":["/x"]}`, func(r *Request) { jsonReq("")(r) }, false},
	})
}

func TestArgumentsMatch(t *testing.T) {
	rule := `{"name":"app-issues","match":{"mcp":{"method":"tools/call","tool":"create_issue","arguments":{"/repo":"ourco/app","/labels/0":["bug","docs"]}}},"verdict":"allow"}`
	p := policy(t, rule)
	tests := []struct {
		name string
		lift func(t *testing.T) *mcp.Lifted
		want bool
	}{
		{"in the repo", func(t *testing.T) *mcp.Lifted {
			return call(t, "create_issue", `{"repo":"ourco/app","labels":["bug"]}`)
		}, true},
		{"other repo", func(t *testing.T) *mcp.Lifted {
			return call(t, "create_issue", `{"repo":"ourco/infra","labels":["bug"]}`)
		}, false},
		{"label not first", func(t *testing.T) *mcp.Lifted {
			return call(t, "create_issue", `{"repo":"ourco/app","labels":["wontfix","bug"]}`)
		}, false},
		{"no arguments", func(t *testing.T) *mcp.Lifted { return call(t, "create_issue", "") }, false},
		{"arguments not an object", func(t *testing.T) *mcp.Lifted { return call(t, "create_issue", `"ourco/app"`) }, false},
		{"other tool", func(t *testing.T) *mcp.Lifted {
			return call(t, "delete_repo", `{"repo":"ourco/app","labels":["bug"]}`)
		}, false},
		{"batch: every call inside", func(t *testing.T) *mcp.Lifted {
			a, b := call(t, "create_issue", `{"repo":"ourco/app","labels":["bug"]}`), call(t, "create_issue", `{"repo":"ourco/app","labels":["docs"]}`)
			return &mcp.Lifted{Batch: true, Calls: append(a.Calls, b.Calls...)}
		}, true},
		{"batch: one call outside", func(t *testing.T) *mcp.Lifted {
			a, b := call(t, "create_issue", `{"repo":"ourco/app","labels":["bug"]}`), call(t, "create_issue", `{"repo":"evil/repo","labels":["bug"]}`)
			return &mcp.Lifted{Batch: true, Calls: append(a.Calls, b.Calls...)}
		}, false},
		{"batch: one call outside first", func(t *testing.T) *mcp.Lifted {
			a, b := call(t, "create_issue", `{"repo":"evil/repo","labels":["bug"]}`), call(t, "create_issue", `{"repo":"ourco/app","labels":["bug"]}`)
			return &mcp.Lifted{Batch: true, Calls: append(a.Calls, b.Calls...)}
		}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := base()
			r.Method = "POST"
			r.MCP = tt.lift(t)
			got := p.Judge(r)
			if (got.Verdict == Allow) != tt.want {
				t.Errorf("got %+v, want allow=%v\ntrace: %+v", got, tt.want, p.Explain(r))
			}
		})
	}
	// Duplicate keys in arguments, had a caller skipped lib/mcp's check.
	r := base()
	r.MCP = &mcp.Lifted{Calls: []mcp.Call{{Method: "tools/call", Tool: "create_issue", Arguments: []byte(`{"repo":"ourco/app","repo":"evil/x","labels":["bug"]}`)}}}
	if d := p.Judge(r); d.Verdict != Deny {
		t.Errorf("arguments with a duplicate key: %+v", d)
	}
	if d := p.Judge(r); !strings.Contains(p.Explain(r)[0].Why, "not a JSON document") {
		t.Errorf("explain of duplicate arguments: %+v %+v", d, p.Explain(r))
	}
}

func TestBatchDeniedCallNamed(t *testing.T) {
	p := policy(t, `{"name":"app","match":{"mcp":{"tool":"create_issue","arguments":{"/repo":"ourco/app"}}},"verdict":"allow"}`)
	a, b := call(t, "create_issue", `{"repo":"ourco/app"}`), call(t, "create_issue", `{"repo":"evil/x"}`)
	r := base()
	r.MCP = &mcp.Lifted{Batch: true, Calls: append(a.Calls, b.Calls...)}
	d := p.Judge(r)
	if want := `batch call 1 (method "tools/call", tool "create_issue"): no rule matched`; d.Verdict != Deny || d.Reason != want {
		t.Errorf("got %+v, want deny %q", d, want)
	}
}

// The body and each call's arguments are read once per request, however
// many rules read them.
func TestBodyReadOnce(t *testing.T) {
	var rules []string
	for i := range 10 {
		rules = append(rules, `{"name":"j`+string(rune('a'+i))+`","match":{"json":{"/model":"m`+string(rune('a'+i))+`"},"jsonAbsent":["/tools"]},"verdict":"allow"}`)
		rules = append(rules, `{"name":"a`+string(rune('a'+i))+`","match":{"mcp":{"arguments":{"/n":`+string(rune('0'+i))+`}}},"verdict":"allow"}`)
	}
	p := policy(t, rules...)
	reads := 0
	readHook = func() { reads++ }
	t.Cleanup(func() { readHook = nil })

	r := base()
	jsonReq(`{"model":"mz"}`)(r)
	if d := p.Judge(r); d.Verdict != Deny {
		t.Fatalf("no rule should match: %+v", d)
	}
	if reads != 1 {
		t.Errorf("body read %d times for 10 rules, want 1", reads)
	}
	reads = 0
	a, b := call(t, "x", `{"n":1}`), call(t, "y", `{"n":2}`)
	r = base()
	r.MCP = &mcp.Lifted{Batch: true, Calls: append(a.Calls, b.Calls...)}
	if d := p.Judge(r); d.Verdict != Allow {
		t.Fatalf("batch: %+v", d)
	}
	if reads != 2 {
		t.Errorf("arguments read %d times for a batch of 2 calls, want 2", reads)
	}
}

func TestExpiresAndTask(t *testing.T) {
	at := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	p := policy(t,
		`{"name":"hour","match":{"host":"api.example.com","pathPrefix":"/hour/"},"verdict":"allow","expires":"2026-03-01T13:00:00Z"}`,
		`{"name":"task","match":{"host":"api.example.com","pathPrefix":"/task/","task":"t-123"},"verdict":"allow"}`,
	)
	tests := []struct {
		name string
		mod  func(*Request)
		want string
	}{
		{"before expiry", func(r *Request) { r.Path, r.Time = "/hour/x", at }, "hour"},
		{"a second before", func(r *Request) { r.Path, r.Time = "/hour/x", at.Add(time.Hour-time.Second) }, "hour"},
		{"at expiry", func(r *Request) { r.Path, r.Time = "/hour/x", at.Add(time.Hour) }, ""},
		{"after expiry", func(r *Request) { r.Path, r.Time = "/hour/x", at.Add(2*time.Hour) }, ""},
		{"no time", func(r *Request) { r.Path = "/hour/x" }, ""},
		{"its task", func(r *Request) { r.Path, r.Task = "/task/x", "t-123" }, "task"},
		{"another task", func(r *Request) { r.Path, r.Task = "/task/x", "t-124" }, ""},
		{"no task", func(r *Request) { r.Path = "/task/x" }, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := base()
			tt.mod(r)
			d := p.Judge(r)
			if d.Rule != tt.want || (d.Verdict == Allow) != (tt.want != "") {
				t.Errorf("got %+v, want rule %q\ntrace: %+v", d, tt.want, p.Explain(r))
			}
		})
	}
	// A CONNECT is judged without a time or task: it is terminated, and
	// each request inside is judged.
	if d := p.JudgeConnectAddr("api.example.com", 443, "yuko", mustAddr("93.184.216.34")); d.Verdict != Allow || d.Rule != "" {
		t.Errorf("CONNECT: %+v", d)
	}
	tr := p.Explain(&Request{Protocol: "https", Method: "GET", Host: "api.example.com", Port: 443, Path: "/hour/", Time: at.Add(time.Hour)})
	if tr[0].Why != "expired 2026-03-01T13:00:00Z" {
		t.Errorf("explain: %+v", tr)
	}
}

func TestExplainConditions(t *testing.T) {
	p := policy(t,
		`{"name":"search","match":{"query":{"q":"*","token":null}},"verdict":"allow"}`,
		`{"name":"model","match":{"json":{"/model":"gpt-*"},"jsonAbsent":["/tools"]},"verdict":"allow"}`,
	)
	r := base()
	r.Query = "q=a&token=x"
	jsonReq(`{"model":"gpt-5","tools":[]}`)(r)
	want := []Trace{
		{Rule: "search", Why: `query "q"="*" held; query "token" absent failed`},
		{Rule: "model", Why: `json /model = "gpt-*" held; json /tools absent failed`},
	}
	if got := p.Explain(r); !equalTraces(got, want) {
		t.Errorf("Explain:\n got: %+v\nwant: %+v", got, want)
	}
	r.Query = "q=a"
	if got := p.Explain(r); len(got) != 1 || got[0].Why != `matches: allow (query "q"="*" held; query "token" absent held)` {
		t.Errorf("Explain of a match: %+v", got)
	}
	r.Query = "q=%2541"
	if got := p.Explain(r); !strings.HasPrefix(got[0].Why, "query unreadable") {
		t.Errorf("Explain of an unreadable query: %+v", got)
	}
}

func equalTraces(a, b []Trace) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// A request rebuilt from a record has no body: a rule reading it decides
// nothing, and says so; query rules count a redacted value as present.
func TestFromRecord(t *testing.T) {
	p := policy(t,
		`{"name":"no-token","match":{"pathPrefix":"/search","query":{"token":null}},"verdict":"allow"}`,
		`{"name":"keyed","match":{"pathPrefix":"/search","query":{"token":"abc*"}},"verdict":"deny"}`,
		`{"name":"model","match":{"json":{"/model":"gpt-*"}},"verdict":"allow"}`,
	)
	r := base()
	r.Path, r.Query, r.FromRecord = "/search", "token="+RecordRedacted, true
	if d := p.Judge(r); d.Rule != "keyed" || d.Unknown {
		t.Errorf("redacted token: %+v", d)
	}
	r.Path, r.Query = "/other", ""
	d := p.Judge(r)
	if !d.Unknown || d.Verdict != Deny || d.Rule != "model" || !strings.Contains(d.Reason, "record does not hold") {
		t.Errorf("body rule from a record: %+v", d)
	}
	// Outside a record, the marker is an ordinary value.
	r.FromRecord, r.Path, r.Query = false, "/search", "token="+RecordRedacted
	if d := p.Judge(r); d.Rule != "" {
		t.Errorf("marker outside a record: %+v", d)
	}
}

func TestReadsPolicyErrors(t *testing.T) {
	tests := []struct{ rule, want string }{
		{`{"name":"a","match":{"query":[]},"verdict":"allow"}`, `match.query: must be a non-empty object like {"name": "glob", "other": null}`},
		{`{"name":"a","match":{"query":{"q":1}},"verdict":"allow"}`, `match.query: "q": must be a string or a non-empty array of strings (or null for absent)`},
		{`{"name":"a","match":{"query":{"q":"[a"}},"verdict":"allow"}`, `match.query: "q": bad glob "[a"`},
		{`{"name":"a","match":{"json":{"title":"x"}},"verdict":"allow"}`, `match.json: "title": a JSON pointer is "" or starts with "/"`},
		{`{"name":"a","match":{"json":{"/a~2":"x"}},"verdict":"allow"}`, `match.json: "/a~2": a JSON pointer`},
		{`{"name":"a","match":{"json":{"/a":{"b":1}}},"verdict":"allow"}`, `match.json: "/a": a value is a string (glob), number, boolean or null`},
		{`{"name":"a","match":{"json":{"/a":[]}},"verdict":"allow"}`, `match.json: "/a": an array of values must not be empty`},
		{`{"name":"a","match":{"json":{}},"verdict":"allow"}`, `match.json: must be a non-empty object`},
		{`{"name":"a","match":{"jsonAbsent":"tools"},"verdict":"allow"}`, `match.jsonAbsent: "tools": a JSON pointer`},
		{`{"name":"a","match":{"mcp":{"arguments":{"repo":"x"}}},"verdict":"allow"}`, `match.mcp.arguments: "repo": a JSON pointer`},
		{`{"name":"a","match":{"queryExact":"yes"},"verdict":"allow"}`, `match.queryExact`},
		{`{"name":"a","verdict":"allow","expires":"in an hour"}`, `expires: "in an hour" is not an RFC 3339 time`},
		{`{"name":"a","match":{"host":"x.example"},"verdict":"tunnel","expires":"2026-01-01T00:00:00Z"}`, `expires: a tunnel rule cannot expire`},
		{`{"name":"a","match":{"host":"x.example","task":"t-1"},"verdict":"tunnel"}`, `verdict: a tunnel rule can match only`},
		{`{"name":"a","match":{"host":"x.example","query":{"a":"b"}},"verdict":"tunnel"}`, `verdict: a tunnel rule can match only`},
	}
	for _, tt := range tests {
		_, err := Parse([]byte(`{"schema":"impyard.policy/1","rules":[` + tt.rule + `]}`))
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%s\n got: %v\nwant: ...%s...", tt.rule, err, tt.want)
		}
	}
}
