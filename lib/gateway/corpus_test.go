package gateway

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// corpusPolicy allows ordinary traffic to the fake upstreams, so that each
// corpus entry is stopped by what is hostile about it.
const corpusPolicy = `{"schema": "impyard.policy/1", "redact": ["X-Session-Secret"], "rules": [
  {"name": "public-admin", "match": {"host": "sink.test", "pathPrefix": "/public/admin"}, "verdict": "deny"},
  {"name": "sink", "match": {"host": "sink.test", "method": ["GET", "POST"], "pathPrefix": "/public", "network": "127.0.0.0/8"}, "verdict": "allow"},
  {"name": "mcp-read", "match": {"host": "mcp.test", "network": "127.0.0.0/8", "mcp": {"method": "tools/call", "tool": "get_*"}}, "verdict": "allow"},
  {"name": "mail", "match": {"protocol": "https", "host": "mail.test", "method": "POST", "network": "127.0.0.0/8"}, "verdict": "allow",
   "inject": {"header": "authorization", "secret": "resend", "format": "Bearer %s"}},
  {"name": "loop-tunnel", "match": {"host": ["tunnel.loop.test", "0.0.0.0", "::"], "port": {{GWPORT}},
   "network": ["127.0.0.0/8", "0.0.0.0/32", "::/128"]}, "verdict": "tunnel"},
  {"name": "loop-test", "match": {"host": ["loop.test", "*.loop.test", "127.0.0.1", "127.0.0.2", "0.0.0.0", "::", "::1"], "port": {{GWPORT}},
   "network": ["127.0.0.0/8", "0.0.0.0/32", "::/128", "::1/128"]}, "verdict": "allow"},
  {"name": "open-tunnel", "match": {"host": "open.tunnel.test", "network": "127.0.0.0/8"}, "verdict": "tunnel"},
  {"name": "tunnels", "match": {"host": "*.tunnel.test"}, "verdict": "tunnel"},
  {"name": "any-http-get", "match": {"protocol": "http", "host": "*", "method": "GET"}, "verdict": "allow"},
  {"name": "example-https-get", "match": {"protocol": "https", "host": ["*.example", "93.184.216.34"], "method": "GET"}, "verdict": "allow"}
]}`

type corpusEntry struct {
	name      string
	line      int
	status    int
	verdict   string
	tunnel    string
	sni       string
	handshake bool   // the TLS handshake inside the CONNECT must fail
	loop      bool   // the record must say the destination is the gateway itself
	rule      string // the rule the record must name, if set
	request   string
}

// parseCorpus reads testdata/hostile.txt (format described at its top).
func parseCorpus(t *testing.T, vars map[string]string) []corpusEntry {
	data, err := os.ReadFile("testdata/hostile.txt")
	if err != nil {
		t.Fatal(err)
	}
	var out []corpusEntry
	var cur *corpusEntry
	var req strings.Builder
	flush := func() {
		if cur != nil {
			cur.request = expandLen(req.String())
			out = append(out, *cur)
		}
		req.Reset()
	}
	for i, line := range strings.Split(string(data), "\n") {
		line = expandVars(line, vars)
		switch {
		case strings.HasPrefix(line, "=== "):
			flush()
			cur = &corpusEntry{name: line[4:], line: i + 1, handshake: false}
		case strings.HasPrefix(line, "expect "):
			for _, kv := range strings.Fields(line[len("expect "):]) {
				k, v, _ := strings.Cut(kv, "=")
				switch k {
				case "status":
					cur.status, _ = strconv.Atoi(v)
				case "verdict":
					cur.verdict = v
				case "tunnel":
					cur.tunnel = v
				case "sni":
					cur.sni = v
				case "handshake":
					cur.handshake = v == "fail"
				case "loop":
					cur.loop = true
				case "rule":
					cur.rule = v
				default:
					t.Fatalf("hostile.txt:%d: unknown %q", i+1, k)
				}
			}
		case line == ">" || strings.HasPrefix(line, "> "):
			text := strings.TrimPrefix(strings.TrimPrefix(line, ">"), " ")
			text, noEOL := strings.CutSuffix(text, `\c`)
			req.WriteString(unescape(t, text))
			if !noEOL {
				req.WriteString("\r\n")
			}
		}
	}
	flush()
	return out
}

func expandVars(line string, vars map[string]string) string {
	for k, v := range vars {
		line = strings.ReplaceAll(line, "{{"+k+"}}", v)
	}
	for {
		i := strings.Index(line, "{{BIG:")
		if i < 0 {
			break
		}
		j := strings.Index(line[i:], "}}") + i
		n, _ := strconv.Atoi(line[i+6 : j])
		line = line[:i] + strings.Repeat("a", n) + line[j+2:]
	}
	if i := strings.Index(line, "{{FIELDS:"); i >= 0 {
		j := strings.Index(line[i:], "}}") + i
		n, _ := strconv.Atoi(line[i+9 : j])
		var fields []string
		for k := range n {
			fields = append(fields, fmt.Sprintf("X-Field-%d: %d", k, k))
		}
		line = line[:i] + strings.Join(fields, "\r\n") + line[j+2:]
	}
	return line
}

// expandLen fills {{LEN}} with the length of what follows the head.
func expandLen(req string) string {
	_, body, ok := strings.Cut(req, "\r\n\r\n")
	if !ok {
		return req
	}
	return strings.ReplaceAll(req, "{{LEN}}", strconv.Itoa(len(body)))
}

func unescape(t *testing.T, s string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] != '\\' || i+1 == len(s) {
			b.WriteByte(s[i])
			continue
		}
		i++
		switch s[i] {
		case 'r':
			b.WriteByte('\r')
		case 'n':
			b.WriteByte('\n')
		case 't':
			b.WriteByte('\t')
		case '0':
			b.WriteByte(0)
		case '\\':
			b.WriteByte('\\')
		case 'x':
			v, err := strconv.ParseUint(s[i+1:i+3], 16, 8)
			if err != nil {
				t.Fatalf("bad escape in %q", s)
			}
			b.WriteByte(byte(v))
			i += 2
		default:
			// Not an escape of ours (JSON's \u0000, a literal backslash).
			b.WriteByte('\\')
			b.WriteByte(s[i])
		}
	}
	return b.String()
}

func TestHostileCorpus(t *testing.T) {
	var plain, secure seen
	_, sinkPort := newPlainUpstream(t, plain.handler("ok"))
	tlsSink := newTLSUpstream(t, secure.handler("ok"))
	tcpSink := newTCPSink(t)
	h := startGateway(t, strings.ReplaceAll(corpusPolicy, "{{GWPORT}}", "1"), func(c *Config) {
		c.UpstreamCA = tlsSink.bundle
		c.Limits.MaxHeaderBytes = 8192
		c.Limits.MaxBodyBytes = 4096
		c.Limits.ReadHeaderTimeout = 500 * time.Millisecond
		c.Limits.ReadBodyTimeout = 500 * time.Millisecond
	})
	_, gwPort, _ := net.SplitHostPort(h.addr)
	// The loop rules allow the gateway's own port, known only now.
	h.writePolicy(strings.ReplaceAll(corpusPolicy, "{{GWPORT}}", gwPort))
	for name, addrs := range map[string][]string{
		"sink.test": {"127.0.0.1"}, "mcp.test": {"127.0.0.1"}, "mail.test": {"127.0.0.1"}, "loop.test": {"127.0.0.1"},
		"rebind.example": {"127.0.0.1"}, "private.example": {"10.0.0.1"}, "cgnat.example": {"100.64.0.1"},
		"metadata.example": {"169.254.169.254"}, "mapped.example": {"::ffff:127.0.0.1"}, "v6lo.example": {"::1"},
		"nat64.example": {"64:ff9b::a00:1"}, "ula.example": {"fd12:3456::1"}, "mixed.example": {"10.0.0.1", "192.168.0.1", "127.0.0.1"},
		"unspec.example": {"0.0.0.0"}, "zero.loop.test": {"0.0.0.0"}, "six.loop.test": {"::"}, "v6.loop.test": {"::1"},
		"two.loop.test": {"127.0.0.2"}, "tunnel.loop.test": {"0.0.0.0"}, "rebind.tunnel.test": {"127.0.0.1"}, "private.tunnel.test": {"10.0.0.9"},
		"open.tunnel.test": {"127.0.0.1"},
	} {
		h.resolve(name, addrs...)
	}

	// The policy does let ordinary requests through to each fake upstream:
	// what stops the corpus is what is hostile about it.
	c := h.client()
	for _, u := range []string{fmt.Sprintf("http://sink.test:%d/public", sinkPort), fmt.Sprintf("https://sink.test:%d/public", tlsSink.port)} {
		if resp, _ := h.do(c, "GET", u, "", nil); resp.StatusCode != 200 {
			t.Fatalf("control request %s: %d", u, resp.StatusCode)
		}
	}
	if resp, _ := h.do(c, "POST", fmt.Sprintf("https://mcp.test:%d/mcp", tlsSink.port),
		`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"get_issue"}}`, map[string]string{"Content-Type": "application/json"}); resp.StatusCode != 200 {
		t.Fatalf("control MCP request: %d", resp.StatusCode)
	}
	c.CloseIdleConnections()
	// A raw tunnel the policy allows reaches the TCP sink.
	tc, err := net.Dial("tcp", h.addr)
	if err != nil {
		t.Fatal(err)
	}
	fmt.Fprintf(tc, "CONNECT open.tunnel.test:%d HTTP/1.1\r\nHost: open.tunnel.test:%d\r\n\r\n", tcpSink.port, tcpSink.port)
	if resp, err := http.ReadResponse(bufio.NewReader(tc), nil); err != nil || resp.StatusCode != 200 {
		t.Fatalf("control tunnel: %v %v", resp, err)
	}
	tc.Close()
	if n := tcpSink.hits(t); n != 1 {
		t.Fatalf("the control tunnel reached the TCP sink %d times, want once", n)
	}
	h.waitRecords(4)
	plain.n.Store(0)
	secure.n.Store(0)

	entries := parseCorpus(t, map[string]string{
		"SINK": strconv.Itoa(sinkPort), "TLS": strconv.Itoa(tlsSink.port), "TCP": strconv.Itoa(tcpSink.port), "GW": h.addr, "GWPORT": gwPort,
	})
	if len(entries) < 100 {
		t.Fatalf("the corpus has %d entries, want at least 100", len(entries))
	}
	for _, e := range entries {
		t.Run(e.name, func(t *testing.T) {
			before := len(h.records())
			status, id := h.runEntry(t, e)
			where := fmt.Sprintf("hostile.txt:%d", e.line)
			if e.handshake {
				if status != -1 {
					t.Fatalf("%s: the TLS handshake succeeded", where)
				}
			} else if status != e.status {
				t.Fatalf("%s: status %d, want %d", where, status, e.status)
			}
			recs := h.records()
			if e.handshake {
				// The client sees the handshake fail as the gateway records
				// why: the record may follow by a moment.
				recs = h.waitRecords(before + 1)
			}
			if len(recs) != before+1 {
				t.Fatalf("%s: %d new records, want 1", where, len(recs)-before)
			}
			r := recs[len(recs)-1]
			if id != "" && r.ID != id {
				t.Fatalf("%s: the response names decision %s, the record is %s", where, id, r.ID)
			}
			if r.Verdict != e.verdict {
				t.Fatalf("%s: record verdict %s (%s), want %s", where, r.Verdict, r.Reason, e.verdict)
			}
			if e.rule != "" && r.Rule != e.rule {
				t.Fatalf("%s: decided by rule %q (%s), want %q", where, r.Rule, r.Reason, e.rule)
			}
			if e.loop && !strings.Contains(r.Reason, "gateway's own listener (a loop)") {
				t.Fatalf("%s: refused for %q, not as a loop", where, r.Reason)
			}
		})
	}
	if n := plain.n.Load() + secure.n.Load(); n != 0 {
		t.Fatalf("fake upstreams saw %d requests from the corpus", n)
	}
	if raw, _ := os.ReadFile(h.decisions); strings.Contains(string(raw), "hunter2") {
		t.Fatal("a credential from the corpus is in the decision log")
	}
	if n := tcpSink.hits(t); n != 1 {
		t.Fatalf("the TCP sink saw %d connections from the corpus", n-1)
	}
}

// tcpSink is a raw TCP upstream for tunnels: it logs the peer of every
// connection it accepts and closes it.
type tcpSink struct {
	ln    net.Listener
	port  int
	mu    sync.Mutex
	peers []string
}

func newTCPSink(t *testing.T) *tcpSink {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := &tcpSink{ln: ln, port: ln.Addr().(*net.TCPAddr).Port}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			s.mu.Lock()
			s.peers = append(s.peers, c.RemoteAddr().String())
			s.mu.Unlock()
			c.Close()
		}
	}()
	return s
}

// hits returns how many connections the sink accepted. Connections are
// accepted in the order they arrive, so once one the test makes itself
// is accepted, every earlier one is counted; that one is not.
func (s *tcpSink) hits(t *testing.T) int {
	c, err := net.Dial("tcp", s.ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	me := c.LocalAddr().String()
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(time.Millisecond) {
		s.mu.Lock()
		for i, p := range s.peers {
			if p == me {
				s.peers = append(s.peers[:i], s.peers[i+1:]...)
				n := len(s.peers)
				s.mu.Unlock()
				return n
			}
		}
		s.mu.Unlock()
	}
	t.Fatal("the TCP sink did not accept the test's own connection")
	return 0
}

// runEntry sends one corpus entry and returns the status the gateway
// answered with (-1 for a failed TLS handshake) and the decision id it
// named.
func (h *harness) runEntry(t *testing.T, e corpusEntry) (int, string) {
	var rw io.ReadWriter
	var br *bufio.Reader
	if e.tunnel != "" {
		sni := e.sni
		if sni == "" {
			sni, _, _ = net.SplitHostPort(e.tunnel)
		}
		tc, tbr, err := h.connectTLS(e.tunnel, sni)
		if err != nil {
			if e.handshake {
				return -1, ""
			}
			t.Fatalf("tunnel to %s: %v", e.tunnel, err)
		}
		defer tc.Close()
		tc.SetDeadline(time.Now().Add(5 * time.Second))
		rw, br = tc, tbr
	} else {
		c, err := net.Dial("tcp", h.addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		c.SetDeadline(time.Now().Add(5 * time.Second))
		rw, br = c, bufio.NewReader(c)
	}
	// A write may fail once the gateway has answered and closed.
	go io.Copy(rw, bytes.NewReader([]byte(e.request)))
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatalf("no answer: %v", err)
	}
	resp.Body.Close()
	return resp.StatusCode, resp.Header.Get("X-Impgw-Decision")
}
