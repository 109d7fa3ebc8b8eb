package main

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/impyard/impyard/internal/certtest"
	"github.com/impyard/impyard/lib/yard/yardtest"
)

// TestServeTLS: with [desk] tls_cert and tls_key the desk serves HTTPS
// with that certificate, under its Content-Security-Policy, and a plain
// HTTP request to it gets no page.
func TestServeTLS(t *testing.T) {
	y := yardtest.New(t)
	home := t.TempDir()
	t.Setenv("IMPYARD_ROOT", y.Root)
	t.Setenv("IMPYARD_HOME", home)
	cert := certtest.Write(t, filepath.Join(home, "desk.crt"), filepath.Join(home, "desk.key"), "desk")
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	os.WriteFile(y.Path("org.toml"), []byte(fmt.Sprintf("[desk]\nlisten = %q\ntls_cert = \"desk.crt\"\ntls_key = \"desk.key\"\norigin = \"https://localhost:%s\"\n",
		addr, addr[strings.LastIndexByte(addr, ':')+1:])), 0o640)
	ctx, cancel := context.WithCancel(context.Background())
	pr, pw := io.Pipe()
	done := make(chan int, 1)
	go func() { done <- run(ctx, []string{"serve"}, strings.NewReader(""), io.Discard, pw); pw.Close() }()
	sc := bufio.NewScanner(pr)
	for sc.Scan() && !strings.Contains(sc.Text(), " desk serving on ") {
		t.Log(sc.Text())
	}
	go io.Copy(io.Discard, pr)
	roots := x509.NewCertPool()
	roots.AddCert(cert)
	client := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: roots}}}
	resp, err := client.Get("https://" + addr + "/login")
	if err != nil {
		t.Fatalf("the desk over HTTPS: %v", err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || !strings.Contains(resp.Header.Get("Content-Security-Policy"), "default-src 'none'") {
		t.Errorf("GET /login over HTTPS: %s %v", resp.Status, resp.Header)
	}
	if resp, err := http.Get("http://" + addr + "/login"); err == nil {
		resp.Body.Close()
		if resp.StatusCode == http.StatusOK {
			t.Errorf("plain HTTP to the TLS desk served the page")
		}
	}
	cancel()
	if code := <-done; code != 0 {
		t.Errorf("serve exited %d", code)
	}
}
