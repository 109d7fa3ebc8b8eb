// Command demo-upstream stands in for the internet in impyard's demo: on
// loopback addresses it serves a few pages and a fake mail API that says
// what it received, so the demo can show which request got through and
// that the credential arrived without the box ever holding it.
//
// It prints two addresses, one per line: plain HTTP first, then HTTPS
// with a certificate for 127.0.0.1 made at start and written, PEM, to the
// file --ca names (the gateway injects a secret only over https, so the
// mail API is reached that way).
package main

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"flag"
	"fmt"
	"io"
	"log"
	"math/big"
	"net"
	"net/http"
	"os"
	"strings"
	"time"
)

func main() {
	addr := flag.String("listen", "127.0.0.1:0", "address to serve plain HTTP on")
	tlsAddr := flag.String("tls-listen", "127.0.0.1:0", "address to serve HTTPS on")
	caOut := flag.String("ca", "upstream-ca.pem", "file to write the HTTPS certificate to")
	flag.Parse()
	cert, err := selfSigned(*caOut)
	if err != nil {
		log.Fatal(err)
	}
	ln, err := net.Listen("tcp", *addr)
	if err != nil {
		log.Fatal(err)
	}
	tln, err := net.Listen("tcp", *tlsAddr)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(ln.Addr())
	fmt.Println(tln.Addr())
	os.Stdout.Sync()
	http.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "the page at %s\n", r.URL.Path)
	})
	http.HandleFunc("/emails", func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(io.LimitReader(r.Body, 1<<16))
		auth := r.Header.Get("Authorization")
		shown := "none"
		if auth != "" {
			shown = auth[:min(len(auth), len("Bearer ")+4)] + strings.Repeat("*", 8)
		}
		log.Printf("mail API: %s %s, Authorization %s, Idempotency-Key %s: %s", r.Method, r.URL.Path, shown, r.Header.Get("Idempotency-Key"), body)
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprintf(w, `{"id":"msg-%s","status":"queued"}`, r.Header.Get("Idempotency-Key"))
	})
	go func() {
		log.Fatal(http.Serve(tls.NewListener(tln, &tls.Config{Certificates: []tls.Certificate{cert}}), nil))
	}()
	log.Fatal(http.Serve(ln, nil))
}

// selfSigned makes a certificate for 127.0.0.1 that is its own CA and
// writes it to path, for the gateway to trust.
func selfSigned(path string) (tls.Certificate, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return tls.Certificate{}, err
	}
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "demo-upstream"},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(24 * time.Hour),
		IPAddresses:           []net.IP{net.IPv4(127, 0, 0, 1)},
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return tls.Certificate{}, err
	}
	if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o644); err != nil {
		return tls.Certificate{}, err
	}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}, nil
}
