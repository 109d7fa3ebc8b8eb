package main

import (
	"bufio"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"io"
	"log"
	"math"
	"math/big"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"runtime/debug"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/impyard/impyard/lib/gateway"
	"github.com/impyard/impyard/lib/yard/yardtest"
)

// live is a running `impgw serve` process with its yard and home.
type live struct {
	t               *testing.T
	root, home      string
	addr            string
	cmd             *exec.Cmd
	stderr          *strings.Builder
	stderrMu        sync.Mutex
	upstreamBundle  string
	upstreamURL     string
	mu              sync.Mutex
	upstreamHeaders []http.Header
}

// httpsUpstream serves https://localhost:PORT with a certificate from a
// CA of its own, and remembers every request's headers.
func (l *live) httpsUpstream() {
	t := l.t
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	caTmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "upstream CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), IsCA: true, BasicConstraintsValid: true,
		KeyUsage: x509.KeyUsageCertSign}
	caDER, _ := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &key.PublicKey, key)
	caCert, _ := x509.ParseCertificate(caDER)
	leafTmpl := &x509.Certificate{SerialNumber: big.NewInt(2), DNSNames: []string{"localhost"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
	leafDER, _ := x509.CreateCertificate(rand.Reader, leafTmpl, caCert, &key.PublicKey, key)
	s := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		l.mu.Lock()
		l.upstreamHeaders = append(l.upstreamHeaders, r.Header.Clone())
		l.mu.Unlock()
		io.WriteString(w, "sent\n")
	}))
	s.TLS = &tls.Config{Certificates: []tls.Certificate{{Certificate: [][]byte{leafDER}, PrivateKey: key}}}
	s.Config.ErrorLog = log.New(io.Discard, "", 0) // handshakes fail on purpose
	s.StartTLS()
	t.Cleanup(s.Close)
	l.upstreamBundle = filepath.Join(t.TempDir(), "upstream.pem")
	os.WriteFile(l.upstreamBundle, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER}), 0o644)
	l.upstreamURL = fmt.Sprintf("https://localhost:%d", s.Listener.Addr().(*net.TCPAddr).Port)
}

// startLive runs impgw serve; trust says how it learns the upstream's CA:
// "flag" (--upstream-ca), "env" (SSL_CERT_FILE) or "" (not at all).
func startLive(t *testing.T, policy, trust string) *live {
	return startLiveOrg(t, policy, trust, "")
}

// startLiveOrg is startLive with an org.toml in the yard, if not "".
func startLiveOrg(t *testing.T, policy, trust, org string) *live {
	dir := t.TempDir()
	l := &live{t: t, root: yardtest.At(t, filepath.Join(dir, "yard")).Root, home: filepath.Join(dir, "home"), stderr: &strings.Builder{}}
	os.MkdirAll(filepath.Join(l.root, "policies"), 0o755)
	if org != "" {
		os.WriteFile(filepath.Join(l.root, "org.toml"), []byte(org), 0o644)
	}
	l.writePolicy(policy)
	l.httpsUpstream()
	l.impgw("ca", "init")
	l.cmd = exec.Command("impgw", "serve", "--listen", "127.0.0.1:0")
	l.cmd.Env = l.env()
	switch trust {
	case "flag":
		l.cmd.Args = append(l.cmd.Args, "--upstream-ca", l.upstreamBundle)
	case "env":
		l.cmd.Env = append(l.cmd.Env, "SSL_CERT_FILE="+l.upstreamBundle, "SSL_CERT_DIR=/nonexistent")
	}
	pipe, err := l.cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := l.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(pipe)
	line, err := br.ReadString('\n')
	// The first start creates the gateway's signing key and says so.
	for err == nil && !strings.Contains(line, "serving on ") {
		l.stderr.WriteString(line)
		line, err = br.ReadString('\n')
	}
	if err != nil {
		t.Fatalf("impgw serve: %v", err)
	}
	l.stderr.WriteString(line)
	go func() {
		for {
			line, err := br.ReadString('\n')
			l.stderrMu.Lock()
			l.stderr.WriteString(line)
			l.stderrMu.Unlock()
			if err != nil {
				return
			}
		}
	}()
	_, rest, _ := strings.Cut(line, "serving on ")
	l.addr, _, _ = strings.Cut(rest, " ")
	t.Cleanup(func() {
		l.cmd.Process.Signal(syscall.SIGTERM)
		l.cmd.Wait()
	})
	return l
}

func (l *live) env() []string {
	return append(os.Environ(), "IMPYARD_ROOT="+l.root, "IMPYARD_HOME="+l.home)
}

func (l *live) impgw(args ...string) string {
	cmd := exec.Command("impgw", args...)
	cmd.Env = l.env()
	out, err := cmd.CombinedOutput()
	if err != nil {
		l.t.Fatalf("impgw %v: %v\n%s", args, err, out)
	}
	return string(out)
}

// upstream returns the headers of the upstream's i-th request.
func (l *live) upstream(i int) http.Header {
	l.mu.Lock()
	defer l.mu.Unlock()
	if i >= len(l.upstreamHeaders) {
		l.t.Fatalf("the upstream saw %d requests, not %d", len(l.upstreamHeaders), i+1)
	}
	return l.upstreamHeaders[i]
}

func (l *live) writePolicy(p string) {
	path := filepath.Join(l.root, "policies", "gateway.json")
	os.WriteFile(path+".tmp", []byte(p), 0o644)
	os.Rename(path+".tmp", path)
}

// curl runs curl through the gateway, trusting only its CA, and returns
// the status code and body.
func (l *live) curl(args ...string) (string, string) {
	args = append([]string{"-sS", "--proxy", "http://" + l.addr, "--cacert", filepath.Join(l.home, "ca", "ca.crt"),
		"-o", "-", "-w", "\n%{http_code}", "--max-time", "10"}, args...)
	out, err := exec.Command("curl", args...).CombinedOutput()
	if err != nil {
		l.t.Fatalf("curl %v: %v\n%s", args, err, out)
	}
	s := strings.TrimRight(string(out), "\n")
	i := strings.LastIndexByte(s, '\n')
	return s[i+1:], s[:max(i, 0)]
}

// records reads the decision log until done says it holds what the test
// waits for: an allowed request's record follows its response by a moment.
func (l *live) records(done func([]*gateway.Record) bool) []*gateway.Record {
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		out, _, _ := gateway.ReadRecords(filepath.Join(l.root, "runs", "decisions.jsonl"))
		if done(out) || time.Now().After(deadline) {
			return out
		}
	}
}

// atLeast waits for n records.
func atLeast(n int) func([]*gateway.Record) bool {
	return func(r []*gateway.Record) bool { return len(r) >= n }
}

// settled waits for n records, each completed by its outcome: the
// gateway writes an outcome line with the next decision, or shortly
// after the exchange when none follows.
func settled(n int) func([]*gateway.Record) bool {
	return func(r []*gateway.Record) bool {
		if len(r) < n {
			return false
		}
		for _, rec := range r {
			if rec.Status == 0 {
				return false
			}
		}
		return true
	}
}

func TestCurlThroughImpgw(t *testing.T) {
	if _, err := exec.LookPath("curl"); err != nil {
		t.Skip("curl not installed")
	}
	l := startLive(t, `{"schema": "impyard.policy/1", "rules": [
		{"name": "send-mail", "match": {"protocol": "https", "host": "localhost", "method": "POST", "pathPrefix": "/emails", "network": "127.0.0.0/8"},
		 "verdict": "allow", "inject": {"header": "authorization", "secret": "resend", "format": "Bearer %s"}}]}`, "flag")
	os.MkdirAll(filepath.Join(l.home, "secrets"), 0o700)
	os.WriteFile(filepath.Join(l.home, "secrets", "resend"), []byte("re_live_7f3a\n"), 0o600)

	// Allowed by the POST-only rule; the client sends no credential and the
	// upstream sees the injected one.
	code, body := l.curl("-X", "POST", "-H", "Content-Type: application/json", "-d", `{"to":"a@b"}`, l.upstreamURL+"/emails")
	if code != "200" || strings.TrimSpace(body) != "sent" {
		t.Fatalf("POST: %s %q", code, body)
	}
	if got := l.upstream(0).Get("Authorization"); got != "Bearer re_live_7f3a" {
		t.Fatalf("upstream Authorization %q", got)
	}
	// A placeholder in the named header is swapped; the record redacts it.
	code, _ = l.curl("-X", "POST", "-H", "Authorization: Bearer IMPYARD_PLACEHOLDER_resend", "-d", "{}", l.upstreamURL+"/emails")
	if code != "200" || l.upstream(1).Get("Authorization") != "Bearer re_live_7f3a" {
		t.Fatalf("placeholder POST: %s, upstream %q", code, l.upstream(1).Get("Authorization"))
	}
	// A GET loses on its method, and the record says so.
	code, body = l.curl(l.upstreamURL + "/emails")
	if code != "403" || !strings.Contains(body, "deny") {
		t.Fatalf("GET: %s %q", code, body)
	}
	recs := l.records(atLeast(3))
	if len(recs) != 3 {
		t.Fatalf("%d records, want 3", len(recs))
	}
	if r := recs[0]; r.Verdict != "allow" || r.Rule != "send-mail" || r.Request.Method != "POST" || r.Request.Headers["authorization"] != "" {
		t.Errorf("first record %+v", r)
	}
	if r := recs[1]; r.Request.Headers["authorization"] != gateway.Redacted {
		t.Errorf("second record headers %v", r.Request.Headers)
	}
	if r := recs[2]; r.Verdict != "deny" || r.Request.Method != "GET" || r.Status != 403 {
		t.Errorf("GET record %+v", r)
	}
	judge := exec.Command("impgw", "judge", "--explain", "--addr", "127.0.0.1", "GET", l.upstreamURL+"/emails")
	judge.Env = l.env()
	if out, err := judge.Output(); !strings.Contains(string(out), "method GET not in [POST]") || judge.ProcessState.ExitCode() != 1 {
		t.Errorf("judge --explain: %v\n%s", err, out)
	}
	raw, _ := os.ReadFile(filepath.Join(l.root, "runs", "decisions.jsonl"))
	if strings.Contains(string(raw), "re_live_7f3a") {
		t.Fatal("the secret is in the decision log")
	}

	// The CA key is not readable through anything the gateway serves.
	key, _ := os.ReadFile(filepath.Join(l.home, "ca", "ca.key"))
	keyLine := strings.Split(string(key), "\n")[1]
	for _, target := range []string{
		"http://" + l.addr + "/ca/ca.key",
		"http://" + l.addr + "/v1/../../ca/ca.key",
		"http://" + l.addr + "/" + filepath.Join(l.home, "ca", "ca.key"),
	} {
		for _, args := range [][]string{{target}, {"--noproxy", "*", "--path-as-is", target}} {
			code, body := l.curl(args...)
			if code == "200" || strings.Contains(body, keyLine) {
				t.Fatalf("%v: %s %q", args, code, body)
			}
		}
	}

	// Garbage policy: the next request is denied, without a restart.
	// (The CONNECT itself is refused: no rule can allow anything now.)
	l.writePolicy(`{"schema": "impyard.policy/1", "rules": [`)
	out, err := exec.Command("curl", "-sS", "--proxy", "http://"+l.addr, "--cacert", filepath.Join(l.home, "ca", "ca.crt"),
		"-X", "POST", "-d", "{}", l.upstreamURL+"/emails").CombinedOutput()
	if err == nil || !strings.Contains(string(out), "CONNECT tunnel failed, response 403") {
		t.Fatalf("after a garbage policy: %v %s", err, out)
	}
	recs = l.records(func(r []*gateway.Record) bool {
		return len(r) > 0 && strings.Contains(r[len(r)-1].Reason, "policy unusable")
	})
	if r := recs[len(recs)-1]; r.Verdict != "deny" || !strings.Contains(r.Reason, "policy unusable") {
		t.Fatalf("after a garbage policy: record %+v", r)
	}
	// The log line and the record are written apart, and stderr is read
	// through a pipe: wait for the line rather than read once.
	var logged string
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		l.stderrMu.Lock()
		logged = l.stderr.String()
		l.stderrMu.Unlock()
		if strings.Contains(logged, " error: policy denies everything until fixed") || time.Now().After(deadline) {
			break
		}
	}
	if !strings.Contains(logged, " error: policy denies everything until fixed") {
		t.Errorf("the broken policy was not logged:\n%s", logged)
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.upstreamHeaders) != 2 {
		t.Fatalf("upstream saw %d requests, want 2", len(l.upstreamHeaders))
	}
}

// Upstream TLS trusts the system roots, which SSL_CERT_FILE replaces, and
// never skips verification.
func TestSSLCertFile(t *testing.T) {
	if _, err := exec.LookPath("curl"); err != nil {
		t.Skip("curl not installed")
	}
	const policy = `{"schema": "impyard.policy/1", "rules": [
		{"name": "local", "match": {"host": "localhost", "network": "127.0.0.0/8"}, "verdict": "allow"}]}`
	l := startLive(t, policy, "env")
	if code, body := l.curl(l.upstreamURL + "/"); code != "200" {
		t.Fatalf("with SSL_CERT_FILE naming the upstream's CA: %s %q", code, body)
	}
	l = startLive(t, policy, "")
	if code, _ := l.curl(l.upstreamURL + "/"); code != "502" {
		t.Fatalf("with the upstream's CA trusted nowhere: %s, want 502", code)
	}
	if r := l.records(settled(1)); len(r) != 1 || !strings.Contains(r[0].Error, "certificate") {
		t.Fatalf("records %+v", r)
	}
}

// An error answered to a box names no host path: not the secret's file,
// not IMPYARD_HOME, not the yard, not the owner's home. The record and
// the log keep the detail.
func TestErrorsHideHostPaths(t *testing.T) {
	if _, err := exec.LookPath("curl"); err != nil {
		t.Skip("curl not installed")
	}
	l := startLive(t, `{"schema": "impyard.policy/1", "rules": [
		{"name": "send-mail", "match": {"protocol": "https", "host": "localhost", "method": "POST", "network": "127.0.0.0/8"},
		 "verdict": "allow", "inject": {"header": "authorization", "secret": "resend", "format": "Bearer %s"}}]}`, "flag")
	userHome, _ := os.UserHomeDir()
	hidden := func(what, body string) {
		t.Helper()
		for _, p := range []string{l.home, l.root, userHome, filepath.Join(l.home, "secrets")} {
			if p != "" && p != "/" && strings.Contains(body, p) {
				t.Errorf("%s: the answer names %s:\n%s", what, p, body)
			}
		}
	}
	code, body := l.curl("-X", "POST", "-d", "{}", l.upstreamURL+"/emails")
	if code != "403" || !strings.Contains(body, `secret "resend" is not available`) {
		t.Fatalf("missing secret: %s %q", code, body)
	}
	hidden("missing secret", body)
	recs := l.records(atLeast(1))
	if len(recs) != 1 || !strings.Contains(recs[0].Reason, filepath.Join(l.home, "secrets")) {
		t.Fatalf("the record lost the detail: %+v", recs)
	}
	l.stderrMu.Lock()
	logged := l.stderr.String()
	l.stderrMu.Unlock()
	if !strings.Contains(logged, filepath.Join(l.home, "secrets")) {
		t.Errorf("the log lost the detail:\n%s", logged)
	}

	// A broken policy's reason names its file: not to the client.
	l.writePolicy(`{"schema": "impyard.policy/1", "rules": [`)
	out, err := exec.Command("curl", "-sS", "--proxy", "http://"+l.addr, "http://127.0.0.1:9/").CombinedOutput()
	if err != nil || !strings.Contains(string(out), "policy unusable") {
		t.Fatalf("with a broken policy: %v %s", err, out)
	}
	hidden("broken policy", string(out))

	// The control API's errors too: a broken org.toml names itself.
	tok := strings.TrimSpace(l.impgw("token", "issue", "--imp", "yuko"))
	os.WriteFile(filepath.Join(l.root, "org.toml"), []byte("[gateway\n"), 0o644)
	out, err = exec.Command("curl", "-sS", "--noproxy", "*", "-H", "Authorization: Bearer "+tok, "-d",
		`{"intent":"email-send","payload":{}}`, "http://"+l.addr+"/v1/actions").CombinedOutput()
	if err != nil || !strings.Contains(string(out), "configuration does not load") {
		t.Fatalf("control with a broken org.toml: %v %s", err, out)
	}
	hidden("control", string(out))
}

// vmRSS reads a process's resident set size in bytes; 0 if it cannot.
func vmRSS(pid int) int64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0
	}
	for line := range strings.SplitSeq(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			var kb int64
			fmt.Sscanf(strings.TrimSpace(v), "%d kB", &kb)
			return kb << 10
		}
	}
	return 0
}

// TestBodyMemoryBound has 100 clients declare 10 MiB bodies at once and
// send them slowly: the gateway's resident memory must stay under 256 MiB
// throughout and fall back once they are done.
func TestBodyMemoryBound(t *testing.T) {
	var drained atomic.Int64
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n, _ := io.Copy(io.Discard, r.Body)
		drained.Add(n)
		io.WriteString(w, "ok")
	}))
	defer up.Close()
	l := startLive(t, `{"schema": "impyard.policy/1", "rules": [
		{"name": "lo", "match": {"protocol": "http", "host": "127.0.0.1", "network": "127.0.0.0/8"}, "verdict": "allow"}]}`, "")
	pid := l.cmd.Process.Pid
	if out, err := exec.Command("curl", "-sS", "--proxy", "http://"+l.addr, "-d", "warm", up.URL+"/").CombinedOutput(); err != nil || string(out) != "ok" {
		t.Fatalf("warm-up: %v %s", err, out)
	}
	base := vmRSS(pid)
	if base == 0 {
		t.Skip("no VmRSS in /proc")
	}

	const clients, size, chunk = 100, 10 << 20, 1 << 20
	var peak atomic.Int64
	stop := make(chan struct{})
	watched := make(chan struct{})
	go func() {
		defer close(watched)
		for {
			peak.Store(max(peak.Load(), vmRSS(pid)))
			select {
			case <-stop:
				return
			case <-time.After(20 * time.Millisecond):
			}
		}
	}()
	var wg sync.WaitGroup
	statuses := make(chan int, clients)
	block := make([]byte, chunk)
	for range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c, err := net.Dial("tcp", l.addr)
			if err != nil {
				statuses <- 0
				return
			}
			defer c.Close()
			c.SetDeadline(time.Now().Add(20 * time.Second))
			fmt.Fprintf(c, "POST %s/ HTTP/1.1\r\nHost: %s\r\nContent-Length: %d\r\n\r\n", up.URL, up.Listener.Addr(), size)
			for sent := 0; sent < size; sent += chunk {
				if _, err := c.Write(block); err != nil {
					break // refused: the gateway closed the connection
				}
				time.Sleep(100 * time.Millisecond)
			}
			resp, err := http.ReadResponse(bufio.NewReader(c), nil)
			if err != nil {
				statuses <- 0
				return
			}
			resp.Body.Close()
			statuses <- resp.StatusCode
		}()
	}
	wg.Wait()
	close(stop)
	<-watched
	close(statuses)
	count := map[int]int{}
	for s := range statuses {
		count[s]++
	}
	if p := peak.Load(); p >= 256<<20 {
		t.Fatalf("resident memory reached %d MiB (from %d MiB) with %d bodies in flight; statuses %v", p>>20, base>>20, clients, count)
	}
	// A refused client still sending may see its connection reset before
	// it reads the 503 (status 0 here).
	if count[200] == 0 || count[503] == 0 || count[200]+count[503]+count[0] != clients {
		t.Fatalf("statuses %v: want some bodies through and the rest refused with 503", count)
	}
	if got := drained.Load(); got != int64(count[200])*size+4 {
		t.Fatalf("the upstream got %d body bytes, want %d whole bodies", got, count[200])
	}
	deadline := time.Now().Add(15 * time.Second)
	for vmRSS(pid) > base+48<<20 {
		if time.Now().After(deadline) {
			t.Fatalf("resident memory stayed at %d MiB (from %d MiB, peak %d MiB)", vmRSS(pid)>>20, base>>20, peak.Load()>>20)
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Logf("resident memory: %d MiB before, peak %d MiB, statuses %v", base>>20, peak.Load()>>20, count)
}

// org.toml's [gateway] header_timeout bounds how long a connection that
// sends nothing is kept, counted from accept.
func TestHeaderTimeoutFromOrg(t *testing.T) {
	l := startLiveOrg(t, `{"schema": "impyard.policy/1", "rules": []}`, "", "[gateway]\nheader_timeout = \"500ms\"\n")
	c, err := net.Dial("tcp", l.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	start := time.Now()
	c.SetReadDeadline(start.Add(10 * time.Second))
	if _, err := c.Read(make([]byte, 1)); err != io.EOF {
		t.Fatalf("an idle connection: %v, want it closed", err)
	}
	if took := time.Since(start); took < 400*time.Millisecond || took > 5*time.Second {
		t.Fatalf("closed after %s, want about 500ms", took)
	}
}

// The collector's target and soft limit are set for the daemon unless
// the environment sets them.
func TestGCTarget(t *testing.T) {
	defer debug.SetGCPercent(debug.SetGCPercent(100))
	defer debug.SetMemoryLimit(debug.SetMemoryLimit(math.MaxInt64))
	t.Setenv("GOGC", "")
	t.Setenv("GOMEMLIMIT", "")
	gcTarget(gateway.Limits{BodyBudget: 64 << 20})
	if got := debug.SetGCPercent(100); got != 400 {
		t.Errorf("GC percent %d, want 400", got)
	}
	if got := debug.SetMemoryLimit(-1); got != 192<<20 {
		t.Errorf("memory limit %d MiB, want 192 (twice the budget, plus 64)", got>>20)
	}

	t.Setenv("GOGC", "50")
	t.Setenv("GOMEMLIMIT", "1GiB")
	debug.SetGCPercent(50)
	debug.SetMemoryLimit(1 << 30)
	gcTarget(gateway.Limits{BodyBudget: 64 << 20})
	if got := debug.SetGCPercent(50); got != 50 {
		t.Errorf("GC percent %d with GOGC=50 set, want it left alone", got)
	}
	if got := debug.SetMemoryLimit(-1); got != 1<<30 {
		t.Errorf("memory limit %d MiB with GOMEMLIMIT=1GiB set, want it left alone", got>>20)
	}
}
