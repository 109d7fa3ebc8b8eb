package gateway

import (
	"bufio"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
)

// recordingConn keeps the bytes read from the connection while on is set.
type recordingConn struct {
	net.Conn
	mu  sync.Mutex
	on  bool
	got []byte
}

func (c *recordingConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	c.mu.Lock()
	if c.on {
		c.got = append(c.got, p[:n]...)
	}
	c.mu.Unlock()
	return n, err
}

// A response the gateway relays inside a terminated CONNECT goes to the
// client in one TLS record, one write, even on a fresh connection: Go's
// dynamic record sizing would start with records of about 1.2 KiB, so a
// 2 KiB response took two.
func TestResponseIsOneTLSRecord(t *testing.T) {
	body := strings.Repeat("x", 2048)
	ups := newTLSUpstream(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, body) }))
	h := startGateway(t, policy(`{"name": "up", "match": {"host": "api.test", "network": "127.0.0.0/8"}, "verdict": "allow"}`),
		func(c *Config) { c.UpstreamCA = ups.bundle })
	h.resolve("api.test", "127.0.0.1")
	authority := fmt.Sprintf("api.test:%d", ups.port)

	raw, err := net.Dial("tcp", h.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer raw.Close()
	io.WriteString(raw, "CONNECT "+authority+" HTTP/1.1\r\nHost: "+authority+"\r\n\r\n")
	// Nothing follows the CONNECT's answer until the ClientHello, so a
	// buffered read of it takes no TLS bytes.
	resp, err := http.ReadResponse(bufio.NewReader(raw), nil)
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("CONNECT: %v %v", resp, err)
	}
	rc := &recordingConn{Conn: raw}
	pool := x509.NewCertPool()
	pool.AddCert(h.ca.Cert)
	tc := tls.Client(rc, &tls.Config{ServerName: "api.test", RootCAs: pool, NextProtos: []string{"http/1.1"}})
	if err := tc.Handshake(); err != nil {
		t.Fatal(err)
	}
	rc.mu.Lock()
	rc.on = true
	rc.mu.Unlock()
	io.WriteString(tc, "GET /x HTTP/1.1\r\nHost: "+authority+"\r\n\r\n")
	resp, err = http.ReadResponse(bufio.NewReader(tc), nil)
	if err != nil {
		t.Fatal(err)
	}
	got, err := io.ReadAll(resp.Body)
	if err != nil || string(got) != body {
		t.Fatalf("body of %d bytes, %v", len(got), err)
	}
	rc.mu.Lock()
	defer rc.mu.Unlock()
	records := 0
	for b := rc.got; len(b) >= 5; records++ {
		n := 5 + int(b[3])<<8 + int(b[4])
		if n > len(b) {
			t.Fatalf("a torn record: %d bytes of %d", len(b), n)
		}
		b = b[n:]
	}
	if records != 1 {
		t.Fatalf("the response came in %d TLS records, want 1", records)
	}
}
