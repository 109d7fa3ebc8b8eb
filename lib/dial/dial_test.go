package dial

import (
	"bufio"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
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
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

func TestLookupUnmapsAndCaches(t *testing.T) {
	var calls atomic.Int64
	r := NewResolver(time.Second, time.Minute, func(_ context.Context, host string) ([]netip.Addr, error) {
		calls.Add(1)
		return []netip.Addr{netip.MustParseAddr("::ffff:127.0.0.1"), netip.MustParseAddr("127.0.0.1"), netip.MustParseAddr("::1")}, nil
	})
	for range 2 {
		got, err := r.Lookup(context.Background(), "a.test")
		if err != nil {
			t.Fatal(err)
		}
		if fmt.Sprint(got) != "[127.0.0.1 ::1]" {
			t.Fatalf("got %v, want unmapped and deduplicated", got)
		}
	}
	if calls.Load() != 1 {
		t.Fatalf("%d lookups, want 1 (cached)", calls.Load())
	}
	if got, _ := r.Lookup(context.Background(), "::ffff:10.0.0.1"); fmt.Sprint(got) != "[10.0.0.1]" || calls.Load() != 1 {
		t.Fatalf("IP literal: %v after %d lookups", got, calls.Load())
	}
	nx := NewResolver(time.Second, 0, func(_ context.Context, host string) ([]netip.Addr, error) {
		return nil, &net.DNSError{Err: "no such host", Name: host, IsNotFound: true}
	})
	if _, err := nx.Lookup(context.Background(), "nx.test"); err == nil || !strings.Contains(err.Error(), "does not resolve") {
		t.Fatalf("NXDOMAIN: %v", err)
	}
}

func TestRootsRefusesEmptyBundle(t *testing.T) {
	if _, err := Roots([]byte("not a certificate")); err == nil {
		t.Fatal("a bundle without a certificate was accepted")
	}
}

// server is a TLS upstream for names api.test and other.test, counting
// the connections it accepts.
type server struct {
	*httptest.Server
	conns atomic.Int64
	addr  netip.AddrPort
	roots *x509.CertPool
}

func newServer(t *testing.T, h http.Handler) *server {
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "api.test"},
		DNSNames: []string{"api.test", "other.test"}, NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
	der, _ := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	cert, _ := x509.ParseCertificate(der)
	s := &server{Server: httptest.NewUnstartedServer(h), roots: x509.NewCertPool()}
	s.roots.AddCert(cert)
	s.TLS = &tls.Config{Certificates: []tls.Certificate{{Certificate: [][]byte{der}, PrivateKey: key}}}
	s.Config.ErrorLog = log.New(io.Discard, "", 0)
	s.Config.ConnState = func(_ net.Conn, st http.ConnState) {
		if st == http.StateNew {
			s.conns.Add(1)
		}
	}
	s.StartTLS()
	t.Cleanup(s.Close)
	s.addr = netip.MustParseAddrPort(s.Listener.Addr().String())
	return s
}

func (s *server) get(t *testing.T, u *Upstream, host, method, body string) (*http.Response, string) {
	t.Helper()
	req := &http.Request{Method: method, URL: &url.URL{Scheme: "https", Host: fmt.Sprintf("%s:%d", host, s.addr.Port()), Opaque: "/x"},
		Header: http.Header{}, Host: host}
	if body != "" {
		req.ContentLength = int64(len(body))
		req.Body = io.NopCloser(strings.NewReader(body))
		req.GetBody = func() (io.ReadCloser, error) { return io.NopCloser(strings.NewReader(body)), nil }
	}
	resp, err := u.RoundTrip(s.addr, req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, host, err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	return resp, string(b)
}

func opts() Options {
	return Options{DialTimeout: time.Second, ResponseHeaderTimeout: time.Second, IdleConnTimeout: time.Minute, MaxIdlePerHost: 4}
}

func TestPoolIsPerHostAndAddress(t *testing.T) {
	s := newServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, r.Host) }))
	u := NewUpstream(s.roots, opts())
	defer u.Close()
	for range 3 {
		if _, body := s.get(t, u, "api.test", "GET", ""); body != "api.test" {
			t.Fatalf("body %q", body)
		}
	}
	if n := s.conns.Load(); n != 1 {
		t.Fatalf("%d connections for three requests to one host, want 1", n)
	}
	// Another name on the same address never shares the connection
	// verified for the first.
	s.get(t, u, "other.test", "GET", "")
	if n := s.conns.Load(); n != 2 {
		t.Fatalf("%d connections, want 2", n)
	}
}

func TestStaleConnectionIsRetriedOnce(t *testing.T) {
	var hits atomic.Int64
	s := newServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		b, _ := io.ReadAll(r.Body)
		w.Write(b)
	}))
	u := NewUpstream(s.roots, opts())
	defer u.Close()
	s.get(t, u, "api.test", "POST", "one")
	// The server drops its idle connections, as servers do; the pooled
	// connection fails on its next use whether the close has reached the
	// client yet (EOF) or not (reset).
	s.Config.SetKeepAlivesEnabled(false)
	s.CloseClientConnections()
	s.Config.SetKeepAlivesEnabled(true)
	if _, body := s.get(t, u, "api.test", "POST", "two"); body != "two" {
		t.Fatalf("retried body %q", body)
	}
	if hits.Load() != 2 {
		t.Fatalf("the server handled %d requests, want 2 (each once)", hits.Load())
	}
}

func TestVerifiesTheHostName(t *testing.T) {
	s := newServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	u := NewUpstream(s.roots, opts())
	req := &http.Request{Method: "GET", URL: &url.URL{Scheme: "https", Host: fmt.Sprintf("evil.test:%d", s.addr.Port()), Opaque: "/"}, Header: http.Header{}}
	if _, err := u.RoundTrip(s.addr, req); err == nil || !strings.Contains(err.Error(), "certificate") {
		t.Fatalf("a certificate for other names was accepted: %v", err)
	}
	u = NewUpstream(x509.NewCertPool(), opts())
	req.URL.Host = fmt.Sprintf("api.test:%d", s.addr.Port())
	if _, err := u.RoundTrip(s.addr, req); err == nil {
		t.Fatal("an untrusted certificate was accepted")
	}
	if _, err := u.RoundTrip(netip.MustParseAddrPort("127.0.0.1:1"), req); err == nil || !strings.Contains(err.Error(), "not the checked address") {
		t.Fatalf("a URL port other than the checked address: %v", err)
	}
}

func TestResponsesRelayed(t *testing.T) {
	s := newServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.Method {
		case "HEAD":
			w.Header().Set("Content-Length", "10")
		case "PUT":
			w.WriteHeader(http.StatusNoContent)
		default:
			w.Header().Set("Link", "</a>; rel=preload")
			w.WriteHeader(http.StatusEarlyHints)
			w.(http.Flusher).Flush()
			io.WriteString(w, "chunk one ")
			w.(http.Flusher).Flush()
			io.WriteString(w, "chunk two")
		}
	}))
	u := NewUpstream(s.roots, opts())
	defer u.Close()
	if resp, body := s.get(t, u, "api.test", "GET", ""); resp.StatusCode != 200 || body != "chunk one chunk two" || resp.ContentLength != -1 {
		t.Fatalf("chunked: %d %q", resp.StatusCode, body)
	}
	if resp, body := s.get(t, u, "api.test", "HEAD", ""); resp.StatusCode != 200 || body != "" || resp.ContentLength != 10 {
		t.Fatalf("HEAD: %d %q %d", resp.StatusCode, body, resp.ContentLength)
	}
	if resp, _ := s.get(t, u, "api.test", "PUT", "x"); resp.StatusCode != 204 {
		t.Fatalf("PUT: %d", resp.StatusCode)
	}
	if n := s.conns.Load(); n != 1 {
		t.Fatalf("%d connections, want 1 kept alive", n)
	}
}

func TestResponseHeaderTimeout(t *testing.T) {
	ln, _ := net.Listen("tcp", "127.0.0.1:0")
	defer ln.Close()
	// The server reads the request and never answers while the test runs.
	hold := make(chan struct{})
	defer close(hold)
	go func() {
		c, err := ln.Accept()
		if err == nil {
			bufio.NewReader(c).ReadString('\n')
			<-hold
			c.Close()
		}
	}()
	o := opts()
	o.ResponseHeaderTimeout = 200 * time.Millisecond
	u := NewUpstream(nil, o)
	addr := netip.MustParseAddrPort(ln.Addr().String())
	req := &http.Request{Method: "GET", URL: &url.URL{Scheme: "http", Host: addr.String(), Opaque: "/"}, Header: http.Header{}}
	start := time.Now()
	_, err := u.RoundTrip(addr, req)
	var ne net.Error
	if err == nil || !errors.As(err, &ne) || !ne.Timeout() || time.Since(start) > time.Second {
		t.Fatalf("after %s: %v", time.Since(start), err)
	}
}

func TestResponseHeadIsBounded(t *testing.T) {
	ln, _ := net.Listen("tcp", "127.0.0.1:0")
	defer ln.Close()
	go func() {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		bufio.NewReader(c).ReadString('\n')
		io.WriteString(c, "HTTP/1.1 200 OK\r\n")
		line := "X-Junk: " + strings.Repeat("a", 8000) + "\r\n"
		for range 200 {
			if _, err := io.WriteString(c, line); err != nil {
				return
			}
		}
	}()
	u := NewUpstream(nil, opts())
	addr := netip.MustParseAddrPort(ln.Addr().String())
	req := &http.Request{Method: "GET", URL: &url.URL{Scheme: "http", Host: addr.String(), Opaque: "/"}, Header: http.Header{}}
	if _, err := u.RoundTrip(addr, req); err == nil || !strings.Contains(err.Error(), "over 1 MiB") {
		t.Fatalf("a 1.6 MB response head: %v", err)
	}
}
