package gateway

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"net/http"
	"net/url"
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
