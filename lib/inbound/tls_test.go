package inbound_test

import (
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
	"math/big"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/impyard/impyard/lib/inbound"
	"github.com/impyard/impyard/lib/queue"
)

// writeCert writes a fresh self-signed certificate for 127.0.0.1 and its
// key, PEM, and returns the certificate.
func writeCert(t *testing.T, certPath, keyPath, name string) *x509.Certificate {
	t.Helper()
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(time.Now().UnixNano()), Subject: pkix.Name{CommonName: name},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}, KeyUsage: x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &k.PublicKey, k)
	if err != nil {
		t.Fatal(err)
	}
	kd, err := x509.MarshalECPrivateKey(k)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(certPath, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(keyPath, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kd}), 0o600); err != nil {
		t.Fatal(err)
	}
	c, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// TestTLS: with tls_cert and tls_key the relay serves HTTPS alone, with
// the pair from IMPYARD_HOME; a renewal of the files is served at the
// next handshake without a restart, and a broken renewal keeps the last
// good pair rather than refusing every sender.
func TestTLS(t *testing.T) {
	r := newRelay(t)
	certPath, keyPath := filepath.Join(r.home, "relay.crt"), filepath.Join(r.home, "relay.key")
	first := writeCert(t, certPath, keyPath, "first")
	r.in.TLSCert, r.in.TLSKey = "relay.crt", "relay.key"
	var logged []string
	var mu sync.Mutex
	logf := func(format string, a ...any) {
		mu.Lock()
		defer mu.Unlock()
		logged = append(logged, fmt.Sprintf(format, a...))
	}
	rel, err := inbound.New(r.y, r.home, r.in, logf)
	if err != nil {
		t.Fatal(err)
	}
	addr := serveRelay(t, rel)
	url := "https://" + addr + inbound.Prefix + "github"

	// served reports the certificate a fresh connection is given, and
	// posts one signed delivery over it.
	served := func(body string) (*x509.Certificate, int) {
		t.Helper()
		var got *x509.Certificate
		c := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true,
			VerifyConnection: func(cs tls.ConnectionState) error { got = cs.PeerCertificates[0]; return nil }}}}
		req, _ := http.NewRequest("POST", url, strings.NewReader(body))
		req.Header.Set("X-Hub-Signature-256", sign([]byte(body)))
		req.Header.Set("X-GitHub-Delivery", "d-"+body)
		resp, err := c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return got, resp.StatusCode
	}
	if got, code := served(`{"n":1}`); !got.Equal(first) || code != http.StatusAccepted {
		t.Fatalf("served %v with status %d, want the first certificate and 202", got.Subject, code)
	}
	// Plain HTTP on the TLS listener files nothing.
	resp, err := http.Post("http://"+addr+inbound.Prefix+"github", "application/json", strings.NewReader(`{"n":9}`))
	if err == nil {
		resp.Body.Close()
		if resp.StatusCode == http.StatusAccepted {
			t.Fatal("a plain HTTP delivery was accepted on the TLS listener")
		}
	}

	// A renewal: new files, newer times.
	later := time.Now().Add(2 * time.Second)
	second := writeCert(t, certPath, keyPath, "second")
	os.Chtimes(certPath, later, later)
	os.Chtimes(keyPath, later, later)
	if got, code := served(`{"n":2}`); !got.Equal(second) || code != http.StatusAccepted {
		t.Fatalf("after renewal served %v with status %d, want the second certificate and 202", got.Subject, code)
	}

	// A broken renewal keeps the second pair.
	os.WriteFile(keyPath, []byte("not a key"), 0o600)
	later = later.Add(2 * time.Second)
	os.Chtimes(keyPath, later, later)
	for _, n := range []string{`{"n":3}`, `{"n":4}`} {
		if got, code := served(n); !got.Equal(second) || code != http.StatusAccepted {
			t.Fatalf("after a broken renewal served %v with status %d, want the second certificate and 202", got.Subject, code)
		}
	}
	// keptLogged counts the lines that kept the previous pair for a
	// cause naming what.
	keptLogged := func(what string) int {
		mu.Lock()
		defer mu.Unlock()
		n := 0
		for _, l := range logged {
			if strings.Contains(l, "keeping the previous certificate") && strings.Contains(l, what) {
				n++
			}
		}
		return n
	}
	// The broken renewal is told once, not at every handshake.
	if kept := keptLogged("relay.key"); kept != 1 {
		t.Errorf("the broken renewal was logged %d times, want once: %q", kept, logged)
	}

	// Files removed mid-renewal: the last good pair is served, and the
	// missing file logged once however many handshakes follow.
	os.Remove(certPath)
	for _, n := range []string{`{"n":5}`, `{"n":6}`, `{"n":7}`} {
		if got, code := served(n); !got.Equal(second) || code != http.StatusAccepted {
			t.Fatalf("with the certificate file gone served %v with status %d", got.Subject, code)
		}
	}
	if gone := keptLogged("no such file"); gone != 1 {
		t.Errorf("the missing certificate was logged %d times, want once: %q", gone, logged)
	}
	tasks, bad := queue.List(r.y, queue.Filter{Imp: "yuko"})
	if len(bad) > 0 {
		t.Fatal(bad)
	}
	if len(tasks) != 7 {
		t.Errorf("%d tasks filed, want the 7 HTTPS deliveries", len(tasks))
	}
}

// TestTLSMissing: a certificate that does not load stops the relay at
// start, naming the file.
func TestTLSMissing(t *testing.T) {
	r := newRelay(t)
	r.in.TLSCert, r.in.TLSKey = "relay.crt", "relay.key"
	_, err := inbound.New(r.y, r.home, r.in, t.Logf)
	if !errors.Is(err, os.ErrNotExist) || !strings.Contains(err.Error(), filepath.Join(r.home, "relay.crt")) {
		t.Fatalf("New with no certificate: %v, want a not-exist error naming %s", err, filepath.Join(r.home, "relay.crt"))
	}
	writeCert(t, filepath.Join(r.home, "relay.crt"), filepath.Join(r.home, "relay.key"), "x")
	os.WriteFile(filepath.Join(r.home, "relay.key"), []byte("garbage"), 0o600)
	if _, err := inbound.New(r.y, r.home, r.in, t.Logf); err == nil || !strings.Contains(err.Error(), "relay.key") {
		t.Fatalf("New with a broken key: %v, want an error naming relay.key", err)
	}
}
