package gateway

import (
	"bytes"
	"context"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync/atomic"
	"time"

	"github.com/impyard/impyard/lib/http1"
	"github.com/impyard/impyard/lib/judge"
)

// control answers an origin-form request: the gateway's own API. It
// serves /v1/health itself and hands the rest of /v1/ to Config.Control,
// which authenticates each request by its bearer token. Neither serves
// anything from the file system, so nothing under IMPYARD_HOME (the CA
// key, secrets) can ever be read through it.
func (s *session) control(rec *Record, req *http1.Request) bool {
	reqBody, release, err := s.readBody(req)
	if err != nil {
		s.reject(rec, err)
		return false
	}
	defer release()
	path, _, _ := strings.Cut(req.Target, "?")
	status, body := http.StatusNotFound, `{"error":"no such endpoint"}`
	h := http.Header{"Content-Type": {"application/json"}}
	switch {
	case path == "/v1/health" && (req.Method == http.MethodGet || req.Method == http.MethodHead):
		status, body = http.StatusOK, `{"status":"ok"}`
	case path == "/v1/health":
		status, body = http.StatusMethodNotAllowed, `{"error":"method not allowed"}`
		h["Allow"] = []string{"GET, HEAD"}
	case !strings.HasPrefix(path, "/v1/"):
		body = `{"error":"no such endpoint; to go through the gateway, send an absolute URL or CONNECT"}`
	case s.g.cfg.Control != nil:
		status, h, body = s.serveControl(req, reqBody)
	}
	b := []byte(strings.TrimSuffix(body, "\n") + "\n")
	if req.Method == http.MethodHead {
		b = nil
	}
	if err := http1.WriteSimple(s.bw, req.Minor, status, h, b, req.Close); err != nil {
		return false
	}
	return !req.Close
}

// serveControl runs the control handler on one request. The handler may
// wait (an auto-approved action waits for its execution), which holds
// only this connection, and only while the client is there: the
// request's context ends when the client hangs up.
func (s *session) serveControl(req *http1.Request, body []byte) (int, http.Header, string) {
	u, err := url.ParseRequestURI(req.Target)
	if err != nil {
		return http.StatusBadRequest, http.Header{"Content-Type": {"application/json"}}, `{"error":"bad request target"}`
	}
	ctx := context.WithValue(context.WithValue(context.Background(), connKey{}, s.raw), policyKey{}, s.g.Policy())
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	hr := (&http.Request{Method: req.Method, URL: u, RequestURI: req.Target, Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: req.Minor,
		Header: req.Header, Body: http.NoBody, ContentLength: int64(len(body)), Host: req.Header.Get("Host"),
		RemoteAddr: s.client}).WithContext(ctx)
	if len(body) > 0 {
		hr.Body = readCloser{bytes.NewReader(body)}
	}
	w := &recorder{header: http.Header{}, status: http.StatusOK}
	stop := s.watchHangup(cancel)
	s.g.cfg.Control.ServeHTTP(w, hr)
	stop()
	body = w.body.Bytes()
	if w.status >= 500 {
		// An internal failure's text is for the owner (it names files
		// in the yard); the box learns only that it happened.
		s.g.logf("error: control %s %s: %d %s", req.Method, clip(req.Target), w.status, strings.TrimSpace(w.body.String()))
		return w.status, http.Header{"Content-Type": {"application/json"}}, `{"error":"internal error; the gateway's log has the detail"}`
	}
	return w.status, w.header, s.g.conceal(string(body))
}

// watchHangup calls hangup if the client hangs up (its connection reads
// EOF or fails) before stop is called, as net/http's background read
// does. Bytes that arrive meanwhile (the next request, pipelined) stay
// buffered for the next request, and end the watch: a client still
// sending is still there. With such bytes buffered already there is
// nothing to watch. stop returns once the watch is over, so the session
// alone reads the connection again.
func (s *session) watchHangup(hangup func()) (stop func()) {
	if s.br.Buffered() > 0 {
		return func() {}
	}
	s.conn.SetReadDeadline(time.Time{})
	done := make(chan struct{})
	var stopped atomic.Bool
	go func() {
		defer close(done)
		if _, err := s.br.Peek(1); err != nil && !stopped.Load() {
			hangup()
		}
	}()
	return func() {
		stopped.Store(true)
		// A deadline in the past ends a pending read at once.
		s.conn.SetReadDeadline(time.Unix(1, 0))
		<-done
	}
}

type connKey struct{}

// Conn is the client connection a control request came on, so a handler
// can tell which listener (and which box) it reached.
func Conn(ctx context.Context) net.Conn {
	c, _ := ctx.Value(connKey{}).(net.Conn)
	return c
}

type policyKey struct{}

// PolicyOf is the policy in force when a control request came in, so a
// handler can check names against it without holding the gateway; nil
// outside a control request.
func PolicyOf(ctx context.Context) *judge.Policy {
	p, _ := ctx.Value(policyKey{}).(*judge.Policy)
	return p
}

type readCloser struct{ *bytes.Reader }

func (readCloser) Close() error { return nil }

// recorder is the ResponseWriter the control handler writes into; the
// answer goes out through the gateway's own writer.
type recorder struct {
	header http.Header
	status int
	wrote  bool
	body   bytes.Buffer
}

func (r *recorder) Header() http.Header { return r.header }
func (r *recorder) WriteHeader(code int) {
	if !r.wrote {
		r.status, r.wrote = code, true
	}
}
func (r *recorder) Write(b []byte) (int, error) {
	r.wrote = true
	return r.body.Write(b)
}
