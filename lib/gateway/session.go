package gateway

import (
	"bufio"
	"errors"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/impyard/impyard/lib/http1"
	"github.com/impyard/impyard/lib/judge"
)

// deadlineConn keeps a write deadline about the idle timeout ahead, so a
// client that stops reading is dropped however long the response. It
// moves the deadline only when an eighth of it has passed: moving a
// timer on every write costs more than the precision is worth.
type deadlineConn struct {
	net.Conn
	idle time.Duration
	set  time.Time // when the write deadline was last moved
}

func (c *deadlineConn) Write(b []byte) (int, error) {
	if now := time.Now(); now.Sub(c.set) > c.idle/8 {
		if err := c.Conn.SetWriteDeadline(now.Add(c.idle)); err != nil {
			return 0, err
		}
		c.set = now
	}
	return c.Conn.Write(b)
}

// SetWriteDeadline moves the deadline and forgets the last refresh, so
// the next Write sets its own again.
func (c *deadlineConn) SetWriteDeadline(t time.Time) error {
	c.set = time.Time{}
	return c.Conn.SetWriteDeadline(t)
}

// SetDeadline is SetWriteDeadline's counterpart for both directions.
func (c *deadlineConn) SetDeadline(t time.Time) error {
	c.set = time.Time{}
	return c.Conn.SetDeadline(t)
}

// session serves the requests of one client connection: the plain one
// accepted by a listener, or the TLS one inside a terminated CONNECT.
type session struct {
	g      *Gateway
	raw    net.Conn // the accepted connection
	conn   net.Conn // what requests are read from: raw, or TLS over it
	br     *bufio.Reader
	bw     *bufio.Writer
	client string

	// Inside a terminated CONNECT: the CONNECT target every request must
	// name, and the subject the CONNECT authenticated.
	tunnel  *target
	subject string
	task    string
	// credentials are the CONNECT's Proxy-Authorization.
	credentials string
	state       *connState
	// firstBy is when the first request's head must have arrived: the
	// header timeout counts from accept (or the TLS handshake), so a
	// connection that sends nothing holds its slot no longer than that.
	firstBy time.Time
	// ended: the gateway, not the client, ended the connection, so the
	// client may still be sending.
	ended bool
}

const bufSize = 8 << 10

func (g *Gateway) serveConn(c net.Conn, st *connState, accepted time.Time) {
	defer c.Close()
	dc := &deadlineConn{Conn: c, idle: g.lim.IdleTimeout}
	s := &session{
		g:       g,
		raw:     c,
		conn:    dc,
		br:      bufio.NewReaderSize(dc, bufSize),
		bw:      bufio.NewWriterSize(dc, bufSize),
		client:  c.RemoteAddr().String(),
		state:   st,
		firstBy: accepted.Add(g.lim.ReadHeaderTimeout),
	}
	s.serve()
	if s.ended {
		linger(c)
	}
}

// linger half-closes c and reads what the client still sends for a
// moment before the close, so the answer already written reaches the
// client instead of being cut off by the reset that closing a socket with
// unread input causes.
func linger(c net.Conn) {
	tc, ok := c.(*net.TCPConn)
	if !ok || tc.CloseWrite() != nil {
		return
	}
	tc.SetReadDeadline(time.Now().Add(250 * time.Millisecond))
	io.Copy(io.Discard, io.LimitReader(tc, 1<<20))
}

// serve reads requests until the client closes, idles out, or a request
// leaves the connection unusable.
func (s *session) serve() {
	lim := &s.g.lim
	for {
		headBy := s.firstBy
		if headBy.IsZero() {
			s.conn.SetReadDeadline(time.Now().Add(lim.IdleTimeout))
		} else {
			s.conn.SetReadDeadline(headBy)
			s.firstBy = time.Time{}
		}
		s.state.idle.Store(true)
		_, err := s.br.Peek(1)
		s.state.idle.Store(false)
		if err != nil {
			return
		}
		start := time.Now()
		if headBy.IsZero() {
			headBy = start.Add(lim.ReadHeaderTimeout)
		}
		s.conn.SetReadDeadline(headBy)
		req, err := http1.ReadRequest(s.br, lim.MaxHeaderBytes)
		if err != nil {
			s.reject(s.newRecord(start, req, s.g.Policy()), err)
			return
		}
		if !s.handle(start, req) {
			s.ended = true
			return
		}
	}
}

// handle answers one request and reports whether the connection can carry
// another.
func (s *session) handle(start time.Time, req *http1.Request) bool {
	// The policy in force when the head arrived: the one that names
	// the headers to redact also judges, unless a body is read first.
	pol := s.g.policy.get()
	rec := s.newRecord(start, req, pol.policy)
	if req.Method == http.MethodConnect {
		if s.tunnel != nil {
			s.reject(rec, badRequest("CONNECT inside a CONNECT tunnel"))
			return false
		}
		return s.connect(rec, req)
	}
	var t target
	var err error
	switch {
	case s.tunnel != nil && strings.HasPrefix(req.Target, "/"):
		t, err = parseOrigin(req.Target, s.tunnel.protocol, s.tunnel.host, s.tunnel.port)
	case s.tunnel != nil:
		if t, err = parseAbsolute(req.Target); err == nil && (t.protocol != s.tunnel.protocol || t.host != s.tunnel.host || t.port != s.tunnel.port) {
			rec.setTarget(&t)
			shown := t
			shown.query = rec.Request.Query
			return s.refuse(rec, req, http.StatusForbidden, "request target "+shown.url()+" is not the CONNECT host (domain fronting)")
		}
	case strings.HasPrefix(req.Target, "/"):
		return s.control(rec, req)
	default:
		t, err = parseAbsolute(req.Target)
	}
	if err != nil {
		s.reject(rec, err)
		return false
	}
	rec.setTarget(&t)
	subject, ok := s.authenticate(rec, req)
	if !ok {
		return !req.Close && req.ContentLength == 0
	}
	if why := s.g.paused(subject); why != "" {
		return s.refuse(rec, req, http.StatusForbidden, why)
	}
	return s.proxy(rec, req, &t, subject, pol)
}

// paused is why subject's requests are refused now, "" when they are
// not (see Config.Paused).
func (g *Gateway) paused(subject string) string {
	if g.cfg.Paused == nil {
		return ""
	}
	return g.cfg.Paused(subject)
}

// authenticate names the request's subject, and sets the record's task:
// inside a tunnel, the CONNECT's.
func (s *session) authenticate(rec *Record, req *http1.Request) (string, bool) {
	if s.tunnel != nil {
		return s.subject, true
	}
	auth := s.g.cfg.Authenticate
	if auth == nil {
		return "", true
	}
	subject, task, err := auth(s.raw, req.Header.Get("Proxy-Authorization"))
	if err != nil {
		s.challenge(rec, req, err.Error(), req.Close || req.ContentLength != 0)
		return "", false
	}
	rec.Request.Imp, rec.task = subject, task
	return subject, true
}

// challenge answers 407 with a Basic challenge, the gateway's refusal,
// recorded: a client that holds proxy credentials sends them then.
func (s *session) challenge(rec *Record, req *http1.Request, reason string, closeConn bool) {
	rec.Verdict, rec.Reason, rec.Status = VerdictDeny, "proxy authentication: "+reason, http.StatusProxyAuthRequired
	rec.RefusedBy = RefusedByGateway
	s.g.record(rec, true)
	s.writeError(rec, req, http.Header{"Proxy-Authenticate": {`Basic realm="impgw"`}}, closeConn)
}

// uncredentialed reports a request or CONNECT sent without proxy
// credentials, judged anonymous and refused, that a rule scoped to a
// subject would match: the client is asked for its credentials (407)
// instead. Clients such as git send them only when asked, and would
// otherwise pass as nobody. Inside a tunnel the CONNECT spoke for the
// subject already.
func (s *session) uncredentialed(req *http1.Request, subject string, p *judge.Policy, jr *judge.Request) bool {
	return s.tunnel == nil && s.g.cfg.Authenticate != nil && subject == "" &&
		len(req.Header["Proxy-Authorization"]) == 0 && p.Credentials(jr)
}

// reasonNoCredentials is why an uncredentialed request is asked for
// credentials.
const reasonNoCredentials = "no proxy credentials, and only a rule for a subject would match"

func (s *session) newRecord(start time.Time, req *http1.Request, pol *judge.Policy) *Record {
	rec := &Record{ID: newID(), Time: start, Client: s.client, redact: pol.Redact()}
	rec.Request.Imp, rec.task = s.subject, s.task
	if req != nil {
		// Overwritten by setTarget once the target parses; a reject keeps
		// the target as sent.
		rec.Request.Method, rec.Request.Path = req.Method, clip(redactTarget(req.Target, rec.redact))
		rec.Request.Headers = RecordHeaders(req.Header, pol.Redact()...)
	}
	if t := s.tunnel; t != nil {
		rec.Request.Protocol, rec.Request.Host, rec.Request.Port = t.protocol, t.host, t.port
	}
	return rec
}

func (r *Record) setTarget(t *target) {
	r.Request.Protocol, r.Request.Host, r.Request.Port = t.protocol, t.host, t.port
	r.Request.Path, r.Request.Query = t.path, redactQuery(t.query, r.redact)
}

// reject answers a request too malformed to judge, records it, and leaves
// the connection to be closed: after a framing error nothing more on it
// can be trusted.
func (s *session) reject(rec *Record, err error) {
	status := http.StatusBadRequest
	reason := err.Error()
	var he *http1.Error
	var ne net.Error
	switch {
	case errors.As(err, &he):
		status = he.Status
	case errors.As(err, &ne) && ne.Timeout() || errors.Is(err, os.ErrDeadlineExceeded):
		status, reason = http.StatusRequestTimeout, "client too slow: request not received within the time limit"
	case errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF):
		status, reason = http.StatusBadRequest, "connection closed in the middle of a request"
	}
	rec.Verdict, rec.Reason, rec.Status = VerdictReject, reason, status
	s.g.record(rec, true)
	s.writeError(rec, nil, nil, true)
	s.ended = true
}

// refuse denies a request before its body was read, and reports whether
// the connection can carry another (only if there was no body). As with
// deny, a non-empty reason is the gateway's own refusal.
func (s *session) refuse(rec *Record, req *http1.Request, status int, reason string) bool {
	rec.Verdict, rec.Status = VerdictDeny, status
	if reason != "" {
		rec.Reason, rec.RefusedBy = reason, RefusedByGateway
	}
	s.g.record(rec, true)
	closeConn := req.Close || req.ContentLength != 0
	s.writeError(rec, req, nil, closeConn)
	return !closeConn
}

// writeError sends the gateway's own answer: the verdict and reason as
// text, and the decision id to find the record by.
func (s *session) writeError(rec *Record, req *http1.Request, h http.Header, closeConn bool) {
	minor := 1
	if req != nil {
		minor = req.Minor
	}
	if h == nil {
		h = make(http.Header)
	}
	h["Content-Type"] = []string{"text/plain; charset=utf-8"}
	h["X-Impgw-Decision"] = []string{rec.ID}
	if rec.retry != "" {
		h["Retry-After"] = []string{rec.retry}
	}
	body := "impgw: " + rec.Verdict
	if rec.Rule != "" {
		body += " by rule " + rec.Rule
	}
	reason := rec.Reason
	if rec.shown != "" {
		reason = rec.shown
	}
	body = s.g.conceal(body + ": " + reason + "\n")
	s.conn.SetWriteDeadline(time.Now().Add(s.g.lim.IdleTimeout))
	_ = http1.WriteSimple(s.bw, minor, rec.Status, h, []byte(body), closeConn)
}

// overloaded answers a connection over the limit with 503 and closes it.
func (g *Gateway) overloaded(c net.Conn) {
	defer c.Close()
	rec := &Record{
		Time: time.Now(), Client: c.RemoteAddr().String(), Verdict: VerdictReject,
		Reason: "too many connections", Status: http.StatusServiceUnavailable,
	}
	g.record(rec, true)
	c.SetDeadline(time.Now().Add(time.Second))
	bw := bufio.NewWriter(c)
	_ = http1.WriteSimple(bw, 1, rec.Status, http.Header{"Retry-After": {"1"}, "X-Impgw-Decision": {rec.ID}}, []byte("impgw: reject: too many connections\n"), true)
}
