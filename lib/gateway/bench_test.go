package gateway

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/impyard/impyard/lib/judge"
)

var kib = strings.Repeat("x", 1024)

// benchSetup starts a 1 KiB HTTPS upstream and a gateway allowing it.
func benchSetup(b *testing.B) (*testUpstream, *harness) {
	ups := newTLSUpstream(b, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, kib) }))
	h := startGateway(b, policy(`{"name": "bench", "match": {"host": "api.test", "method": "GET", "network": "127.0.0.0/8"}, "verdict": "allow"}`),
		func(c *Config) { c.UpstreamCA = ups.bundle })
	h.resolve("api.test", "127.0.0.1")
	return ups, h
}

// directClient trusts the upstream's CA and connects straight to it.
func directClient(ups *testUpstream, keepAlive bool) *http.Client {
	caCert, _ := upstreamCA()
	pool := x509.NewCertPool()
	pool.AddCert(caCert)
	return &http.Client{Transport: &http.Transport{
		TLSClientConfig:     &tls.Config{RootCAs: pool, ServerName: "api.test"},
		MaxIdleConnsPerHost: 64,
		DisableKeepAlives:   !keepAlive,
		TLSNextProto:        map[string]func(string, *tls.Conn) http.RoundTripper{},
	}}
}

func proxyClient(h *harness, keepAlive bool) *http.Client {
	pool := x509.NewCertPool()
	pool.AddCert(h.ca.Cert)
	proxy, _ := url.Parse("http://" + h.addr)
	return &http.Client{Transport: &http.Transport{
		Proxy:               http.ProxyURL(proxy),
		TLSClientConfig:     &tls.Config{RootCAs: pool},
		MaxIdleConnsPerHost: 64,
		DisableKeepAlives:   !keepAlive,
		TLSNextProto:        map[string]func(string, *tls.Conn) http.RoundTripper{},
	}}
}

// load runs b.N GETs of u over conns concurrent clients and reports
// requests per second and latency percentiles.
func load(b *testing.B, c *http.Client, u string, conns int) {
	b.Helper()
	var mu sync.Mutex
	lat := make([]time.Duration, 0, b.N)
	work := make(chan struct{}, b.N)
	for range b.N {
		work <- struct{}{}
	}
	close(work)
	b.ResetTimer()
	start := time.Now()
	var wg sync.WaitGroup
	for range conns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range work {
				t0 := time.Now()
				resp, err := c.Get(u)
				if err != nil {
					b.Error(err)
					return
				}
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				if resp.StatusCode != 200 {
					b.Errorf("status %d", resp.StatusCode)
					return
				}
				d := time.Since(t0)
				mu.Lock()
				lat = append(lat, d)
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	b.StopTimer()
	sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
	if len(lat) > 0 {
		b.ReportMetric(float64(len(lat))/elapsed.Seconds(), "req/s")
		b.ReportMetric(float64(lat[len(lat)/2].Microseconds()), "p50-µs")
		b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds()), "p99-µs")
	}
}

// BenchmarkKeepAlive is 1 KiB HTTPS GETs over 8 kept-alive connections,
// straight to the upstream and through the gateway, in the same run.
func BenchmarkKeepAlive(b *testing.B) {
	ups, h := benchSetup(b)
	u := fmt.Sprintf("https://api.test:%d/", ups.port)
	b.Run("direct", func(b *testing.B) {
		c := directClient(ups, true)
		load(b, c, strings.Replace(u, "api.test", "127.0.0.1", 1), 8)
	})
	b.Run("impgw", func(b *testing.B) {
		load(b, proxyClient(h, true), u, 8)
	})
}

// BenchmarkNewConnection is one request per new connection: the TLS
// handshake directly, against CONNECT, handshake and request through the
// gateway.
func BenchmarkNewConnection(b *testing.B) {
	ups, h := benchSetup(b)
	u := fmt.Sprintf("https://api.test:%d/", ups.port)
	b.Run("direct", func(b *testing.B) {
		load(b, directClient(ups, false), strings.Replace(u, "api.test", "127.0.0.1", 1), 1)
	})
	b.Run("impgw", func(b *testing.B) {
		load(b, proxyClient(h, false), u, 1)
	})
}

// BenchmarkJudge50 is the judge's cost per request against a 50-rule
// policy whose last rule decides.
func BenchmarkJudge50(b *testing.B) {
	var rules []string
	for i := range 49 {
		rules = append(rules, fmt.Sprintf(`{"name": "r%d", "match": {"host": "svc%d.example.com", "method": ["POST", "PUT"], "pathPrefix": "/v%d/"}, "verdict": "allow"}`, i, i, i))
	}
	rules = append(rules, `{"name": "last", "match": {"host": "*.example.org", "method": "GET", "pathPrefix": "/api/"}, "verdict": "allow"}`)
	p, err := judge.Parse([]byte(policy(rules...)))
	if err != nil {
		b.Fatal(err)
	}
	r := &judge.Request{Protocol: "https", Method: "GET", Host: "www.example.org", Port: 443, Path: "/api/items", Header: http.Header{"Accept": {"*/*"}}}
	r.Addr = mustAddr("93.184.216.34")
	b.ReportAllocs()
	for b.Loop() {
		if d := p.Judge(r); d.Verdict != judge.Allow {
			b.Fatal(d.Reason)
		}
	}
}

// BenchmarkMeteredStream streams 1 MiB of model SSE (OpenAI chunks,
// usage in the last) through a metering rule, beside the same stream
// through an unmetered rule, through a metering rule of a gateway that
// does not sync its records, through a bare relay that terminates TLS
// and copies bytes (no HTTP, nothing judged, recorded or metered: what
// a second TLS leg alone costs), and straight from the upstream
// (keep-alive, the same client settings), taking turns so drift in the
// machine's load falls on all alike. Besides throughput it reports the
// median time to the first byte of the body, which a meter that
// buffered would delay: the upstream flushes the first event alone
// before the rest. Each path also takes a held stream, whose rest the
// upstream sends only once the first byte was read, for the first
// byte's time alone (held-*). It reports; it never fails on the time.
func BenchmarkMeteredStream(b *testing.B) {
	stream := modelStream()
	chunk := stream[:strings.Index(stream, "\n\n")+2]
	// A held stream's rest waits until its first byte was read, as a
	// model's next tokens come later: the first byte's time then has no
	// share of the upstream, in this process, encrypting the rest on the
	// same two cores.
	seen := make(chan struct{}, 1)
	ups := newTLSUpstream(b, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		io.WriteString(w, chunk)
		w.(http.Flusher).Flush()
		if r.Header.Get("X-Bench-Hold") != "" {
			select {
			case <-seen:
			case <-r.Context().Done():
				return
			}
		}
		io.WriteString(w, stream[len(chunk):])
	}))
	var metered sync.Map
	gw := func(unsynced bool) *http.Client {
		h := startGateway(b, policy(
			`{"name": "metered", "match": {"host": "m.api.test", "network": "127.0.0.0/8"}, "verdict": "allow", "meter": "openai"}`,
			`{"name": "plain", "match": {"host": "p.api.test", "network": "127.0.0.0/8"}, "verdict": "allow"}`),
			func(c *Config) {
				c.UpstreamCA = ups.bundle
				c.Unsynced = unsynced
				c.Authenticate = func(net.Conn, string) (string, string, error) { return "yuko", "", nil }
				c.Meter = func(sp Spend) {
					if sp.Usage != nil {
						metered.Store(sp.Usage.OutputTokens, true)
					}
				}
			})
		h.resolve("m.api.test", "127.0.0.1")
		h.resolve("p.api.test", "127.0.0.1")
		return proxyClient(h, true)
	}
	c := gw(false)
	// The same metered stream through a gateway that does not sync its
	// decision record before forwarding: how much of the first byte's
	// delay is that sync, the durability promise's price.
	nosync := gw(true)
	direct := directClient(ups, true)
	relayPort := bareRelay(b, ups)
	type path struct {
		c     *http.Client
		host  string
		port  int
		total time.Duration
		ttfb  []time.Duration
		held  []time.Duration // the first byte's time of held streams
	}
	paths := []*path{{c: c, host: "m.api.test"}, {c: c, host: "p.api.test"}, {c: direct, host: "127.0.0.1"}, {c: nosync, host: "m.api.test"}, {c: direct, host: "127.0.0.1", port: relayPort}}
	for _, p := range paths {
		if p.port == 0 {
			p.port = ups.port
		}
	}
	get := func(p *path, timed, hold bool) {
		req, err := http.NewRequest("GET", fmt.Sprintf("https://%s:%d/v1/chat/completions", p.host, p.port), nil)
		if err != nil {
			b.Fatal(err)
		}
		if hold {
			req.Header.Set("X-Bench-Hold", "1")
		}
		t0 := time.Now()
		resp, err := p.c.Do(req)
		if err != nil {
			b.Fatal(err)
		}
		var first [1]byte
		n, err := io.ReadFull(resp.Body, first[:])
		ttfb := time.Since(t0)
		if hold {
			seen <- struct{}{}
		}
		if err == nil {
			var m int64
			m, err = io.Copy(io.Discard, resp.Body)
			n += int(m)
		}
		resp.Body.Close()
		if err != nil || n != len(stream) {
			b.Fatalf("%s: %d bytes of %d, %v", p.host, n, len(stream), err)
		}
		switch {
		case timed && hold:
			p.held = append(p.held, ttfb)
		case timed:
			p.total += time.Since(t0)
			p.ttfb = append(p.ttfb, ttfb)
		}
	}
	for _, p := range paths {
		get(p, false, false)
		get(p, false, true)
	}
	b.ResetTimer()
	for i := range b.N {
		// Each path first, second, and so on in turn.
		for j := range paths {
			get(paths[(i+j)%len(paths)], true, false)
		}
		for j := range paths {
			get(paths[(i+j)%len(paths)], true, true)
		}
	}
	b.StopTimer()
	if _, ok := metered.Load(int64(200)); !ok {
		b.Fatal("the metered stream's usage was not read")
	}
	mb := float64(b.N) * float64(len(stream)) / 1e6
	withMeter, without, straight, unsynced, relay := paths[0], paths[1], paths[2], paths[3], paths[4]
	b.ReportMetric(mb/withMeter.total.Seconds(), "metered-MB/s")
	b.ReportMetric(mb/without.total.Seconds(), "plain-MB/s")
	b.ReportMetric(mb/straight.total.Seconds(), "direct-MB/s")
	b.ReportMetric(without.total.Seconds()/withMeter.total.Seconds(), "metered/plain")
	b.ReportMetric(straight.total.Seconds()/withMeter.total.Seconds(), "metered/direct")
	b.ReportMetric(mb/relay.total.Seconds(), "relay-MB/s")
	b.ReportMetric(relay.total.Seconds()/withMeter.total.Seconds(), "metered/relay")
	b.ReportMetric(straight.total.Seconds()/relay.total.Seconds(), "relay/direct")
	b.ReportMetric(float64(median(straight.ttfb).Microseconds()), "direct-ttfb-µs")
	b.ReportMetric(float64((median(withMeter.ttfb) - median(straight.ttfb)).Microseconds()), "metered-ttfb-added-µs")
	b.ReportMetric(float64((median(without.ttfb) - median(straight.ttfb)).Microseconds()), "plain-ttfb-added-µs")
	b.ReportMetric(float64((median(unsynced.ttfb) - median(straight.ttfb)).Microseconds()), "unsynced-ttfb-added-µs")
	b.ReportMetric(float64((median(relay.ttfb) - median(straight.ttfb)).Microseconds()), "relay-ttfb-added-µs")
	b.ReportMetric(float64(median(straight.held).Microseconds()), "held-direct-ttfb-µs")
	b.ReportMetric(float64((median(withMeter.held) - median(straight.held)).Microseconds()), "held-metered-ttfb-added-µs")
	b.ReportMetric(float64((median(unsynced.held) - median(straight.held)).Microseconds()), "held-unsynced-ttfb-added-µs")
	b.ReportMetric(float64((median(relay.held) - median(straight.held)).Microseconds()), "held-relay-ttfb-added-µs")
}

// bareRelay listens on a loopback port, answers TLS as ups does (its
// certificate, records sized as the gateway's client leg sizes them),
// and copies bytes each way between each connection and one of its own
// to ups: the floor for anything that terminates TLS in between.
func bareRelay(b *testing.B, ups *testUpstream) int {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { ln.Close() })
	caCert, _ := upstreamCA()
	roots := x509.NewCertPool()
	roots.AddCert(caCert)
	server := &tls.Config{Certificates: ups.TLS.Certificates, DynamicRecordSizingDisabled: true}
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				up, err := tls.Dial("tcp", fmt.Sprintf("127.0.0.1:%d", ups.port), &tls.Config{RootCAs: roots, ServerName: "api.test"})
				if err != nil {
					return
				}
				defer up.Close()
				tc := tls.Server(c, server)
				go io.Copy(up, tc)
				io.Copy(tc, up)
			}()
		}
	}()
	return ln.Addr().(*net.TCPAddr).Port
}

// modelStream is 1 MiB of OpenAI chat chunks, the usage in the last.
func modelStream() string {
	var sb strings.Builder
	chunk := `data: {"id":"c1","object":"chat.completion.chunk","model":"gpt-5","choices":[{"index":0,"delta":{"content":"` + strings.Repeat("tok ", 40) + `"}}],"usage":null}` + "\n\n"
	for sb.Len() < 1<<20 {
		sb.WriteString(chunk)
	}
	sb.WriteString(`data: {"id":"c1","model":"gpt-5","choices":[],"usage":{"prompt_tokens":100,"completion_tokens":200}}` + "\n\ndata: [DONE]\n\n")
	return sb.String()
}

func median(d []time.Duration) time.Duration {
	s := slices.Clone(d)
	slices.Sort(s)
	return s[len(s)/2]
}

// BenchmarkFrameMeter is the cost of reading a WebSocket's frames for
// usage as they are relayed: 1 MiB of Responses events, one text frame
// each, through the frame meter, against the same bytes copied plain in
// the same run.
func BenchmarkFrameMeter(b *testing.B) {
	var buf bytes.Buffer
	delta := wsFrame(1, true, false, `{"type":"response.output_text.delta","item_id":"msg_1","output_index":0,"content_index":0,"delta":"`+strings.Repeat("tok ", 40)+`"}`)
	for buf.Len() < 1<<20 {
		buf.Write(delta)
	}
	buf.Write(wsFrame(1, true, false, completed("gpt-5", 100, 200)))
	stream := buf.Bytes()
	relay := func(b *testing.B, wrap func(io.Reader) io.Reader) {
		b.SetBytes(int64(len(stream)))
		for b.Loop() {
			io.CopyBuffer(io.Discard, wrap(bytes.NewReader(stream)), make([]byte, 32<<10))
		}
	}
	b.Run("plain", func(b *testing.B) { relay(b, func(r io.Reader) io.Reader { return struct{ io.Reader }{r} }) })
	b.Run("metered", func(b *testing.B) { relay(b, func(r io.Reader) io.Reader { return meterFrames(r) }) })
}

// BenchmarkEventMeter is the cost of reading an event stream for usage
// as it is relayed: 1 MiB of OpenAI chat chunks, each with "usage":null
// as such streams send them, the last with the usage, through the
// meter in 16 KiB reads, against the same bytes copied plain in the
// same run.
func BenchmarkEventMeter(b *testing.B) {
	stream := []byte(modelStream())
	relay := func(b *testing.B, wrap func(io.Reader) io.Reader) {
		b.SetBytes(int64(len(stream)))
		buf := make([]byte, 16<<10)
		for b.Loop() {
			io.CopyBuffer(io.Discard, wrap(bytes.NewReader(stream)), buf)
		}
	}
	b.Run("plain", func(b *testing.B) { relay(b, func(r io.Reader) io.Reader { return struct{ io.Reader }{r} }) })
	b.Run("metered", func(b *testing.B) {
		relay(b, func(r io.Reader) io.Reader {
			return newUsageReader(io.NopCloser(r), judge.MeterOpenAI, "text/event-stream")
		})
	})
}

// BenchmarkDecodeBody is the cost of decoding a 64 KiB JSON request
// body for the judge, per encoding; "identity" is the body taken as it
// is.
func BenchmarkDecodeBody(b *testing.B) {
	plain := []byte(`{"model":"gpt-5","input":[` + strings.Repeat(`{"role":"user","content":"a line of a long prompt"},`, 1300) + `{}]}`)
	for _, name := range []string{"identity", "gzip", "br", "zstd"} {
		body := plain
		if enc := encoders[name]; enc != nil {
			body = enc(b, plain)
		}
		b.Run(name, func(b *testing.B) {
			b.SetBytes(int64(len(plain)))
			for b.Loop() {
				if _, err := decode(name, body, 1<<20); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
