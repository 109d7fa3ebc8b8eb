package gateway

import (
	"bufio"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"log"
	"math/big"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"os"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/impyard/impyard/lib/ca"
	"github.com/impyard/impyard/lib/store"
)

// harness is a live gateway on 127.0.0.1:0 with its yard, home and CA,
// and a fake DNS where *.test names resolve as the test says.
type harness struct {
	t          testing.TB
	home       string
	policyPath string
	decisions  string
	ca         *ca.CA
	caFile     string
	g          *Gateway
	addr       string
	log        *syncBuffer
	lookups    atomic.Int64

	mu  sync.Mutex
	dns map[string][]netip.Addr
}

type syncBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// testUpstream is a loopback HTTPS server with a certificate from its own
// CA for api.test, *.api.test, 127.0.0.1 and ::1; bundle is that CA's PEM.
type testUpstream struct {
	*httptest.Server
	bundle string
	port   int
}

var upstreamCA = sync.OnceValues(func() (*x509.Certificate, *ecdsa.PrivateKey) {
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "test upstream CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
	}
	der, _ := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	c, _ := x509.ParseCertificate(der)
	return c, key
})

func newTLSUpstream(t testing.TB, h http.Handler) *testUpstream {
	t.Helper()
	caCert, caKey := upstreamCA()
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(time.Now().UnixNano()), Subject: pkix.Name{CommonName: "api.test"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		DNSNames:    []string{"api.test", "*.api.test", "localhost", "sink.test", "mcp.test", "mail.test"},
		IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1), net.IPv6loopback},
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, caCert, &key.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	s := httptest.NewUnstartedServer(h)
	// Tests that check upstream verification fail handshakes on purpose.
	s.Config.ErrorLog = log.New(io.Discard, "", 0)
	s.TLS = &tls.Config{Certificates: []tls.Certificate{{Certificate: [][]byte{der}, PrivateKey: key}}}
	s.StartTLS()
	t.Cleanup(s.Close)
	bundle := filepath.Join(t.TempDir(), "upstream-ca.pem")
	if err := os.WriteFile(bundle, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caCert.Raw}), 0o644); err != nil {
		t.Fatal(err)
	}
	return &testUpstream{Server: s, bundle: bundle, port: s.Listener.Addr().(*net.TCPAddr).Port}
}

func newPlainUpstream(t testing.TB, h http.Handler) (*httptest.Server, int) {
	s := httptest.NewServer(h)
	t.Cleanup(s.Close)
	return s, s.Listener.Addr().(*net.TCPAddr).Port
}

// startGateway runs a gateway with the given policy; edit may change the
// config before it starts.
func startGateway(t testing.TB, policy string, edit func(*Config)) *harness {
	t.Helper()
	dir := t.TempDir()
	h := &harness{
		t:          t,
		home:       filepath.Join(dir, "home"),
		policyPath: filepath.Join(dir, "yard", "policies", "gateway.json"),
		decisions:  filepath.Join(dir, "yard", "runs", "decisions.jsonl"),
		log:        &syncBuffer{},
		dns:        map[string][]netip.Addr{},
	}
	for _, d := range []string{filepath.Dir(h.policyPath), filepath.Dir(h.decisions)} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	h.writePolicy(policy)
	var err error
	if h.ca, err = ca.Init(h.home); err != nil {
		t.Fatal(err)
	}
	h.caFile = ca.CertPath(h.home)
	m, err := ca.NewMinter(h.ca, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	cfg := Config{
		PolicyPath:    h.policyPath,
		DecisionsPath: h.decisions,
		Home:          h.home,
		Minter:        m,
		Limits:        DefaultLimits(),
		Log:           h.log,
		Lookup:        h.lookup,
	}
	if edit != nil {
		edit(&cfg)
	}
	if h.g, err = New(cfg); err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	h.addr = ln.Addr().String()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		// The label follows every goroutine the gateway starts, so a
		// benchmark's profile can tell its CPU from the client's and the
		// upstream's: go tool pprof -tagfocus side=gateway.
		pprof.Do(ctx, pprof.Labels("side", "gateway"), func(ctx context.Context) {
			h.g.Serve(ctx, ln, time.Second)
		})
	}()
	t.Cleanup(func() { cancel(); <-done })
	return h
}

// lookup is the fake DNS: names set with resolve, and localhost.
func (h *harness) lookup(_ context.Context, host string) ([]netip.Addr, error) {
	h.lookups.Add(1)
	h.mu.Lock()
	defer h.mu.Unlock()
	if a, ok := h.dns[host]; ok {
		return a, nil
	}
	if host == "localhost" {
		return []netip.Addr{netip.MustParseAddr("127.0.0.1")}, nil
	}
	return nil, &net.DNSError{Err: "no such host", Name: host, IsNotFound: true}
}

func (h *harness) resolve(host string, addrs ...string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, a := range addrs {
		h.dns[host] = append(h.dns[host], netip.MustParseAddr(a))
	}
}

func (h *harness) writePolicy(p string) {
	h.t.Helper()
	// Replace atomically, as an editor or deploy script would; the stat
	// check must see it even within one mtime tick, which the new inode
	// guarantees.
	tmp := h.policyPath + ".tmp"
	if err := os.WriteFile(tmp, []byte(p), 0o644); err != nil {
		h.t.Fatal(err)
	}
	h.changePolicy(func() error { return os.Rename(tmp, h.policyPath) })
}

// changePolicy changes the policy file with change and returns once the
// gateway has taken the change: it looks at the file again when its
// watch reports it, which happens after change returns.
func (h *harness) changePolicy(change func() error) {
	h.t.Helper()
	if h.g == nil {
		if err := change(); err != nil {
			h.t.Fatal(err)
		}
		return
	}
	old := h.g.policy.get()
	if err := change(); err != nil {
		h.t.Fatal(err)
	}
	for end := time.Now().Add(10 * time.Second); h.g.policy.get() == old; runtime.Gosched() {
		if time.Now().After(end) {
			h.t.Fatal("the gateway did not take the policy's change")
		}
	}
}

// records returns every decision record written so far, completed by
// its outcome line when one is written.
func (h *harness) records() []*Record {
	recs, _ := h.readRecords()
	return recs
}

// readRecords returns the records and how many of them still await
// their outcome.
func (h *harness) readRecords() ([]*Record, int) {
	h.t.Helper()
	var out []*Record
	byID := map[string]*Record{}
	open := 0
	bad, err := store.ReadJSONL(h.decisions, func(line []byte) error {
		if o, err := ParseOutcome(line); err == nil {
			r := byID[o.ID]
			if r == nil {
				return fmt.Errorf("outcome of unknown decision %s", o.ID)
			}
			r.Complete(o)
			open--
			return nil
		} else if !errors.Is(err, ErrNotOutcome) {
			return err
		}
		r, err := ParseRecord(line)
		if err != nil {
			return err
		}
		if prev := byID[r.ID]; prev != nil {
			// A forward refused because its decision was not accepted:
			// the refusal is the record.
			*prev = *r
			open--
			return nil
		}
		byID[r.ID] = r
		out = append(out, r)
		if forwarded(r) {
			open++
		}
		return nil
	})
	if err != nil || len(bad) > 0 {
		h.t.Fatalf("reading records: %v %v", err, bad)
	}
	return out, open
}

// forwarded reports a decision record written before its request went
// upstream, whose outcome follows.
func forwarded(r *Record) bool {
	return (r.Verdict == VerdictAllow || r.Verdict == VerdictTunnel) && r.RefusedBy == "" && r.Status == 0
}

// waitRecords waits until at least n records are written and complete (an
// allowed request's outcome follows its response) and returns them.
func (h *harness) waitRecords(n int) []*Record {
	h.t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		recs, open := h.readRecords()
		if len(recs) >= n && open == 0 || time.Now().After(deadline) {
			if len(recs) < n || open > 0 {
				h.t.Fatalf("%d records (%d awaiting their outcome), want %d", len(recs), open, n)
			}
			return recs
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// last returns the latest record once every record is complete: a
// forwarded request's outcome is written after its response is sent, so
// reading at once could see the decision without it.
func (h *harness) last() *Record {
	h.t.Helper()
	recs := h.waitRecords(1)
	return recs[len(recs)-1]
}

// client is an HTTP client that goes through the gateway and trusts its CA.
func (h *harness) client() *http.Client {
	pool := x509.NewCertPool()
	pool.AddCert(h.ca.Cert)
	proxy, _ := url.Parse("http://" + h.addr)
	return &http.Client{
		Transport: &http.Transport{
			Proxy:             http.ProxyURL(proxy),
			TLSClientConfig:   &tls.Config{RootCAs: pool},
			ForceAttemptHTTP2: false,
			TLSNextProto:      map[string]func(string, *tls.Conn) http.RoundTripper{},
		},
		Timeout: 10 * time.Second,
	}
}

func (h *harness) do(c *http.Client, method, u string, body string, hdr map[string]string) (*http.Response, string) {
	h.t.Helper()
	var r io.Reader
	if body != "" {
		r = strings.NewReader(body)
	}
	req, err := http.NewRequest(method, u, r)
	if err != nil {
		h.t.Fatal(err)
	}
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	resp, err := c.Do(req)
	if err != nil {
		h.t.Fatalf("%s %s: %v", method, u, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp, string(b)
}

// raw sends bytes on a new connection and returns what comes back until
// the gateway closes it or wait passes.
func (h *harness) raw(send string, wait time.Duration) string {
	h.t.Helper()
	c, err := net.Dial("tcp", h.addr)
	if err != nil {
		h.t.Fatal(err)
	}
	defer c.Close()
	if _, err := io.WriteString(c, send); err != nil {
		h.t.Fatal(err)
	}
	c.SetReadDeadline(time.Now().Add(wait))
	b, _ := io.ReadAll(c)
	return string(b)
}

// connectTLS opens a CONNECT tunnel and a TLS session inside it with the
// given SNI, trusting the gateway's CA.
func (h *harness) connectTLS(authority, sni string) (*tls.Conn, *bufio.Reader, error) {
	c, err := net.Dial("tcp", h.addr)
	if err != nil {
		return nil, nil, err
	}
	io.WriteString(c, "CONNECT "+authority+" HTTP/1.1\r\nHost: "+authority+"\r\n\r\n")
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		c.Close()
		return nil, nil, err
	}
	if resp.StatusCode != 200 {
		c.Close()
		return nil, nil, errors.New("CONNECT: " + resp.Status)
	}
	tc, tbr, err := tlsInside(c, h, sni)
	if err != nil {
		c.Close()
	}
	return tc, tbr, err
}

// tlsInside starts TLS with the gateway on an established CONNECT.
func tlsInside(c net.Conn, h *harness, sni string) (*tls.Conn, *bufio.Reader, error) {
	pool := x509.NewCertPool()
	pool.AddCert(h.ca.Cert)
	tc := tls.Client(c, &tls.Config{ServerName: sni, RootCAs: pool, NextProtos: []string{"http/1.1"}})
	if err := tc.Handshake(); err != nil {
		return nil, nil, err
	}
	return tc, bufio.NewReader(tc), nil
}

func mustAddr(s string) netip.Addr { return netip.MustParseAddr(s) }

// policy builds a policy file from rules.
func policy(rules ...string) string {
	return `{"schema": "impyard.policy/1", "rules": [` + strings.Join(rules, ",") + `]}`
}
