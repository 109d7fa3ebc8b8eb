// Package boxnet is the gateway's side of the boxes: for every live run
// that names a network namespace in runs/<run-id>/run.json, it opens a
// listener at 127.0.0.1:7300 inside that namespace, serves it with the
// gateway, and answers with runs/<run-id>/gateway.json; when the run ends
// it closes the listener and its connections.
//
// A connection on such a listener can only come from that box, so the
// listener names the run. The run's token is checked as well: a box must
// present its own run's token, as proxy credentials or to the control
// API, or it is refused; another run's token is refused even if valid.
package boxnet

import (
	"context"
	"errors"
	"fmt"
	"net"
	"path/filepath"
	"sync"
	"time"

	"github.com/impyard/impyard/lib/gateway"
	"github.com/impyard/impyard/lib/id"
	"github.com/impyard/impyard/lib/netns"
	"github.com/impyard/impyard/lib/run"
	"github.com/impyard/impyard/lib/token"
	"github.com/impyard/impyard/lib/watch"
	"github.com/impyard/impyard/lib/yard"
)

// Server attaches box listeners to a gateway.
type Server struct {
	Yard    *yard.Yard
	Gateway *gateway.Gateway
	Logf    func(format string, a ...any)

	mu       sync.Mutex
	attached map[string]context.CancelFunc
	ended    map[string]bool
}

type boxConn struct {
	net.Conn
	run, imp string
}

type boxListener struct {
	net.Listener
	run, imp string
}

func (l *boxListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return &boxConn{Conn: c, run: l.run, imp: l.imp}, nil
}

// serviceConn is a connection on a listener inside the box of a server
// the trusted side runs (a boxed MCP server): the listener alone names
// its subject.
type serviceConn struct {
	net.Conn
	subject string
}

type serviceListener struct {
	net.Listener
	subject string
}

func (l *serviceListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return &serviceConn{Conn: c, subject: l.subject}, nil
}

// Service makes ln, a listener inside the network namespace of a box
// the trusted side runs for itself (a boxed MCP server, subject
// mcp:<name>), name subject as every request's on it. No token is asked:
// only that box can reach the listener, and a box with no token holds
// none it could lose; whatever credentials it sends are ignored.
func Service(ln net.Listener, subject string) net.Listener {
	return &serviceListener{Listener: ln, subject: subject}
}

// Identity names the run and imp of a connection accepted on a box
// listener.
func Identity(c net.Conn) (runID, imp string, ok bool) {
	bc, ok := c.(*boxConn)
	if !ok {
		return "", "", false
	}
	return bc.run, bc.imp, true
}

// Authenticate returns the gateway's Authenticate for the tokens under
// home: it names the subject of a proxied request and the task its token
// was issued for. On a box listener the credentials must be that run's
// token; elsewhere any valid token, or none: the anonymous subject "",
// which rules scoped to a subject never match. On a Service listener
// the listener's subject, whatever the credentials. It needs no Server, so the
// gateway can be built with it before the Server that attaches to it.
func Authenticate(home string) func(c net.Conn, proxyAuthorization string) (subject, task string, err error) {
	return func(c net.Conn, proxyAuthorization string) (string, string, error) {
		if sc, ok := c.(*serviceConn); ok {
			return sc.subject, "", nil
		}
		runID, imp, ok := Identity(c)
		if !ok && proxyAuthorization == "" {
			return "", "", nil
		}
		if proxyAuthorization == "" {
			return "", "", errors.New("a box must present its run's token as proxy credentials")
		}
		subject, sub, err := token.ProxyLookup(home, proxyAuthorization)
		if err != nil {
			return "", "", err
		}
		if ok && (sub.Run != runID || subject != imp) {
			return "", "", fmt.Errorf("the token is not run %s's", runID)
		}
		return subject, sub.Task, nil
	}
}

// Run keeps the listeners in step with runs/ until ctx ends.
func (s *Server) Run(ctx context.Context) error {
	s.mu.Lock()
	s.attached, s.ended = map[string]context.CancelFunc{}, map[string]bool{}
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		for _, cancel := range s.attached {
			cancel()
		}
		s.mu.Unlock()
	}()
	return watch.Run(ctx, 2*time.Second, watch.Handler{
		Dirs: func() []string {
			dirs := []string{s.Yard.Root, run.Root(s.Yard)}
			ids, _ := run.List(s.Yard)
			s.mu.Lock()
			defer s.mu.Unlock()
			for _, r := range ids {
				if !s.ended[r] {
					dirs = append(dirs, run.Path(s.Yard, r))
				}
			}
			return dirs
		},
		File: func(path string) {
			if filepath.Base(path) == "run.json" {
				s.sync(ctx, filepath.Base(filepath.Dir(path)))
			}
		},
		Rescan: func() {
			ids, err := run.List(s.Yard)
			if err != nil {
				s.logf("runs: %v", err)
			}
			for _, r := range ids {
				s.sync(ctx, r)
			}
		},
		Error: func(err error) { s.logf("watch runs: %v", err) },
	})
}

// sync attaches or detaches the listener of one run.
func (s *Server) sync(ctx context.Context, runID string) {
	if id.Check(id.Run, runID) != nil {
		return
	}
	s.mu.Lock()
	if s.ended[runID] {
		s.mu.Unlock()
		return
	}
	cancel, attached := s.attached[runID]
	s.mu.Unlock()
	r, err := run.Read(s.Yard, runID)
	if err != nil {
		return
	}
	switch {
	case !r.Live():
		if attached {
			cancel()
		}
		s.mu.Lock()
		delete(s.attached, runID)
		s.ended[runID] = true
		s.mu.Unlock()
	case !attached && r.NetNS != "":
		ln, err := netns.Listen(r.NetNS, "tcp", run.BoxGateway)
		if err != nil {
			s.logf("run %s: cannot serve the box: %v", runID, err)
			return
		}
		lctx, cancel := context.WithCancel(ctx)
		s.mu.Lock()
		s.attached[runID] = cancel
		s.mu.Unlock()
		go func() {
			if err := s.Gateway.Attach(lctx, &boxListener{Listener: ln, run: runID, imp: r.Imp}); err != nil {
				s.logf("run %s: %v", runID, err)
			}
		}()
		if err := run.WriteReady(s.Yard, runID, run.BoxGateway); err != nil {
			s.logf("run %s: %v", runID, err)
		}
		s.logf("serving run %s (%s) inside its namespace", runID, r.Imp)
	}
}

func (s *Server) logf(format string, a ...any) {
	if s.Logf != nil {
		s.Logf(format, a...)
	}
}
