package gatewayd

import (
	"context"
	"errors"
	"io"
	"net/http"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/impyard/impyard/lib/approval"
	"github.com/impyard/impyard/lib/ca"
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

type syncWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (s *syncWriter) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.w.Write(p)
}
