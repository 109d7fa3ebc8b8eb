package executor

import (
	"context"
	"crypto/tls"
	"encoding/base64"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/impyard/impyard/lib/ca"
	"github.com/impyard/impyard/lib/config"
	"github.com/impyard/impyard/lib/gate"
	"github.com/impyard/impyard/lib/token"
)

// seen is one request as the upstream received it.
type seen struct {
	method, path, body string
	header             http.Header
}

// upstream is a loopback HTTPS service that answers each request with the
// next status of its script (the last one repeats) and records every
// request it receives.
type upstream struct {
	srv *httptest.Server
	mu  sync.Mutex
	got []seen
}

func newUpstream(t *testing.T, answer func(n int, w http.ResponseWriter)) *upstream {
	t.Helper()
	u := &upstream{}
	u.srv = httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		u.mu.Lock()
		u.got = append(u.got, seen{r.Method, r.URL.Path, string(b), r.Header.Clone()})
		n := len(u.got)
		u.mu.Unlock()
		answer(n, w)
	}))
	t.Cleanup(u.srv.Close)
	return u
}

func (u *upstream) requests() []seen {
	u.mu.Lock()
	defer u.mu.Unlock()
	return append([]seen(nil), u.got...)
}

// statuses answers request n with codes[n-1], the last code repeating.
func statuses(codes ...int) func(int, http.ResponseWriter) {
	return func(n int, w http.ResponseWriter) {
		c := codes[min(n, len(codes))-1]
		w.WriteHeader(c)
		fmt.Fprintf(w, "answer %d to request %d", c, n)
	}
}

// gateway stands in for impgw: a forward proxy that tunnels CONNECT to
// the upstream, or refuses it the way impgw does, and records the proxy
// credentials it was given.
type gateway struct {
	srv    *httptest.Server
	mu     sync.Mutex
	auth   []string
	refuse bool
}

func newGateway(t *testing.T, refuse bool) *gateway {
	t.Helper()
	gw := &gateway{refuse: refuse}
	gw.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		gw.mu.Lock()
		gw.auth = append(gw.auth, r.Header.Get("Proxy-Authorization"))
		gw.mu.Unlock()
		if r.Method != http.MethodConnect || gw.refuse {
			w.Header().Set("X-Impgw-Decision", "d-test")
			w.WriteHeader(http.StatusForbidden)
			io.WriteString(w, "impgw: denied by rule default-deny\n")
			return
		}
		up, err := net.Dial("tcp", r.Host)
		if err != nil {
			w.WriteHeader(http.StatusBadGateway)
			return
		}
		conn, _, err := http.NewResponseController(w).Hijack()
		if err != nil {
			up.Close()
			return
		}
		io.WriteString(conn, "HTTP/1.1 200 OK\r\n\r\n")
		go func() { io.Copy(up, conn); up.Close() }()
		if _, err := io.Copy(conn, up); errors.Is(err, syscall.ECONNRESET) {
			// A reset from the upstream is passed on as a reset, as a
			// TCP relay does.
			conn.(*net.TCPConn).SetLinger(0)
		}
		conn.Close()
	}))
	t.Cleanup(gw.srv.Close)
	return gw
}

func (gw *gateway) listen() string { return strings.TrimPrefix(gw.srv.URL, "http://") }

func (gw *gateway) credentials() []string {
	gw.mu.Lock()
	defer gw.mu.Unlock()
	return append([]string(nil), gw.auth...)
}

// httpRunner is a runner whose IMPYARD_HOME trusts the upstream's
// certificate as the gateway CA.
func httpRunner(t *testing.T, u *upstream) (*Runner, *[]string) {
	t.Helper()
	r := setup(t, "")
	var logs []string
	r.Logf = func(format string, a ...any) { logs = append(logs, fmt.Sprintf(format, a...)) }
	r.Backoff = time.Millisecond
	if u != nil {
		writeCA(t, r.Home, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: u.srv.Certificate().Raw}))
	}
	return r, &logs
}

func writeCA(t *testing.T, home string, b []byte) {
	t.Helper()
	if err := os.MkdirAll(filepath.Join(home, "ca"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(home, "ca", "ca.crt"), b, 0o600); err != nil {
		t.Fatal(err)
	}
}

func httpExecutor(url string) *config.Executor {
	return &config.Executor{Kind: config.HTTP, Method: http.MethodPost, URL: url,
		Timeout: config.Duration{Duration: 10 * time.Second}}
}

var sendGate = &gate.Gate{ID: "g-0123456789abcdef", Imp: "yuko", Intent: "email-send"}

func TestSendHTTPDelivers(t *testing.T) {
	u := newUpstream(t, func(n int, w http.ResponseWriter) {
		w.WriteHeader(http.StatusAccepted)
		io.WriteString(w, "queued")
	})
	gw := newGateway(t, false)
	r, _ := httpRunner(t, u)
	exe := httpExecutor(u.srv.URL + "/v1/send")
	exe.Headers = map[string]string{"X-Mailer": "impyard", "Content-Type": "application/vnd.mail+json"}
	exe.Template = `{"to":{{json .to}},"from":"imp@ourco.example"}`

	res, err := r.sendHTTP(context.Background(), sendGate, gw.listen(), exe, []byte(`{"to":["a@b.example"]}`))
	if err != nil {
		t.Fatal(err)
	}
	if res.Kind != config.HTTP || res.Status != http.StatusAccepted || res.Body != "queued" {
		t.Errorf("result %+v, want http 202 queued", res)
	}
	got := u.requests()
	if len(got) != 1 {
		t.Fatalf("upstream saw %d requests, want 1", len(got))
	}
	s := got[0]
	for _, c := range []struct{ name, got, want string }{
		{"method", s.method, http.MethodPost},
		{"path", s.path, "/v1/send"},
		{"body", s.body, `{"to":["a@b.example"],"from":"imp@ourco.example"}`},
		{"Idempotency-Key", s.header.Get(IdempotencyKey), sendGate.ID},
		{"X-Mailer", s.header.Get("X-Mailer"), "impyard"},
		// The executor's own headers win over the default content type.
		{"Content-Type", s.header.Get("Content-Type"), "application/vnd.mail+json"},
	} {
		if c.got != c.want {
			t.Errorf("upstream %s = %q, want %q", c.name, c.got, c.want)
		}
	}
	tok, err := token.OrgToken(r.Home)
	if err != nil {
		t.Fatal(err)
	}
	want := "Basic " + base64.StdEncoding.EncodeToString([]byte(token.Org+":"+tok))
	if creds := gw.credentials(); len(creds) != 1 || creds[0] != want {
		t.Errorf("gateway saw credentials %q, want the org token %q", creds, want)
	}
}

func TestSendHTTPPayloadWithoutTemplate(t *testing.T) {
	u := newUpstream(t, statuses(http.StatusOK))
	gw := newGateway(t, false)
	r, _ := httpRunner(t, u)
	exe := httpExecutor(u.srv.URL)
	payload := `{"to":["a@b.example"],"subject":"hi"}`
	if _, err := r.sendHTTP(context.Background(), sendGate, gw.listen(), exe, []byte(payload)); err != nil {
		t.Fatal(err)
	}
	if got := u.requests(); len(got) != 1 || got[0].body != payload || got[0].header.Get("Content-Type") != "application/json" {
		t.Errorf("upstream saw %+v, want the payload as application/json", got)
	}
}

// Each answer is classified: may it have taken effect (sent), and may
// trying again help (transient).
func TestSendHTTPClassifiesAnswers(t *testing.T) {
	for _, c := range []struct {
		status          int
		ok              bool
		sent, transient bool
	}{
		{200, true, false, false},
		{204, true, false, false},
		{299, true, false, false},
		{300, false, false, false},
		{302, false, false, false},
		{400, false, false, false},
		{404, false, false, false},
		{407, false, false, false},
		{408, false, true, true},
		{409, false, false, false},
		{428, false, false, false},
		{429, false, true, true},
		{430, false, false, false},
		{499, false, false, false},
		{500, false, true, true},
		{502, false, true, true},
		{503, false, true, true},
	} {
		t.Run(fmt.Sprint(c.status), func(t *testing.T) {
			u := newUpstream(t, func(n int, w http.ResponseWriter) {
				if c.status/100 == 3 {
					w.Header().Set("Location", "https://elsewhere.example/")
				}
				w.WriteHeader(c.status)
				io.WriteString(w, "upstream says no")
			})
			gw := newGateway(t, false)
			r, _ := httpRunner(t, u)
			res, err := r.sendHTTP(context.Background(), sendGate, gw.listen(), httpExecutor(u.srv.URL), []byte(`{}`))
			if n := len(u.requests()); n != 1 {
				t.Errorf("upstream saw %d requests, want 1 (redirects are not followed)", n)
			}
			if c.ok {
				if err != nil || res.Status != c.status {
					t.Errorf("got %+v %v, want success with status %d", res, err, c.status)
				}
				return
			}
			var o *outcome
			if !errors.As(err, &o) {
				t.Fatalf("got %+v %v, want an outcome", res, err)
			}
			if o.sent != c.sent || o.transient != c.transient {
				t.Errorf("sent %v transient %v, want %v %v (%v)", o.sent, o.transient, c.sent, c.transient, err)
			}
			if want := fmt.Sprintf("answered %d: upstream says no", c.status); !strings.Contains(err.Error(), want) {
				t.Errorf("error %q does not say %q", err, want)
			}
		})
	}
}

func TestSendHTTPTrimsLongAnswers(t *testing.T) {
	long := strings.Repeat("é", 3000) // 6000 bytes
	for _, c := range []struct {
		status int
		want   int // bytes of the answer kept before the ellipsis
	}{
		{200, 2048},
		{500, 300},
	} {
		u := newUpstream(t, func(n int, w http.ResponseWriter) {
			w.WriteHeader(c.status)
			io.WriteString(w, long)
		})
		gw := newGateway(t, false)
		r, _ := httpRunner(t, u)
		res, err := r.sendHTTP(context.Background(), sendGate, gw.listen(), httpExecutor(u.srv.URL), nil)
		text := ""
		if err != nil {
			text = err.Error()[strings.Index(err.Error(), ": ")+2:]
		} else {
			text = res.Body
		}
		if want := strings.Repeat("é", c.want/2) + "…"; text != want {
			t.Errorf("status %d: kept %d bytes, want %d and an ellipsis", c.status, len(text), c.want)
		}
	}
}

func TestSendHTTPGatewayRefuses(t *testing.T) {
	// CONNECT refused: nothing reached the upstream.
	u := newUpstream(t, statuses(http.StatusOK))
	gw := newGateway(t, true)
	r, _ := httpRunner(t, u)
	_, err := r.sendHTTP(context.Background(), sendGate, gw.listen(), httpExecutor(u.srv.URL), []byte(`{}`))
	var o *outcome
	if !errors.As(err, &o) || o.sent || o.transient {
		t.Fatalf("got %v, want a refusal, neither sent nor transient", err)
	}
	if want := "the gateway refused to connect to " + u.srv.URL + ": 403 Forbidden (decision d-test)"; err.Error() != want {
		t.Errorf("error %q, want %q", err, want)
	}
	if n := len(u.requests()); n != 0 {
		t.Errorf("upstream saw %d requests through a refused CONNECT", n)
	}

	// A plain-HTTP request the gateway itself answers with its decision.
	_, err = r.sendHTTP(context.Background(), sendGate, gw.listen(), httpExecutor("http://mail.example/send"), []byte(`{}`))
	if !errors.As(err, &o) || o.sent || o.transient {
		t.Fatalf("got %v, want a refusal, neither sent nor transient", err)
	}
	if want := "the gateway refused POST http://mail.example/send (decision d-test): impgw: denied by rule default-deny"; err.Error() != want {
		t.Errorf("error %q, want %q", err, want)
	}
}

// An upstream that answers 403 with a body of its own is not mistaken for
// the gateway.
func TestSendHTTPUpstreamForbiddenIsNotGateway(t *testing.T) {
	for _, c := range []struct {
		name     string
		decision string
		body     string
	}{
		{"no decision header", "", "impgw: looks like the gateway"},
		{"no impgw prefix", "d-1", "forbidden"},
	} {
		u := newUpstream(t, func(n int, w http.ResponseWriter) {
			if c.decision != "" {
				w.Header().Set("X-Impgw-Decision", c.decision)
			}
			w.WriteHeader(http.StatusForbidden)
			io.WriteString(w, c.body)
		})
		gw := newGateway(t, false)
		r, _ := httpRunner(t, u)
		_, err := r.sendHTTP(context.Background(), sendGate, gw.listen(), httpExecutor(u.srv.URL), nil)
		if err == nil || !strings.Contains(err.Error(), "answered 403: "+c.body) {
			t.Errorf("%s: got %v, want the upstream's 403", c.name, err)
		}
	}
}

func TestSendHTTPConnectionFailures(t *testing.T) {
	// No gateway at all (nothing can listen on port 0): the request was
	// never sent, and trying again may help.
	r, _ := httpRunner(t, nil)
	_, err := r.sendHTTP(context.Background(), sendGate, "127.0.0.1:0", httpExecutor("https://mail.example/"), nil)
	var o *outcome
	if !errors.As(err, &o) || o.sent || !o.transient {
		t.Errorf("no gateway: got %v, want not sent and transient", err)
	}

	// The upstream drops the connection after reading the request: it may
	// have acted on it.
	u := newUpstream(t, func(n int, w http.ResponseWriter) {
		conn, _, err := http.NewResponseController(w).Hijack()
		if err == nil {
			conn.Close()
		}
	})
	gw := newGateway(t, false)
	r, _ = httpRunner(t, u)
	_, err = r.sendHTTP(context.Background(), sendGate, gw.listen(), httpExecutor(u.srv.URL), nil)
	if !errors.As(err, &o) || !o.sent || !o.transient {
		t.Errorf("dropped connection: got %v, want sent and transient", err)
	}
	if n := len(u.requests()); n != 1 {
		t.Errorf("upstream saw %d requests, want 1", n)
	}

	// A certificate the runner does not trust: the TLS handshake fails, so
	// nothing was sent.
	r, _ = httpRunner(t, nil)
	_, err = r.sendHTTP(context.Background(), sendGate, gw.listen(), httpExecutor(u.srv.URL), nil)
	if err == nil || !strings.Contains(err.Error(), "certificate") {
		t.Errorf("untrusted upstream: got %v, want a certificate error", err)
	}
	if n := len(u.requests()); n != 1 {
		t.Errorf("upstream saw %d requests after a failed handshake, want still 1", n)
	}
}

func TestSendHTTPBadExecutor(t *testing.T) {
	u := newUpstream(t, statuses(http.StatusOK))
	gw := newGateway(t, false)
	for _, c := range []struct {
		name string
		edit func(*config.Executor, *Runner)
		want string
	}{
		{"template", func(e *config.Executor, _ *Runner) { e.Template = "{{.missing}}" }, "executor template for email-send"},
		{"payload not JSON for a template", func(e *config.Executor, _ *Runner) { e.Template = "{{.to}}" }, "executor template for email-send"},
		{"unparsable template", func(e *config.Executor, _ *Runner) { e.Template = "{{" }, "executor template for email-send"},
		{"method", func(e *config.Executor, _ *Runner) { e.Method = "NOT A METHOD" }, "executor for email-send"},
		{"CA without a certificate", func(_ *config.Executor, r *Runner) { writeCA(t, r.Home, []byte("not a pem\n")) }, "no certificate in it"},
	} {
		r, _ := httpRunner(t, u)
		exe := httpExecutor(u.srv.URL)
		c.edit(exe, r)
		payload := []byte(`{}`)
		if c.name == "payload not JSON for a template" {
			payload = []byte(`not json`)
		}
		_, err := r.sendHTTP(context.Background(), sendGate, gw.listen(), exe, payload)
		var o *outcome
		if !errors.As(err, &o) || o.sent || o.transient || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: got %v, want %q, not sent, not transient", c.name, err, c.want)
		}
	}
	if n := len(u.requests()); n != 0 {
		t.Errorf("upstream saw %d requests from broken executors", n)
	}
}

// The upstream resets the connection once the request has reached it: it
// may have acted on it, so the attempt counts as sent, and as transient.
func TestSendHTTPResetAfterTheRequest(t *testing.T) {
	u := newUpstream(t, func(n int, w http.ResponseWriter) {
		conn, _, err := http.NewResponseController(w).Hijack()
		if err != nil {
			t.Error(err)
			return
		}
		// Close the TCP connection under TLS with no close_notify and
		// linger 0: a reset, not an end of stream.
		tc := conn.(*tls.Conn).NetConn().(*net.TCPConn)
		tc.SetLinger(0)
		tc.Close()
	})
	gw := newGateway(t, false)
	r, _ := httpRunner(t, u)
	_, err := r.sendHTTP(context.Background(), sendGate, gw.listen(), httpExecutor(u.srv.URL), []byte(`{}`))
	var o *outcome
	if !errors.As(err, &o) || !o.sent || !o.transient {
		t.Errorf("reset: got %v, want sent and transient", err)
	}
	if err == nil || !strings.Contains(err.Error(), "connection reset by peer") {
		t.Errorf("reset: got %v, want the reset named", err)
	}
	if n := len(u.requests()); n != 1 {
		t.Errorf("upstream saw %d requests, want 1", n)
	}
}

// systemCA stands for a public CA: TestMain names its certificate in
// SSL_CERT_FILE, so the system roots of this test process trust it.
var systemCA *ca.CA

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "executor-system-roots-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	if systemCA, err = ca.Init(dir); err == nil {
		// Read once, at the first x509.SystemCertPool: set before any test.
		err = os.Setenv("SSL_CERT_FILE", ca.CertPath(dir))
	}
	if err != nil {
		os.RemoveAll(dir)
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// The gateway's CA is trusted besides the system roots, not instead of
// them: an upstream whose certificate a public CA signed, which the gateway
// tunnels without terminating its TLS, is reached with IMPYARD_HOME/ca
// holding the gateway's own CA.
func TestSendHTTPTrustsSystemRootsBesideTheGatewayCA(t *testing.T) {
	m, err := ca.NewMinter(systemCA, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	leaf, err := m.Leaf("127.0.0.1")
	if err != nil {
		t.Fatal(err)
	}
	u := &upstream{}
	u.srv = httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		u.mu.Lock()
		u.got = append(u.got, seen{method: r.Method, path: r.URL.Path})
		u.mu.Unlock()
		io.WriteString(w, "publicly trusted")
	}))
	u.srv.TLS = &tls.Config{Certificates: []tls.Certificate{*leaf}}
	u.srv.StartTLS()
	t.Cleanup(u.srv.Close)
	gw := newGateway(t, false)
	r, _ := httpRunner(t, nil)
	if _, err := ca.Init(r.Home); err != nil {
		t.Fatal(err)
	}
	res, err := r.sendHTTP(context.Background(), sendGate, gw.listen(), httpExecutor(u.srv.URL+"/v1/send"), []byte(`{}`))
	if err != nil || res.Status != http.StatusOK || res.Body != "publicly trusted" {
		t.Fatalf("got %+v %v, want the upstream's 200", res, err)
	}
	if got := u.requests(); len(got) != 1 || got[0].path != "/v1/send" {
		t.Errorf("upstream saw %+v, want one request to /v1/send", got)
	}
}
