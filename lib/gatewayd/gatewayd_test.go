package gatewayd

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/impyard/impyard/lib/approval"
	"github.com/impyard/impyard/lib/ca"
	"github.com/impyard/impyard/lib/config"
	"github.com/impyard/impyard/lib/inbound"
	"github.com/impyard/impyard/lib/yard/yardtest"
)

func parts(t *testing.T) Config {
	t.Helper()
	y := yardtest.New(t)
	os.MkdirAll(y.Path("policies"), 0o750)
	os.WriteFile(y.PolicyPath(), []byte(`{"schema":"impyard.policy/1","rules":[]}`), 0o640)
	home := t.TempDir()
	authority, err := ca.Init(home)
	if err != nil {
		t.Fatal(err)
	}
	minter, err := ca.NewMinter(authority, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	signer, err := approval.Ensure(home, approval.Gateway, io.Discard, "test")
	if err != nil {
		t.Fatal(err)
	}
	return Config{Yard: y, Home: home, Minter: minter, Signer: signer}
}

// New refuses a configuration without one of its parts, naming it,
// before anything is built.
func TestNewRefusesMissingPart(t *testing.T) {
	for _, tc := range []struct {
		drop func(*Config)
		want string
	}{
		{func(c *Config) { c.Yard = nil }, "the yard (Yard)"},
		{func(c *Config) { c.Home = "" }, "IMPYARD_HOME (Home)"},
		{func(c *Config) { c.Minter = nil }, "the CA's leaf minter (Minter)"},
		{func(c *Config) { c.Signer = nil }, "the gateway's approval key (Signer)"},
		{func(c *Config) { c.Inbound = relay(t, c) }, "the inbound relay and its listener (Inbound, InboundListener) together"},
	} {
		cfg := parts(t)
		tc.drop(&cfg)
		s, err := New(cfg)
		if s != nil || !errors.Is(err, ErrMissingPart) || !strings.HasSuffix(err.Error(), ": missing: "+tc.want) {
			t.Errorf("without %s: %v, %v; want ErrMissingPart naming it", tc.want, s, err)
		}
	}
}

// A server built with all its parts answers health and hands /v1/ to
// the control API, which refuses a request without a token.
func TestServe(t *testing.T) {
	cfg := parts(t)
	var log strings.Builder
	cfg.Log = &syncWriter{w: &log}
	s, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	lns, err := Listen([]string{"127.0.0.1:0"})
	if err != nil {
		t.Fatal(err)
	}
	addr := lns[0].Addr().String()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Serve(ctx, lns, time.Second) }()
	for _, tc := range []struct {
		path string
		code int
	}{{"/v1/health", http.StatusOK}, {"/v1/gates", http.StatusUnauthorized}} {
		resp, err := http.Get("http://" + addr + tc.path)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != tc.code {
			t.Errorf("GET %s: %d, want %d", tc.path, resp.StatusCode, tc.code)
		}
	}
	cancel()
	if err := <-done; err != nil {
		t.Errorf("Serve: %v", err)
	}
	if !strings.Contains(log.String(), "impgw: serving on "+addr) {
		t.Errorf("log: %q", log.String())
	}
}

func relay(t *testing.T, c *Config) *inbound.Relay {
	t.Helper()
	r, err := inbound.New(c.Yard, c.Home, config.Inbound{Listen: "127.0.0.1:0"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// The relay is served on its own listener, and only there: the
// gateway's control API is not on it, nor the relay on the gateway's.
func TestServeInbound(t *testing.T) {
	cfg := parts(t)
	var log strings.Builder
	cfg.Log = &syncWriter{w: &log}
	cfg.Inbound = relay(t, &cfg)
	lns, err := Listen([]string{"127.0.0.1:0", "127.0.0.1:0"})
	if err != nil {
		t.Fatal(err)
	}
	cfg.InboundListener = lns[1]
	s, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	gw, in := lns[0].Addr().String(), lns[1].Addr().String()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Serve(ctx, lns[:1], time.Second) }()
	for _, tc := range []struct {
		addr, path string
		code       int
	}{
		{in, "/v1/inbound/github", http.StatusNotFound}, // no such source, recorded
		{in, "/v1/health", http.StatusNotFound},
		{gw, "/v1/inbound/github", http.StatusUnauthorized}, // the control API, wanting a token
	} {
		resp, err := http.Post("http://"+tc.addr+tc.path, "application/json", strings.NewReader("{}"))
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != tc.code {
			t.Errorf("POST %s%s: %d, want %d", tc.addr, tc.path, resp.StatusCode, tc.code)
		}
	}
	cancel()
	if err := <-done; err != nil {
		t.Errorf("Serve: %v", err)
	}
	if !strings.Contains(log.String(), "impgw: inbound relay on "+in+" (sources )") {
		t.Errorf("log: %q", log.String())
	}
	b, _ := os.ReadFile(cfg.Yard.Decisions())
	if n := strings.Count(string(b), `"schema":"impyard.inbound/1"`); n != 2 {
		t.Errorf("%d inbound records for 2 posts to the relay:\n%s", n, b)
	}
}

type syncWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (s *syncWriter) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.w.Write(p)
}

// The loop guard covers the inbound relay's listener as well as the
// proxy's: a rule whose network covers loopback and the unspecified
// address still cannot send a request through the gateway to the relay,
// by its address or by 0.0.0.0, which reaches every local address.
func TestLoopGuardCoversInbound(t *testing.T) {
	cfg := parts(t)
	cfg.Inbound = relay(t, &cfg)
	lns, err := Listen([]string{"127.0.0.1:0", "127.0.0.1:0"})
	if err != nil {
		t.Fatal(err)
	}
	cfg.InboundListener = lns[1]
	in := lns[1].Addr().(*net.TCPAddr).Port
	os.WriteFile(cfg.Yard.PolicyPath(), []byte(fmt.Sprintf(`{"schema":"impyard.policy/1","rules":[
  {"name":"loopback","match":{"host":["127.0.0.1","0.0.0.0"],"port":%d,"network":["127.0.0.0/8","0.0.0.0/32"]},"verdict":"allow"}]}`, in)), 0o640)
	s, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	refusedAsLoop(t, s, lns[:1], "/v1/inbound/github", in, "127.0.0.1", "0.0.0.0")
	// Nothing reached the relay: it records every post it receives.
	b, _ := os.ReadFile(cfg.Yard.Decisions())
	if n := strings.Count(string(b), `"schema":"impyard.inbound/1"`); n != 0 {
		t.Errorf("%d requests reached the relay through the gateway:\n%s", n, b)
	}
}

// The loop guard covers the desk's listener, which another process
// (impgate serve) holds at org.toml's [desk] listen: a rule that allows
// loopback still cannot send a box's request through the gateway to the
// desk, and the desk sees nothing.
func TestLoopGuardCoversDesk(t *testing.T) {
	cfg := parts(t)
	var reached atomic.Int32
	desk := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { reached.Add(1) }))
	defer desk.Close()
	port := desk.Listener.Addr().(*net.TCPAddr).Port
	os.WriteFile(cfg.Yard.Path("org.toml"), []byte(fmt.Sprintf("[desk]\nlisten = %q\n", desk.Listener.Addr().String())), 0o640)
	os.WriteFile(cfg.Yard.PolicyPath(), []byte(fmt.Sprintf(`{"schema":"impyard.policy/1","rules":[
  {"name":"loopback","match":{"host":["127.0.0.1","localhost"],"port":%d,"network":["127.0.0.0/8"]},"verdict":"allow"}]}`, port)), 0o640)
	lns, err := Listen([]string{"127.0.0.1:0"})
	if err != nil {
		t.Fatal(err)
	}
	s, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	refusedAsLoop(t, s, lns, "/g/g-0000000000000001/deny", port, "127.0.0.1", "localhost")
	if n := reached.Load(); n != 0 {
		t.Errorf("%d requests reached the desk through the gateway", n)
	}
}

// refusedAsLoop serves s on lns, POSTs path at port on each of hosts
// through it, and checks each is refused as a loop.
func refusedAsLoop(t *testing.T, s *Server, lns []net.Listener, path string, port int, hosts ...string) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Serve(ctx, lns, time.Second) }()
	proxy := &url.URL{Scheme: "http", Host: lns[0].Addr().String()}
	client := &http.Client{Transport: &http.Transport{Proxy: http.ProxyURL(proxy)}}
	for _, host := range hosts {
		target := fmt.Sprintf("http://%s:%d%s", host, port, path)
		resp, err := client.Post(target, "application/json", strings.NewReader("{}"))
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusForbidden || !strings.Contains(string(body), "gateway's own listener (a loop)") {
			t.Errorf("POST %s through the gateway: %d %q, want 403 as a loop", target, resp.StatusCode, body)
		}
	}
	cancel()
	if err := <-done; err != nil {
		t.Errorf("Serve: %v", err)
	}
}
