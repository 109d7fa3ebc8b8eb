package gateway

import (
	"net"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// clock is the gateway's injected time, moved by the test.
type clock struct {
	mu sync.Mutex
	at time.Time
}

func (c *clock) now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.at
}

func (c *clock) set(t time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.at = t
}

// The rules a temporary grant inserts hold while they should and not a
// moment longer, without the policy file changing: an hour grant stops at
// its hour on the gateway's clock, a task-scoped one when its task's runs
// end (the next task's token names another task).
func TestGrantsExpireAndEndWithTheirTask(t *testing.T) {
	var up seen
	srv, _ := newPlainUpstream(t, up.handler("ok"))
	var asked atomic.Pointer[string]
	start := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	clk := &clock{at: start}
	var task atomic.Pointer[string]
	first := "t-20260301-aaaa"
	task.Store(&first)
	h := startGateway(t, `{"schema": "impyard.policy/1", "rules": [
		{"name": "grant-yuko-hour", "match": {"host": "hour.test", "subject": "yuko"}, "verdict": "allow", "expires": "2026-03-01T13:00:00Z"},
		{"name": "grant-yuko-task", "match": {"host": "task.test", "subject": "yuko", "task": "t-20260301-aaaa"}, "verdict": "allow"},
		{"name": "default-deny", "match": {"host": "*"}, "verdict": "deny"}]}`,
		func(c *Config) {
			c.Dial = redirect(srv.Listener.Addr().String(), &asked)
			c.Now = clk.now
			c.Authenticate = func(net.Conn, string) (string, string, error) { return "yuko", *task.Load(), nil }
		})
	h.resolve("hour.test", "93.184.216.34")
	h.resolve("task.test", "93.184.216.34")
	get := func(u string) int {
		t.Helper()
		// A new connection each time: the subject and task are the
		// connection's, as a box's token is its run's.
		c := h.client()
		defer c.CloseIdleConnections()
		resp, _ := h.do(c, "GET", u, "", nil)
		return resp.StatusCode
	}

	if s := get("http://hour.test/a"); s != 200 {
		t.Fatalf("hour grant at its start: %d", s)
	}
	clk.set(start.Add(time.Hour - time.Second))
	if s := get("http://hour.test/b"); s != 200 {
		t.Fatalf("hour grant a second before its end: %d", s)
	}
	clk.set(start.Add(time.Hour))
	if s := get("http://hour.test/c"); s != 403 {
		t.Fatalf("hour grant after its hour: %d", s)
	}
	if r := h.last(); r.Rule != "default-deny" {
		t.Errorf("after the hour, decided by %q: %s", r.Rule, r.Reason)
	}

	if s := get("http://task.test/a"); s != 200 {
		t.Fatalf("task grant within its task: %d", s)
	}
	next := "t-20260301-bbbb"
	task.Store(&next)
	if s := get("http://task.test/b"); s != 403 {
		t.Fatalf("task grant in the next task: %d", s)
	}
	if n := up.n.Load(); n != 3 {
		t.Errorf("upstream saw %d requests, want 3", n)
	}
}

// Query, JSON body and MCP argument rules decide on what reaches the
// upstream: the body judged is the body forwarded.
func TestReadsDecideWhatIsForwarded(t *testing.T) {
	var up seen
	srv, _ := newPlainUpstream(t, up.handler("ok"))
	var asked atomic.Pointer[string]
	h := startGateway(t, `{"schema": "impyard.policy/1", "rules": [
		{"name": "search", "match": {"host": "api.test", "method": "GET", "pathPrefix": "/search", "query": {"q": "*", "token": null}}, "verdict": "allow"},
		{"name": "issues", "match": {"host": "api.test", "method": "POST", "pathPrefix": "/repos/ourco/", "json": {"/labels/0": ["bug", "docs"]}, "jsonAbsent": ["/labels/1"]}, "verdict": "allow"},
		{"name": "app-only", "match": {"host": "mcp.test", "mcp": {"method": "tools/call", "tool": "create_issue", "arguments": {"/owner": "ourco", "/repo": "app"}}}, "verdict": "allow"}]}`,
		func(c *Config) { c.Dial = redirect(srv.Listener.Addr().String(), &asked) })
	h.resolve("api.test", "93.184.216.34")
	h.resolve("mcp.test", "93.184.216.34")
	c := h.client()
	json := map[string]string{"Content-Type": "application/json"}

	tests := []struct {
		name, method, url, body string
		want                    int
	}{
		{"search", "GET", "http://api.test/search?q=cats", "", 200},
		{"search with a token", "GET", "http://api.test/search?q=cats&token=s3cret", "", 403},
		{"search with a hidden token", "GET", "http://api.test/search?q=cats&%74oken=s3cret", "", 403},
		{"search double-encoded", "GET", "http://api.test/search?q=cats&%2574oken=s3cret", "", 403},
		{"issue with an allowed label", "POST", "http://api.test/repos/ourco/app/issues", `{"title":"t","labels":["bug"]}`, 200},
		{"issue with a second label", "POST", "http://api.test/repos/ourco/app/issues", `{"title":"t","labels":["bug","wontfix"]}`, 403},
		{"issue with another label", "POST", "http://api.test/repos/ourco/app/issues", `{"title":"t","labels":["urgent"]}`, 403},
		{"MCP call in the repo", "POST", "http://mcp.test/mcp", `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"create_issue","arguments":{"owner":"ourco","repo":"app"}}}`, 200},
		{"MCP batch with one call outside", "POST", "http://mcp.test/mcp", `[{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"create_issue","arguments":{"owner":"ourco","repo":"app"}}},` +
			`{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"create_issue","arguments":{"owner":"ourco","repo":"infra"}}}]`, 403},
	}
	forwarded := int64(0)
	for _, tt := range tests {
		resp, _ := h.do(c, tt.method, tt.url, tt.body, json)
		if resp.StatusCode != tt.want {
			t.Errorf("%s: %d, want %d (%s)", tt.name, resp.StatusCode, tt.want, h.last().Reason)
			continue
		}
		if tt.want != 200 {
			continue
		}
		forwarded++
		if got := *up.body.Load(); got != tt.body {
			t.Errorf("%s: upstream got body %q, want %q", tt.name, got, tt.body)
		}
		u, _ := url.Parse(tt.url)
		if got := *up.target.Load(); got != u.RequestURI() {
			t.Errorf("%s: upstream got target %q", tt.name, got)
		}
	}
	if n := up.n.Load(); n != forwarded {
		t.Errorf("upstream saw %d requests, want %d", n, forwarded)
	}
	for _, r := range h.records() {
		if strings.Contains(r.Request.Query, "s3cret") {
			t.Errorf("a token reached the record: %q", r.Request.Query)
		}
	}
}
