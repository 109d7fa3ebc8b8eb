// Command goproxy-peer is scripts/bench-gateway's baseline of the kind of
// gateway many owners build themselves: a forward proxy on
// github.com/elazarl/goproxy that intercepts every CONNECT (MITM) with
// leaves minted from a CA it is given, and forwards each request to the
// upstream. It judges nothing and records nothing, so the bench shows
// what impgw's judging and synced records cost against the bare library.
//
// It is its own module, so the library is not a dependency of impyard.
//
//	goproxy-peer --listen 127.0.0.1:PORT --ca-cert ca.pem --ca-key ca.key --upstream-ca upstream.pem
package main

import (
	"crypto/tls"
	"crypto/x509"
	"flag"
	"log"
	"net/http"
	"os"

	"github.com/elazarl/goproxy"
)

func main() {
	listen := flag.String("listen", "127.0.0.1:0", "address to listen on")
	caCert := flag.String("ca-cert", "", "PEM certificate of the CA that signs the intercepted hosts' leaves")
	caKey := flag.String("ca-key", "", "PEM key of that CA")
	upstreamCA := flag.String("upstream-ca", "", "PEM certificates the upstream's certificate must chain to")
	flag.Parse()
	ca, err := tls.LoadX509KeyPair(*caCert, *caKey)
	if err != nil {
		log.Fatal(err)
	}
	if ca.Leaf, err = x509.ParseCertificate(ca.Certificate[0]); err != nil {
		log.Fatal(err)
	}
	pem, err := os.ReadFile(*upstreamCA)
	if err != nil {
		log.Fatal(err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		log.Fatalf("%s: no certificate", *upstreamCA)
	}
	p := goproxy.NewProxyHttpServer()
	p.Tr = &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}, MaxIdleConnsPerHost: 256, ForceAttemptHTTP2: false}
	mitm := &goproxy.ConnectAction{Action: goproxy.ConnectMitm, TLSConfig: goproxy.TLSConfigFromCA(&ca)}
	p.OnRequest().HandleConnect(goproxy.FuncHttpsHandler(func(host string, _ *goproxy.ProxyCtx) (*goproxy.ConnectAction, string) {
		return mitm, host
	}))
	log.Fatal(http.ListenAndServe(*listen, p))
}
