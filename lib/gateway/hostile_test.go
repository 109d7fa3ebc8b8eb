package gateway

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"
)

// frontingRig is a gateway allowing api.test and other.api.test, both
// resolving to one TLS upstream, and what that upstream saw.
func frontingRig(t *testing.T) (*harness, *testUpstream, *seen) {
	t.Helper()
	var up seen
	ups := newTLSUpstream(t, up.handler("x"))
	h := startGateway(t, policy(
		`{"name": "api", "match": {"host": ["api.test", "other.api.test"], "network": "127.0.0.0/8"}, "verdict": "allow"}`),
		func(c *Config) { c.UpstreamCA = ups.bundle })
	h.resolve("api.test", "127.0.0.1")
	h.resolve("other.api.test", "127.0.0.1")
	return h, ups, &up
}

func TestDomainFronting(t *testing.T) {
	h, ups, up := frontingRig(t)
	authority := fmt.Sprintf("api.test:%d", ups.port)

	// SNI naming another host than the CONNECT: the handshake fails.
	if _, _, err := h.connectTLS(authority, "other.api.test"); err == nil {
		t.Fatal("handshake with a fronted SNI succeeded")
	}
	if r := h.waitRecords(1)[0]; r.Verdict != "deny" || !strings.Contains(r.Reason, "domain fronting") {
		t.Fatalf("SNI record %+v", r)
	}
	// Inside the tunnel, a Host or absolute URL naming another host.
	for _, req := range []string{
		"GET / HTTP/1.1\r\nHost: other.api.test\r\n\r\n",
		fmt.Sprintf("GET https://other.api.test:%d/ HTTP/1.1\r\nHost: other.api.test\r\n\r\n", ups.port),
		"GET / HTTP/1.1\r\nHost: api.test:1\r\n\r\n",
	} {
		tc, br, err := h.connectTLS(authority, "api.test")
		if err != nil {
			t.Fatal(err)
		}
		io.WriteString(tc, req)
		resp, err := http.ReadResponse(br, nil)
		if err != nil || resp.StatusCode != 403 {
			t.Fatalf("%q: %v %v", req, resp, err)
		}
		tc.Close()
		if r := h.last(); r.Verdict != "deny" || !strings.Contains(r.Reason, "domain fronting") {
			t.Fatalf("%q: record %+v", req, r)
		}
	}
	// CONNECT whose Host header disagrees.
	got := h.raw(fmt.Sprintf("CONNECT %s HTTP/1.1\r\nHost: other.api.test:%d\r\nConnection: close\r\n\r\n", authority, ups.port), 2*time.Second)
	if !strings.HasPrefix(got, "HTTP/1.1 403") {
		t.Fatalf("CONNECT with a fronted Host: %q", got)
	}
	// Absolute-form on the listener with a Host header for another host.
	got = h.raw(fmt.Sprintf("GET http://api.test:%d/ HTTP/1.1\r\nHost: other.api.test\r\nConnection: close\r\n\r\n", ups.port), 2*time.Second)
	if !strings.HasPrefix(got, "HTTP/1.1 403") {
		t.Fatalf("absolute-form with a fronted Host: %q", got)
	}
	if up.n.Load() != 0 {
		t.Fatal("a fronted request reached the upstream")
	}
}

func TestLimits(t *testing.T) {
	var up seen
	_, port := newPlainUpstream(t, up.handler("ok"))
	h := startGateway(t, policy(`{"name": "lo", "match": {"host": "127.0.0.1", "network": "127.0.0.0/8"}, "verdict": "allow"}`),
		func(c *Config) {
			c.Limits.MaxHeaderBytes = 2048
			c.Limits.MaxBodyBytes = 1024
			c.Limits.ReadHeaderTimeout = 500 * time.Millisecond
			c.Limits.ReadBodyTimeout = 500 * time.Millisecond
		})
	target := fmt.Sprintf("http://127.0.0.1:%d/", port)
	for _, tc := range []struct {
		name, req, status string
	}{
		{"header block over the cap", "GET " + target + " HTTP/1.1\r\nHost: 127.0.0.1\r\nX: " + strings.Repeat("a", 3000) + "\r\n\r\n", "431"},
		{"body over the cap", "POST " + target + " HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 2000\r\n\r\n", "413"},
		{"chunked body over the cap", "POST " + target + " HTTP/1.1\r\nHost: 127.0.0.1\r\nTransfer-Encoding: chunked\r\n\r\n800\r\n" + strings.Repeat("a", 2048) + "\r\n0\r\n\r\n", "413"},
		{"both length and chunked", "POST " + target + " HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n", "400"},
		{"body shorter than declared", "POST " + target + " HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 50\r\n\r\nshort", "408"},
		{"head never finished", "GET " + target + " HTTP/1.1\r\nHost: 127.0.0.1\r\n", "408"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := len(h.records())
			got := h.raw(tc.req, 3*time.Second)
			if !strings.HasPrefix(got, "HTTP/1.1 "+tc.status+" ") {
				t.Fatalf("got %q, want %s", got, tc.status)
			}
			recs := h.records()
			if len(recs) != before+1 || recs[len(recs)-1].Verdict != "reject" || fmt.Sprint(recs[len(recs)-1].Status) != tc.status {
				t.Fatalf("records %d -> %d, last %+v", before, len(recs), recs[len(recs)-1])
			}
		})
	}
	t.Run("one byte a second", func(t *testing.T) {
		c, err := net.Dial("tcp", h.addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		start := time.Now()
		go func() {
			for _, b := range []byte("GET " + target + " HTTP/1.1\r\n") {
				if _, err := c.Write([]byte{b}); err != nil {
					return
				}
				time.Sleep(200 * time.Millisecond)
			}
		}()
		c.SetReadDeadline(time.Now().Add(5 * time.Second))
		got, _ := io.ReadAll(c)
		if !strings.HasPrefix(string(got), "HTTP/1.1 408 ") || time.Since(start) > 2*time.Second {
			t.Fatalf("after %s: %q", time.Since(start), got)
		}
	})
	if up.n.Load() != 0 {
		t.Fatal("an over-limit request reached the upstream")
	}
}

// waitSlots waits until the gateway serves n client connections.
func (h *harness) waitSlots(n int) {
	h.t.Helper()
	serving := func() int {
		h.g.mu.Lock()
		defer h.g.mu.Unlock()
		return len(h.g.conns)
	}
	for deadline := time.Now().Add(5 * time.Second); serving() != n; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			h.t.Fatalf("the gateway serves %d connections, want %d", serving(), n)
		}
	}
}

func TestConnectionCap(t *testing.T) {
	h := startGateway(t, policy(), func(c *Config) { c.Limits.MaxConns = 2 })
	var held []net.Conn
	for range 2 {
		c, err := net.Dial("tcp", h.addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		held = append(held, c)
	}
	// The two held connections occupy both slots once accepted.
	h.waitSlots(2)
	got := h.raw("GET http://x.test/ HTTP/1.1\r\nHost: x.test\r\n\r\n", 3*time.Second)
	if !strings.HasPrefix(got, "HTTP/1.1 503 ") {
		t.Fatalf("over the cap: %q", got)
	}
	if r := h.last(); r.Verdict != "reject" || r.Status != 503 {
		t.Fatalf("record %+v", r)
	}
	held[0].Close()
	h.waitSlots(1)
	if got := h.raw("GET /v1/health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n", 3*time.Second); !strings.HasPrefix(got, "HTTP/1.1 200 ") {
		t.Fatalf("after a slot freed: %q", got)
	}
}

func TestMCPJudging(t *testing.T) {
	var up seen
	ups := newTLSUpstream(t, up.handler(`{"jsonrpc":"2.0","id":1,"result":{}}`))
	h := startGateway(t, policy(`{"name": "gh-read", "match": {"host": "api.test", "network": "127.0.0.0/8",
		"mcp": {"method": "tools/call", "tool": ["get_*", "list_*"]}}, "verdict": "allow"}`),
		func(c *Config) { c.UpstreamCA = ups.bundle })
	h.resolve("api.test", "127.0.0.1")
	c := h.client()
	u := fmt.Sprintf("https://api.test:%d/mcp", ups.port)
	call := func(method, tool string, id int) string {
		return fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"method":%q,"params":{"name":%q}}`, id, method, tool)
	}
	json := map[string]string{"Content-Type": "application/json"}
	for _, tc := range []struct {
		name, body string
		hdr        map[string]string
		status     int
	}{
		{"allowed tool", call("tools/call", "get_issue", 1), json, 200},
		{"allowed batch", "[" + call("tools/call", "get_issue", 1) + "," + call("tools/call", "list_prs", 2) + "]", json, 200},
		{"denied tool", call("tools/call", "create_pull_request", 1), json, 403},
		{"batch hiding a denied call", "[" + call("tools/call", "get_issue", 1) + "," + call("tools/call", "delete_repo", 2) + "]", json, 403},
		{"odd-case method", call("Tools/Call", "get_issue", 1), json, 403},
		{"odd-case key", `{"jsonrpc":"2.0","id":1,"Method":"tools/call","params":{"name":"get_issue"}}`, json, 403},
		{"duplicate key", `{"jsonrpc":"2.0","id":1,"method":"tools/call","method":"tools/list","params":{"name":"get_issue"}}`, json, 403},
		{"not JSON with a JSON type", `method=tools/call`, json, 403},
		{"JSON-RPC with a text type", call("tools/call", "delete_repo", 1), map[string]string{"Content-Type": "text/plain"}, 403},
		{"body that is not the gzip it claims", call("tools/call", "get_issue", 1), map[string]string{"Content-Type": "application/json", "Content-Encoding": "gzip"}, 400},
		{"deflate body", call("tools/call", "get_issue", 1), map[string]string{"Content-Type": "application/json", "Content-Encoding": "deflate"}, 415},
	} {
		resp, _ := h.do(c, "POST", u, tc.body, tc.hdr)
		if resp.StatusCode != tc.status {
			t.Errorf("%s: %d, want %d", tc.name, resp.StatusCode, tc.status)
		}
	}
	recs := h.waitRecords(10)
	if m := recs[0].Request.MCP; m == nil || len(m.Calls) != 1 || m.Calls[0].Method != "tools/call" || m.Calls[0].Tool != "get_issue" {
		t.Errorf("record mcp %+v", recs[0].Request.MCP)
	}
	if m := recs[1].Request.MCP; m == nil || !m.Batch || len(m.Calls) != 2 {
		t.Errorf("batch record mcp %+v", recs[1].Request.MCP)
	}
	if r := recs[7]; r.Request.MCPError == "" {
		t.Errorf("non-JSON body record %+v", r.Request)
	}
	if up.n.Load() != 2 {
		t.Errorf("upstream saw %d requests, want 2", up.n.Load())
	}
}

func TestUpgrade(t *testing.T) {
	upgraded := func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Upgrade") != "websocket" {
			http.Error(w, "no upgrade", 400)
			return
		}
		c, brw, err := http.NewResponseController(w).Hijack()
		if err != nil {
			return
		}
		defer c.Close()
		brw.WriteString("HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n")
		brw.Flush()
		line, _ := brw.ReadString('\n')
		brw.WriteString("echo " + line)
		brw.Flush()
	}
	_, port := newPlainUpstream(t, http.HandlerFunc(upgraded))
	h := startGateway(t, policy(
		`{"name": "ws", "match": {"host": "127.0.0.1", "pathPrefix": "/ws", "headerContains": {"upgrade": "websocket"}, "network": "127.0.0.0/8"}, "verdict": "allow"}`,
		`{"name": "lo", "match": {"host": "127.0.0.1", "network": "127.0.0.0/8"}, "verdict": "allow"}`), nil)
	up := func(path, proto string) (string, net.Conn, *bufio.Reader) {
		c, err := net.Dial("tcp", h.addr)
		if err != nil {
			t.Fatal(err)
		}
		fmt.Fprintf(c, "GET http://127.0.0.1:%d%s HTTP/1.1\r\nHost: 127.0.0.1:%d\r\nUpgrade: %s\r\nConnection: Upgrade\r\n\r\n", port, path, port, proto)
		br := bufio.NewReader(c)
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatal(err)
		}
		return resp.Status, c, br
	}
	if status, c, _ := up("/other", "websocket"); !strings.HasPrefix(status, "403") {
		t.Fatalf("upgrade under a rule that does not name it: %s", status)
	} else {
		c.Close()
	}
	if status, c, _ := up("/ws", "h2c"); !strings.HasPrefix(status, "403") {
		t.Fatalf("h2c upgrade: %s", status)
	} else {
		c.Close()
	}
	status, c, br := up("/ws", "websocket")
	defer c.Close()
	if !strings.HasPrefix(status, "101") {
		t.Fatalf("allowed upgrade: %s", status)
	}
	io.WriteString(c, "hi\n")
	line, _ := br.ReadString('\n')
	if line != "echo hi\n" {
		t.Fatalf("after the upgrade: %q", line)
	}
	c.Close()
	recs := h.waitRecords(3)
	if r := recs[2]; r.Verdict != "allow" || r.Rule != "ws" || r.Status != 101 {
		t.Fatalf("record %+v", r)
	}
}

func TestUnaskedSwitchIsRefused(t *testing.T) {
	_, port := newPlainUpstream(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c, brw, _ := http.NewResponseController(w).Hijack()
		defer c.Close()
		brw.WriteString("HTTP/1.1 101 Switching Protocols\r\nUpgrade: anything\r\nConnection: Upgrade\r\n\r\n")
		brw.Flush()
		io.Copy(io.Discard, c)
	}))
	h := startGateway(t, policy(`{"name": "lo", "match": {"host": "127.0.0.1", "pathPrefix": "/ok", "network": "127.0.0.0/8"}, "verdict": "allow"}`), nil)
	got := h.raw(fmt.Sprintf("GET http://127.0.0.1:%d/ok HTTP/1.1\r\nHost: 127.0.0.1:%d\r\n\r\nGET http://127.0.0.1:%d/denied HTTP/1.1\r\nHost: 127.0.0.1:%d\r\n\r\n", port, port, port, port), 3*time.Second)
	if !strings.HasPrefix(got, "HTTP/1.1 502 ") || strings.Contains(got, "HTTP/1.1 101") || strings.Contains(got, "Switching") {
		t.Fatalf("got %q", got)
	}
	if r := h.last(); r.Status != 502 || !strings.Contains(r.Error, "unasked") {
		t.Fatalf("record %+v", r)
	}
}

// TestListenerShares fills a box listener's slots with connections that
// send nothing: the host listener still serves at once, the box's excess
// connections are answered 503, and the idle ones are closed when the
// header timeout, counted from accept, runs out.
func TestListenerShares(t *testing.T) {
	var up seen
	_, port := newPlainUpstream(t, up.handler("ok"))
	const share, timeout = 4, 1500 * time.Millisecond
	h := startGateway(t, policy(`{"name": "lo", "match": {"host": "127.0.0.1", "network": "127.0.0.0/8"}, "verdict": "allow"}`),
		func(c *Config) {
			c.Limits.MaxConns = share
			c.Limits.ReadHeaderTimeout = timeout
		})
	box, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	attached := make(chan struct{})
	go func() { h.g.Attach(ctx, box); close(attached) }()
	t.Cleanup(func() { cancel(); <-attached })

	start := time.Now()
	var idle []net.Conn
	for range share + 3 {
		c, err := net.Dial("tcp", box.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		idle = append(idle, c)
	}
	// The box's share is full: its excess connections are refused.
	for _, c := range idle[share:] {
		c.SetReadDeadline(time.Now().Add(5 * time.Second))
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil || resp.StatusCode != 503 {
			t.Fatalf("a connection over the box's share: %v %v", resp, err)
		}
	}
	// The host listener's slots are its own.
	if resp, body := h.do(h.client(), "GET", "http://127.0.0.1:"+itoa(port)+"/", "", nil); resp.StatusCode != 200 || body != "ok" {
		t.Fatalf("the host listener, with the box's share full: %d %q", resp.StatusCode, body)
	}
	if time.Since(start) >= timeout {
		t.Skipf("too slow to tell the share from the timeout (%s)", time.Since(start))
	}
	// The idle connections are closed once the header timeout is up,
	// not after the idle timeout.
	for _, c := range idle[:share] {
		c.SetReadDeadline(time.Now().Add(10 * time.Second))
		if n, err := c.Read(make([]byte, 1)); err != io.EOF {
			t.Fatalf("an idle connection: read %d, %v; want it closed", n, err)
		}
	}
	if took := time.Since(start); took < timeout || took > timeout+5*time.Second {
		t.Fatalf("idle connections closed after %s, want about %s", took, timeout)
	}
	if up.n.Load() != 1 {
		t.Fatalf("upstream saw %d requests, want 1", up.n.Load())
	}
}
