// Command benchload is the load client and upstream of scripts/bench-gateway:
// the same HTTPS GETs, straight to a loopback upstream or through a
// forward proxy (impgw, squid), with throughput and latency percentiles.
//
//	benchload upstream DIR          serve 1 KiB GETs on https://localhost:PORT,
//	                                 write DIR/upstream-ca.pem, print PORT
//	benchload load [flags] URL      run load and print one JSON line
//	benchload idle [flags] URL      open connections, one GET on each, print
//	                                 one JSON line, hold them until stdin ends
//
// --proxy takes a comma-separated list: connection i goes through the
// i-th proxy modulo the list, so a gateway serving one listener per box
// can be loaded the way many boxes load it.
// It only ever connects to loopback addresses.
package main

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"flag"
	"fmt"
	"io"
	"log"
	"math/big"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

func main() {
	log.SetFlags(0)
	log.SetPrefix("benchload: ")
	if len(os.Args) < 2 {
		log.Fatal("usage: benchload upstream DIR | benchload load [flags] URL | benchload idle [flags] URL")
	}
	switch os.Args[1] {
	case "upstream":
		if len(os.Args) != 3 {
			log.Fatal("usage: benchload upstream DIR")
		}
		upstream(os.Args[2])
	case "load":
		loadCmd(os.Args[2:])
	case "idle":
		idleCmd(os.Args[2:])
	default:
		log.Fatalf("unknown command %q", os.Args[1])
	}
}

var body = []byte(strings.Repeat("x", 1024))

func upstream(dir string) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		log.Fatal(err)
	}
	now := time.Now()
	caTmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "benchload upstream CA"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(24 * time.Hour), IsCA: true, BasicConstraintsValid: true,
		KeyUsage: x509.KeyUsageCertSign}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &key.PublicKey, key)
	if err != nil {
		log.Fatal(err)
	}
	caCert, _ := x509.ParseCertificate(caDER)
	leafTmpl := &x509.Certificate{SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: "localhost"},
		DNSNames: []string{"localhost"}, IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(24 * time.Hour), ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
	leafDER, err := x509.CreateCertificate(rand.Reader, leafTmpl, caCert, &key.PublicKey, key)
	if err != nil {
		log.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "upstream-ca.pem"), pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER}), 0o644); err != nil {
		log.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(ln.Addr().(*net.TCPAddr).Port)
	srv := &http.Server{
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "application/octet-stream")
			w.Write(body)
		}),
		TLSConfig:    &tls.Config{Certificates: []tls.Certificate{{Certificate: [][]byte{leafDER}, PrivateKey: key}}},
		TLSNextProto: map[string]func(*http.Server, *tls.Conn, http.Handler){},
		ErrorLog:     log.New(io.Discard, "", 0),
	}
	log.Fatal(srv.ServeTLS(ln, "", ""))
}

type result struct {
	Requests int64   `json:"requests"`
	Errors   int64   `json:"errors"`
	Seconds  float64 `json:"seconds"`
	RPS      float64 `json:"rps"`
	P50us    int64   `json:"p50_us"`
	P99us    int64   `json:"p99_us"`
}

// client is one kept-alive connection's client: its own transport, so
// its connection goes through its own proxy and is never shared.
type client struct {
	c      *http.Client
	target string
}

// clients parses the flags common to load and idle and returns conns
// clients, the i-th through the i-th proxy of the list (modulo its length).
func clients(args []string, cmd string, extra func(fs *flag.FlagSet)) ([]*client, *flag.FlagSet) {
	fs := flag.NewFlagSet(cmd, flag.ExitOnError)
	proxies := fs.String("proxy", "", "forward proxy `URL`s, comma-separated (http://127.0.0.1:PORT)")
	cacert := fs.String("cacert", "", "PEM `FILE` of the CA to trust")
	conns := fs.Int("conns", 8, "concurrent connections")
	newConn := fs.Bool("newconn", false, "a new connection (and TLS handshake) per request")
	extra(fs)
	fs.Parse(args)
	if fs.NArg() != 1 {
		log.Fatalf("%s: want one URL", cmd)
	}
	target, err := url.Parse(fs.Arg(0))
	if err != nil {
		log.Fatal(err)
	}
	var list []*url.URL
	if *proxies != "" {
		for _, p := range strings.Split(*proxies, ",") {
			list = append(list, mustParse(p))
		}
	}
	for _, u := range append([]*url.URL{target}, list...) {
		if !loopback(u.Hostname()) {
			log.Fatalf("%s: %s is not a loopback address; benchload only loads loopback", cmd, u.Host)
		}
	}
	pem, err := os.ReadFile(*cacert)
	if err != nil {
		log.Fatal(err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		log.Fatalf("%s: no certificate in %s", cmd, *cacert)
	}
	cs := make([]*client, *conns)
	for i := range cs {
		tr := &http.Transport{
			TLSClientConfig:     &tls.Config{RootCAs: pool},
			MaxIdleConnsPerHost: 1,
			MaxConnsPerHost:     1,
			DisableKeepAlives:   *newConn,
			DisableCompression:  true,
			TLSNextProto:        map[string]func(string, *tls.Conn) http.RoundTripper{},
		}
		if len(list) > 0 {
			tr.Proxy = http.ProxyURL(list[i%len(list)])
		}
		cs[i] = &client{c: &http.Client{Transport: tr, Timeout: 10 * time.Second}, target: target.String()}
	}
	return cs, fs
}

func (c *client) get() error {
	resp, err := c.c.Get(c.target)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	n, _ := io.Copy(io.Discard, resp.Body)
	if resp.StatusCode != 200 || n != int64(len(body)) {
		return fmt.Errorf("status %d, %d bytes", resp.StatusCode, n)
	}
	return nil
}

// warm opens every client's connection with one GET, a few at a time.
func warm(cs []*client) {
	sem := make(chan struct{}, 16)
	var wg sync.WaitGroup
	for _, c := range cs {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			if err := c.get(); err != nil {
				log.Fatalf("warm-up: %v", err)
			}
		}()
	}
	wg.Wait()
}

func loadCmd(args []string) {
	var duration time.Duration
	var rate float64
	cs, _ := clients(args, "load", func(fs *flag.FlagSet) {
		fs.DurationVar(&duration, "duration", 10*time.Second, "how long to run")
		fs.Float64Var(&rate, "rate", 0, "offer this many requests a `second` over all connections (0: as fast as answered)")
	})
	// Warm up: connections open, leaves minted, pools filled.
	warm(cs)
	ctx, cancel := context.WithTimeout(context.Background(), duration)
	defer cancel()
	var reqs, errs atomic.Int64
	var mu sync.Mutex
	var lat []time.Duration
	var wg sync.WaitGroup
	start := time.Now()
	for i, c := range cs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			mine := make([]time.Duration, 0, 1<<12)
			// With a rate, each connection sends on a schedule of its own,
			// the connections' schedules spread over one interval, and a
			// request's latency counts from when it was due: a late answer
			// also delays the requests queued behind it, as a box's would.
			var every time.Duration
			next := start
			if rate > 0 {
				every = time.Duration(float64(len(cs)) / rate * float64(time.Second))
				next = start.Add(every * time.Duration(i) / time.Duration(len(cs)))
			}
			for ctx.Err() == nil {
				t0 := time.Now()
				if every > 0 {
					if wait := time.Until(next); wait > 0 {
						select {
						case <-time.After(wait):
						case <-ctx.Done():
							continue
						}
					}
					t0 = next
					next = next.Add(every)
				}
				if err := c.get(); err != nil {
					if errs.Add(1) == 1 {
						log.Printf("load: %v", err)
					}
					continue
				}
				mine = append(mine, time.Since(t0))
				reqs.Add(1)
			}
			mu.Lock()
			lat = append(lat, mine...)
			mu.Unlock()
		}()
	}
	wg.Wait()
	secs := time.Since(start).Seconds()
	slices.Sort(lat)
	r := result{Requests: reqs.Load(), Errors: errs.Load(), Seconds: secs, RPS: float64(reqs.Load()) / secs}
	if len(lat) > 0 {
		r.P50us = lat[len(lat)/2].Microseconds()
		r.P99us = lat[len(lat)*99/100].Microseconds()
	}
	json.NewEncoder(os.Stdout).Encode(r)
	if r.Errors > 0 && r.Requests == 0 {
		os.Exit(1)
	}
}

// idleCmd opens the connections, each through its proxy with one GET, so
// the proxy holds a TLS session for each, reports that they are open,
// and holds them idle until stdin ends: the caller reads the proxy's
// memory meanwhile.
func idleCmd(args []string) {
	cs, _ := clients(args, "idle", func(*flag.FlagSet) {})
	warm(cs)
	json.NewEncoder(os.Stdout).Encode(map[string]int{"open": len(cs)})
	io.Copy(io.Discard, os.Stdin)
	for _, c := range cs {
		c.c.CloseIdleConnections()
	}
}

func mustParse(s string) *url.URL {
	if s == "" {
		return nil
	}
	u, err := url.Parse(s)
	if err != nil {
		log.Fatal(err)
	}
	return u
}

func loopback(host string) bool {
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}
