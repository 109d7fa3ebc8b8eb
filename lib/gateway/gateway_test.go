package gateway

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// seen records what an upstream received.
type seen struct {
	n      atomic.Int64
	header atomic.Pointer[http.Header]
	target atomic.Pointer[string]
	body   atomic.Pointer[string]
}

func (s *seen) handler(reply string) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.n.Add(1)
		h := r.Header.Clone()
		h.Set("Host", r.Host)
		s.header.Store(&h)
		t := r.RequestURI
		s.target.Store(&t)
		b, _ := io.ReadAll(r.Body)
		body := string(b)
		s.body.Store(&body)
		w.Header().Set("Connection", "x-upstream-hop")
		w.Header().Set("X-Upstream-Hop", "1")
		w.Header().Set("X-Reply", "yes")
		io.WriteString(w, reply)
	})
}

func TestPlainHTTPForwardAndRecord(t *testing.T) {
	var up seen
	_, port := newPlainUpstream(t, up.handler("hello"))
	h := startGateway(t, policy(`{"name": "local", "match": {"host": "127.0.0.1", "network": "127.0.0.0/8"}, "verdict": "allow"}`), nil)
	u := fmt.Sprintf("http://127.0.0.1:%d/a/%%61b?q=1&x=%%2F", port)
	resp, body := h.do(h.client(), "GET", u, "", map[string]string{
		"Authorization": "Bearer sk-live", "Cookie": "s=1", "X-Api-Key": "k", "Proxy-Authorization": "Basic aW1wOnQ=",
		"Connection": "x-client-hop", "X-Client-Hop": "1", "X-Plain": "visible",
	})
	if resp.StatusCode != 200 || body != "hello" {
		t.Fatalf("got %d %q", resp.StatusCode, body)
	}
	if resp.Header.Get("X-Upstream-Hop") != "" || resp.Header.Get("X-Reply") != "yes" {
		t.Errorf("response hop-by-hop handling: %v", resp.Header)
	}
	got := *up.header.Load()
	for _, k := range []string{"Proxy-Authorization", "X-Client-Hop"} {
		if got.Get(k) != "" {
			t.Errorf("upstream saw %s", k)
		}
	}
	if got.Get("Authorization") != "Bearer sk-live" || got.Get("X-Plain") != "visible" {
		t.Errorf("upstream headers %v", got)
	}
	if tgt := *up.target.Load(); tgt != "/a/ab?q=1&x=%2F" {
		t.Errorf("upstream target %q, want the normalised path and raw query", tgt)
	}
	r := h.waitRecords(1)[0]
	q := r.Request
	if r.Verdict != "allow" || r.Rule != "local" || r.Status != 200 || r.BytesOut != 5 || r.Addr != fmt.Sprintf("127.0.0.1:%d", port) {
		t.Errorf("record %+v", r)
	}
	if q.Protocol != "http" || q.Method != "GET" || q.Host != "127.0.0.1" || q.Port != port || q.Path != "/a/ab" || q.Query != "q=1&x=%2F" || q.Imp != "" || q.MCP != nil {
		t.Errorf("record request %+v", q)
	}
	for _, k := range []string{"authorization", "cookie", "x-api-key", "proxy-authorization"} {
		if q.Headers[k] != Redacted {
			t.Errorf("record header %s = %q, want redacted", k, q.Headers[k])
		}
	}
	if q.Headers["x-plain"] != "visible" {
		t.Errorf("record headers %v", q.Headers)
	}
	raw, _ := os.ReadFile(h.decisions)
	for _, secret := range []string{"sk-live", "aW1wOnQ", "s=1"} {
		if strings.Contains(string(raw), secret) {
			t.Errorf("the decision log holds %q", secret)
		}
	}
	if !strings.Contains(string(raw), `"schema":"impyard.decision/1"`) || !strings.Contains(string(raw), `"imp":null`) {
		t.Errorf("record line %s", raw)
	}
}

func TestLoopbackNeedsNetwork(t *testing.T) {
	var up seen
	_, port := newPlainUpstream(t, up.handler("hello"))
	h := startGateway(t, policy(`{"name": "any", "match": {"host": ["127.0.0.1", "localhost", "*.test"]}, "verdict": "allow"}`), nil)
	h.resolve("sneaky.test", "10.1.2.3")
	h.resolve("mapped.test", "::ffff:127.0.0.1")
	c := h.client()
	for _, u := range []string{
		fmt.Sprintf("http://127.0.0.1:%d/", port),
		fmt.Sprintf("http://localhost:%d/", port),
		fmt.Sprintf("http://sneaky.test:%d/", port),
		fmt.Sprintf("http://mapped.test:%d/", port),
	} {
		resp, _ := h.do(c, "GET", u, "", nil)
		if resp.StatusCode != http.StatusForbidden {
			t.Errorf("%s: %d, want 403", u, resp.StatusCode)
		}
		r := h.last()
		if r.Verdict != "deny" || !strings.Contains(r.Reason, "does not allow that network") || r.Addr == "" {
			t.Errorf("%s: record %s %q addr %q", u, r.Verdict, r.Reason, r.Addr)
		}
	}
	if up.n.Load() != 0 {
		t.Fatal("the upstream was reached")
	}
}

func TestDeniedNameIsNeverLookedUp(t *testing.T) {
	h := startGateway(t, policy(`{"name": "a", "match": {"host": "allowed.test"}, "verdict": "allow"}`), nil)
	resp, _ := h.do(h.client(), "GET", "http://denied.test/", "", nil)
	if resp.StatusCode != 403 || h.lookups.Load() != 0 {
		t.Fatalf("status %d, %d lookups; want 403 and none", resp.StatusCode, h.lookups.Load())
	}
	resp, _ = h.do(h.client(), "GET", "http://allowed.test/", "", nil)
	if resp.StatusCode != http.StatusBadGateway || h.lookups.Load() != 1 {
		t.Fatalf("unresolvable allowed name: status %d, %d lookups; want 502 and 1", resp.StatusCode, h.lookups.Load())
	}
	if r := h.last(); r.Verdict != "deny" || !strings.Contains(r.Reason, "does not resolve") || r.RefusedBy != RefusedByGateway {
		t.Fatalf("record %+v", r)
	}
}

func TestDialsTheCheckedAddress(t *testing.T) {
	var up seen
	_, port := newPlainUpstream(t, up.handler("ok"))
	h := startGateway(t, policy(`{"name": "lo", "match": {"host": "multi.test", "network": "127.0.0.0/8"}, "verdict": "allow"}`), nil)
	// The first address is private and outside the rule's network; the
	// gateway must skip it and dial the loopback one it checked.
	h.resolve("multi.test", "10.0.0.1", "127.0.0.1")
	resp, _ := h.do(h.client(), "GET", fmt.Sprintf("http://multi.test:%d/", port), "", nil)
	if resp.StatusCode != 200 || up.n.Load() != 1 {
		t.Fatalf("status %d, upstream hits %d", resp.StatusCode, up.n.Load())
	}
	if r := h.waitRecords(1)[0]; r.Addr != fmt.Sprintf("127.0.0.1:%d", port) {
		t.Fatalf("dialed %s", r.Addr)
	}
}

func TestHTTPSThroughTermination(t *testing.T) {
	var up seen
	ups := newTLSUpstream(t, up.handler("secure"))
	h := startGateway(t, policy(`{"name": "post-only", "match": {"host": "api.test", "method": "POST", "network": "127.0.0.0/8"}, "verdict": "allow"}`),
		func(c *Config) { c.UpstreamCA = ups.bundle })
	h.resolve("api.test", "127.0.0.1")
	c := h.client()
	u := fmt.Sprintf("https://api.test:%d/v1/send", ups.port)
	for i := range 3 { // several requests over one kept-alive tunnel
		resp, body := h.do(c, "POST", u, `{"n":`+strconv.Itoa(i)+`}`, map[string]string{"Content-Type": "application/json", "Authorization": "Bearer x"})
		if resp.StatusCode != 200 || body != "secure" {
			t.Fatalf("POST: %d %q", resp.StatusCode, body)
		}
	}
	resp, _ := h.do(c, "GET", u, "", nil)
	if resp.StatusCode != 403 {
		t.Fatalf("GET: %d, want 403", resp.StatusCode)
	}
	recs := h.waitRecords(4)
	for _, r := range recs[:3] {
		if r.Verdict != "allow" || r.Request.Protocol != "https" || r.Request.Host != "api.test" || r.Request.Headers["authorization"] != Redacted || r.Request.BodySize != 7 {
			t.Errorf("allowed record %+v", r)
		}
	}
	if r := recs[3]; r.Verdict != "deny" || r.Request.Method != "GET" || r.Status != 403 {
		t.Errorf("denied record %+v", r)
	}
	if up.n.Load() != 3 {
		t.Errorf("upstream saw %d requests, want 3", up.n.Load())
	}
}

func TestUpstreamTLSIsVerified(t *testing.T) {
	var up seen
	ups := newTLSUpstream(t, up.handler("x"))
	// No bundle: the upstream's CA is not trusted.
	h := startGateway(t, policy(`{"name": "lo", "match": {"host": "api.test", "network": "127.0.0.0/8"}, "verdict": "allow"}`), nil)
	h.resolve("api.test", "127.0.0.1")
	resp, _ := h.do(h.client(), "GET", fmt.Sprintf("https://api.test:%d/", ups.port), "", nil)
	if resp.StatusCode != http.StatusBadGateway || up.n.Load() != 0 {
		t.Fatalf("status %d, upstream hits %d; want 502 and none", resp.StatusCode, up.n.Load())
	}
	if r := h.waitRecords(1)[0]; !strings.Contains(r.Error, "certificate") {
		t.Fatalf("record error %q", r.Error)
	}
}

func TestInjectionAndPlaceholders(t *testing.T) {
	var up seen
	ups := newTLSUpstream(t, up.handler("sent"))
	h := startGateway(t, policy(
		`{"name": "mail", "match": {"protocol": "https", "host": "api.test", "network": "127.0.0.0/8"}, "verdict": "allow", "inject": {"header": "authorization", "secret": "resend", "format": "Bearer %s"}}`,
		`{"name": "other", "match": {"host": "other.api.test", "network": "127.0.0.0/8"}, "verdict": "allow"}`,
	), func(c *Config) { c.UpstreamCA = ups.bundle })
	h.resolve("api.test", "127.0.0.1")
	h.resolve("other.api.test", "127.0.0.1")
	if err := os.MkdirAll(filepath.Join(h.home, "secrets"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(h.home, "secrets", "resend"), []byte("re_REAL_KEY\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	c := h.client()
	u := fmt.Sprintf("https://api.test:%d/emails", ups.port)

	// The client sends no credential; the upstream gets the real one.
	resp, _ := h.do(c, "POST", u, `{}`, nil)
	if resp.StatusCode != 200 || (*up.header.Load()).Get("Authorization") != "Bearer re_REAL_KEY" {
		t.Fatalf("inject: %d, upstream Authorization %q", resp.StatusCode, (*up.header.Load()).Get("Authorization"))
	}
	// A placeholder in the named header is swapped in place.
	resp, _ = h.do(c, "POST", u, `{}`, map[string]string{"Authorization": "Bearer IMPYARD_PLACEHOLDER_resend"})
	if resp.StatusCode != 200 || (*up.header.Load()).Get("Authorization") != "Bearer re_REAL_KEY" {
		t.Fatalf("swap: %d, upstream Authorization %q", resp.StatusCode, (*up.header.Load()).Get("Authorization"))
	}
	hits := up.n.Load()
	// A placeholder anywhere else, or on a host that does not inject it,
	// is denied and never forwarded.
	for _, tc := range []struct {
		url, body string
		hdr       map[string]string
	}{
		{u, `{"key":"IMPYARD_PLACEHOLDER_resend"}`, nil},
		{u + "?k=IMPYARD_PLACEHOLDER_resend", "", nil},
		{u, "", map[string]string{"X-Api-Key": "IMPYARD_PLACEHOLDER_resend"}},
		{u, "", map[string]string{"Authorization": "Bearer IMPYARD_PLACEHOLDER_other"}},
		{fmt.Sprintf("https://other.api.test:%d/", ups.port), "", map[string]string{"Authorization": "IMPYARD_PLACEHOLDER_resend"}},
	} {
		resp, _ := h.do(c, "POST", tc.url, tc.body, tc.hdr)
		if resp.StatusCode != 403 {
			t.Errorf("%s %v %q: %d, want 403", tc.url, tc.hdr, tc.body, resp.StatusCode)
		}
	}
	if up.n.Load() != hits {
		t.Fatal("a request with a stray placeholder reached the upstream")
	}
	h.waitRecords(7)
	raw, _ := os.ReadFile(h.decisions)
	if strings.Contains(string(raw), "re_REAL_KEY") {
		t.Fatal("the secret is in the decision log")
	}
	// A missing secret denies rather than forwarding without it.
	os.Remove(filepath.Join(h.home, "secrets", "resend"))
	resp, _ = h.do(c, "POST", u, `{}`, nil)
	if resp.StatusCode != 403 || up.n.Load() != hits {
		t.Fatalf("missing secret: %d", resp.StatusCode)
	}
}

// redirect dials every checked address at target instead, remembering
// what was asked: a stand-in for a public upstream.
func redirect(target string, asked *atomic.Pointer[string]) func(context.Context, netip.AddrPort) (net.Conn, error) {
	return func(ctx context.Context, a netip.AddrPort) (net.Conn, error) {
		s := a.String()
		asked.Store(&s)
		var d net.Dialer
		return d.DialContext(ctx, "tcp", target)
	}
}

func TestReportMode(t *testing.T) {
	var up seen
	srv, _ := newPlainUpstream(t, up.handler("ok"))
	var asked atomic.Pointer[string]
	h := startGateway(t, `{"schema": "impyard.policy/1", "mode": "report", "rules": [
		{"name": "post", "match": {"host": "public.test", "method": "POST"}, "verdict": "allow"}]}`,
		func(c *Config) { c.Dial = redirect(srv.Listener.Addr().String(), &asked) })
	h.resolve("public.test", "93.184.216.34")
	h.resolve("private.test", "10.0.0.7")
	resp, _ := h.do(h.client(), "GET", "http://public.test/", "", nil)
	if resp.StatusCode != 200 || *asked.Load() != "93.184.216.34:80" {
		t.Fatalf("report mode: %d", resp.StatusCode)
	}
	if r := h.waitRecords(1)[0]; r.Verdict != "allow" || !r.WouldDeny || r.Addr != "93.184.216.34:80" {
		t.Fatalf("record %+v", r)
	}
	// Report mode never opens the floor: a private address stays denied.
	resp, _ = h.do(h.client(), "GET", "http://private.test/", "", nil)
	if resp.StatusCode != 403 || up.n.Load() != 1 {
		t.Fatalf("report mode to a private address: %d", resp.StatusCode)
	}
}

func TestPolicyReloadAndBrokenPolicy(t *testing.T) {
	var up seen
	_, port := newPlainUpstream(t, up.handler("ok"))
	good := policy(`{"name": "lo", "match": {"host": "127.0.0.1", "network": "127.0.0.0/8"}, "verdict": "allow"}`)
	h := startGateway(t, good, nil)
	c := h.client()
	u := fmt.Sprintf("http://127.0.0.1:%d/", port)
	if resp, _ := h.do(c, "GET", u, "", nil); resp.StatusCode != 200 {
		t.Fatalf("good policy: %d", resp.StatusCode)
	}
	for _, bad := range []string{"", good[:len(good)/2], strings.Replace(good, `"verdict": "allow"`, `"verdict": "permit"`, 1),
		strings.Replace(good, `"verdict"`, `"unknown": 1, "verdict"`, 1), strings.Replace(good, `"rules"`, `"Rules"`, 1)} {
		h.writePolicy(bad)
		resp, _ := h.do(c, "GET", u, "", nil)
		if resp.StatusCode != 403 {
			t.Fatalf("policy %q: %d, want 403", bad, resp.StatusCode)
		}
		if r := h.last(); !strings.Contains(r.Reason, "policy unusable") {
			t.Fatalf("policy %q: reason %q", bad, r.Reason)
		}
	}
	// Each distinct breakage is logged once, not once per request.
	h.do(c, "GET", u, "", nil)
	if n := strings.Count(h.log.String(), "denies everything"); n != 5 {
		t.Errorf("%d log lines about a broken policy, want 5:\n%s", n, h.log)
	}
	h.changePolicy(func() error { return os.Remove(h.policyPath) })
	if resp, _ := h.do(c, "GET", u, "", nil); resp.StatusCode != 403 {
		t.Fatalf("missing policy: %d", resp.StatusCode)
	}
	h.writePolicy(good)
	if resp, _ := h.do(c, "GET", u, "", nil); resp.StatusCode != 200 {
		t.Fatalf("fixed policy: %d", resp.StatusCode)
	}
}

func TestTunnel(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() { io.Copy(c, c); c.Close() }()
		}
	}()
	port := ln.Addr().(*net.TCPAddr).Port
	h := startGateway(t, policy(`{"name": "pinned", "match": {"host": "pinned.test", "network": "127.0.0.0/8"}, "verdict": "tunnel"}`), nil)
	h.resolve("pinned.test", "127.0.0.1")
	c, err := net.Dial("tcp", h.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	fmt.Fprintf(c, "CONNECT pinned.test:%d HTTP/1.1\r\nHost: pinned.test:%d\r\n\r\nearly", port, port)
	c.SetDeadline(time.Now().Add(5 * time.Second))
	buf := make([]byte, 64)
	n, _ := io.ReadAtLeast(c, buf, len("HTTP/1.1 200 Connection established\r\n\r\nearly"))
	if got := string(buf[:n]); got != "HTTP/1.1 200 Connection established\r\n\r\nearly" {
		t.Fatalf("got %q", got)
	}
	io.WriteString(c, "ping")
	n, _ = io.ReadFull(c, buf[:4])
	if string(buf[:n]) != "ping" {
		t.Fatalf("echo %q", buf[:n])
	}
	c.(*net.TCPConn).CloseWrite()
	io.ReadAll(c)
	r := h.waitRecords(1)[0]
	if r.Verdict != "tunnel" || r.Rule != "pinned" || r.BytesIn != 9 || r.BytesOut != 9 || r.Request.Method != "CONNECT" {
		t.Fatalf("record %+v", r)
	}
}

func TestControlAPI(t *testing.T) {
	h := startGateway(t, policy(`{"name": "all", "match": {"host": "*", "network": ["0.0.0.0/0", "::/0"]}, "verdict": "allow"}`), nil)
	for _, tc := range []struct {
		req    string
		status string
		body   string
	}{
		{"GET /v1/health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n", "200", `{"status":"ok"}`},
		{"GET /v1/actions HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n", "404", `"error"`},
		{"POST /v1/health HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\nConnection: close\r\n\r\n", "405", `"error"`},
		{"GET /ca/ca.key HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n", "404", `"error"`},
		{"GET /v1/../ca/ca.key HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n", "404", `"error"`},
		// The gateway's own address, as a proxy target, is a loop.
		{"GET http://" + h.addr + "/v1/health HTTP/1.1\r\nHost: " + h.addr + "\r\nConnection: close\r\n\r\n", "403", "own listener"},
		{"CONNECT " + h.addr + " HTTP/1.1\r\nHost: " + h.addr + "\r\nConnection: close\r\n\r\n", "403", "own listener"},
	} {
		got := h.raw(tc.req, 3*time.Second)
		if !strings.HasPrefix(got, "HTTP/1.1 "+tc.status+" ") || !strings.Contains(got, tc.body) {
			t.Errorf("%q:\n%s", tc.req, got)
		}
	}
	key, _ := os.ReadFile(filepath.Join(h.home, "ca", "ca.key"))
	raw, _ := os.ReadFile(h.decisions)
	if strings.Contains(string(raw), string(key[30:60])) {
		t.Fatal("CA key material in the log")
	}
}

func TestAuthenticateHook(t *testing.T) {
	var up seen
	ups := newTLSUpstream(t, up.handler("ok"))
	h := startGateway(t, policy(`{"name": "yuko-only", "match": {"host": "api.test", "subject": "yuko", "network": "127.0.0.0/8"}, "verdict": "allow"}`),
		func(c *Config) {
			c.UpstreamCA = ups.bundle
			c.Authenticate = func(_ net.Conn, pa string) (string, string, error) {
				switch pa {
				case "Basic eXVrbzpzZWNyZXQ=": // yuko:secret
					return "yuko", "", nil
				case "":
					return "", "", fmt.Errorf("no credentials")
				}
				return "", "", fmt.Errorf("unknown credentials")
			}
		})
	h.resolve("api.test", "127.0.0.1")
	authority := fmt.Sprintf("api.test:%d", ups.port)
	got := h.raw("CONNECT "+authority+" HTTP/1.1\r\nHost: "+authority+"\r\nConnection: close\r\n\r\n", 2*time.Second)
	if !strings.HasPrefix(got, "HTTP/1.1 407 ") || !strings.Contains(got, "Proxy-Authenticate: Basic") {
		t.Fatalf("no credentials: %q", got)
	}
	c, err := net.Dial("tcp", h.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	fmt.Fprintf(c, "CONNECT %s HTTP/1.1\r\nHost: %s\r\nProxy-Authorization: Basic eXVrbzpzZWNyZXQ=\r\n\r\n", authority, authority)
	c.SetDeadline(time.Now().Add(5 * time.Second))
	buf := make([]byte, len("HTTP/1.1 200 Connection established\r\n\r\n"))
	if _, err := io.ReadFull(c, buf); err != nil || !strings.HasPrefix(string(buf), "HTTP/1.1 200") {
		t.Fatalf("CONNECT with credentials: %q %v", buf, err)
	}
	recs := h.records()
	if r := recs[len(recs)-1]; r.Verdict != "deny" || r.Status != 407 || r.RefusedBy != RefusedByGateway {
		t.Fatalf("407 record %+v", r)
	}
	// The requests inside the tunnel are the CONNECT's subject's.
	tc, br, err := tlsInside(c, h, "api.test")
	if err != nil {
		t.Fatal(err)
	}
	io.WriteString(tc, "GET / HTTP/1.1\r\nHost: api.test\r\n\r\n")
	resp, err := http.ReadResponse(br, nil)
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("inside the tunnel: %v %v", resp, err)
	}
	io.Copy(io.Discard, resp.Body)
	r := h.waitRecords(2)[1]
	if r.Request.Imp != "yuko" || r.Rule != "yuko-only" || r.Request.Headers["proxy-authorization"] != "" {
		t.Fatalf("record %+v", r)
	}
	if (*up.header.Load()).Get("Proxy-Authorization") != "" {
		t.Fatal("Proxy-Authorization reached the upstream")
	}
}

// An address of one of the host's interfaces, on the gateway's port,
// reaches the gateway however it listens: a loop.
func TestLoopThroughInterfaceAddress(t *testing.T) {
	var ip netip.Addr
	addrs, _ := net.InterfaceAddrs()
	for _, a := range addrs {
		if p, err := netip.ParsePrefix(a.String()); err == nil && !p.Addr().IsLoopback() && p.Addr().Is4() {
			ip = p.Addr()
			break
		}
	}
	if !ip.IsValid() {
		t.Skip("no non-loopback IPv4 interface address")
	}
	h := startGateway(t, policy(`{"name": "all", "match": {"host": "*", "network": ["0.0.0.0/0", "::/0"]}, "verdict": "allow"}`), nil)
	_, port, _ := net.SplitHostPort(h.addr)
	target := net.JoinHostPort(ip.String(), port)
	got := h.raw("GET http://"+target+"/v1/health HTTP/1.1\r\nHost: "+target+"\r\nConnection: close\r\n\r\n", 3*time.Second)
	if !strings.HasPrefix(got, "HTTP/1.1 403 ") || !strings.Contains(got, "own listener") {
		t.Fatalf("%s:\n%s", target, got)
	}
}

// A control API failure's detail, which may name files, goes to the log;
// the client learns only that it happened.
func TestControlInternalErrorIsGeneric(t *testing.T) {
	h := startGateway(t, policy(), func(c *Config) {
		c.Control = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.WriteHeader(http.StatusInternalServerError)
			fmt.Fprintf(w, `{"error":"open %s/secrets/x: permission denied"}`, c.Home)
		})
	})
	got := h.raw("GET /v1/gates HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n", 3*time.Second)
	if !strings.HasPrefix(got, "HTTP/1.1 500 ") || strings.Contains(got, h.home) || !strings.Contains(got, "internal error") {
		t.Fatalf("answer:\n%s", got)
	}
	if !strings.Contains(h.log.String(), h.home+"/secrets/x: permission denied") {
		t.Fatalf("the log lost the detail:\n%s", h.log)
	}
}

// The bytes of a forwarded exchange are metered once, with its outcome.
func TestMeteredOnce(t *testing.T) {
	var up seen
	_, port := newPlainUpstream(t, up.handler("reply"))
	var mu sync.Mutex
	metered := map[string]int64{}
	h := startGateway(t, policy(`{"name": "lo", "match": {"host": "127.0.0.1", "network": "127.0.0.0/8"}, "verdict": "allow"}`),
		func(c *Config) {
			c.Authenticate = func(net.Conn, string) (string, string, error) { return "yuko", "", nil }
			c.Meter = func(sp Spend) {
				mu.Lock()
				defer mu.Unlock()
				metered[sp.Subject] += sp.Bytes
			}
		})
	if resp, _ := h.do(h.client(), "POST", "http://127.0.0.1:"+itoa(port)+"/", "hello", nil); resp.StatusCode != 200 {
		t.Fatalf("status %d", resp.StatusCode)
	}
	r := h.waitRecords(1)[0]
	if r.BytesIn != 5 || r.BytesOut != 5 {
		t.Fatalf("record %+v", r)
	}
	mu.Lock()
	defer mu.Unlock()
	if metered["yuko"] != 10 {
		t.Fatalf("metered %v, want 10 bytes for yuko", metered)
	}
}

// The policy is read once per request, when its head arrives; a request
// with a body is judged by the policy as it is once the body is in, so
// an edit made while the body was still arriving decides it.
func TestPolicyEditedDuringTheBody(t *testing.T) {
	var up seen
	_, port := newPlainUpstream(t, up.handler("ok"))
	allow := policy(`{"name": "lo", "match": {"host": "127.0.0.1", "network": "127.0.0.0/8"}, "verdict": "allow"}`)
	h := startGateway(t, allow, nil)
	c, err := net.Dial("tcp", h.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	fmt.Fprintf(c, "POST http://127.0.0.1:%d/ HTTP/1.1\r\nHost: 127.0.0.1:%d\r\nContent-Type: text/plain\r\nContent-Length: 5\r\nExpect: 100-continue\r\n\r\n", port, port)
	// The head is read and the body awaited before the policy changes:
	// the gateway says so with its 100 Continue. A sleep here stood for
	// it, and on a loaded machine let the policy change before the head
	// was read, when the test no longer tells the two policies apart.
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, nil)
	if err != nil || resp.StatusCode != http.StatusContinue {
		t.Fatalf("before the body: %v %v, want 100 Continue", resp, err)
	}
	h.writePolicy(policy(`{"name": "none", "match": {"host": "nowhere.test"}, "verdict": "allow"}`))
	io.WriteString(c, "hello")
	resp, err = http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 403 || up.n.Load() != 0 {
		t.Fatalf("a body sent after the policy stopped allowing it: %d, upstream saw %d requests", resp.StatusCode, up.n.Load())
	}
	// Without a body the policy of the head's arrival judges: allowed again,
	// a GET goes through at once.
	h.writePolicy(allow)
	if resp, _ := h.do(h.client(), "GET", fmt.Sprintf("http://127.0.0.1:%d/", port), "", nil); resp.StatusCode != 200 {
		t.Fatalf("GET after the policy allowed again: %d", resp.StatusCode)
	}
}
