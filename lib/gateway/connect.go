package gateway

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"io"
	"net"
	"net/http"
	"net/netip"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/impyard/impyard/lib/http1"
	"github.com/impyard/impyard/lib/judge"
)

// connect handles a CONNECT on a listener: refuse it, tunnel it unread, or
// terminate TLS and serve the requests inside. It reports whether the
// connection can carry another request (only after a refusal).
func (s *session) connect(rec *Record, req *http1.Request) bool {
	rec.Request.Protocol = "https"
	host, port, err := parseAuthority(req.Target, 0)
	if err != nil {
		s.reject(rec, err)
		return false
	}
	t := &target{protocol: "https", host: host, port: port}
	rec.Request.Host, rec.Request.Port, rec.Request.Path = host, port, ""
	if req.ContentLength != 0 {
		s.reject(rec, badRequest("CONNECT with a body"))
		return false
	}
	if h := req.Header["Host"]; len(h) == 1 {
		if err := sameHost(h[0], t); err != nil {
			return s.refuse(rec, req, http.StatusForbidden, err.Error())
		}
	}
	if a, err := netip.ParseAddr(host); err == nil && s.g.isSelf(netip.AddrPortFrom(a, uint16(port))) {
		rec.Addr = net.JoinHostPort(host, strconv.Itoa(port))
		return s.refuse(rec, req, http.StatusForbidden, rec.Addr+" is the gateway's own listener (a loop)")
	}
	subject, ok := s.authenticate(rec, req)
	if !ok {
		return !req.Close
	}
	if why := s.g.paused(subject); why != "" {
		return s.refuse(rec, req, http.StatusForbidden, why)
	}
	pol := s.g.policy.get()
	d := pol.policy.JudgeConnect(host, port, subject)
	rec.decided(d)
	switch d.Verdict {
	case judge.Tunnel:
		s.tunnelTo(rec, req, pol.policy, t, subject)
	case judge.Allow:
		s.terminate(rec, req, t, subject)
	default:
		if s.uncredentialed(req, subject, pol.policy, &judge.Request{Protocol: "https", Method: http.MethodConnect, Host: host, Port: port}) {
			s.challenge(rec, req, reasonNoCredentials, req.Close)
			return !req.Close
		}
		return s.refuse(rec, req, http.StatusForbidden, "")
	}
	return false
}

// established answers a CONNECT that goes ahead.
func (s *session) established(req *http1.Request) error {
	s.bw.WriteString("HTTP/1.")
	s.bw.WriteByte(byte('0' + req.Minor))
	s.bw.WriteString(" 200 Connection established\r\n\r\n")
	return s.bw.Flush()
}

// terminate completes the TLS handshake as t's host, with a leaf from the
// minter, and serves the requests inside as https requests to t.
func (s *session) terminate(rec *Record, req *http1.Request, t *target, subject string) {
	if err := s.established(req); err != nil {
		return
	}
	var fronted string
	cfg := &tls.Config{
		MinVersion: tls.VersionTLS12,
		NextProtos: []string{"http/1.1"},
		// Without tickets no handshake skips GetCertificate, where the SNI
		// is checked; it also spares a ticket's cost per connection.
		SessionTicketsDisabled: true,
		// This leg never leaves the host (a box reaches the gateway on a
		// loopback listener), so the post-quantum hybrid, which doubles
		// the handshake's cost, buys nothing here; the upstream leg keeps
		// Go's defaults. X25519 first: clients send a share for it, so no
		// handshake needs a retry.
		CurvePreferences: []tls.CurveID{tls.X25519, tls.CurveP256},
		// Go starts a connection with records sized for one TCP segment
		// of a slow link, so a response of a little over 1 KiB went out
		// as two records, two writes; on this leg one record per flush
		// is one write.
		DynamicRecordSizingDisabled: true,
		GetCertificate: func(hello *tls.ClientHelloInfo) (*tls.Certificate, error) {
			if hello.ServerName != "" {
				if sni, err := judge.CanonicalHost(hello.ServerName); err != nil || sni != t.host {
					fronted = hello.ServerName
					return nil, errors.New("SNI does not name the CONNECT host")
				}
			}
			return s.g.cfg.Minter.Leaf(t.host)
		},
	}
	// The client may have sent its ClientHello right behind the CONNECT;
	// those bytes are in s.br already.
	tc := tls.Server(&bufferedConn{Conn: s.conn, r: s.br}, cfg)
	s.conn.SetDeadline(time.Now().Add(s.g.lim.ReadHeaderTimeout))
	if err := tc.Handshake(); err != nil {
		// No HTTP answer went out inside the tunnel.
		rec.Verdict, rec.Reason = VerdictReject, "TLS handshake with the client failed: "+err.Error()
		if fronted != "" {
			rec.Verdict, rec.Reason = VerdictDeny, "SNI "+clip(fronted)+" does not name the CONNECT host "+t.host+" (domain fronting)"
			rec.RefusedBy = RefusedByGateway
		}
		s.g.record(rec, true)
		return
	}
	s.conn.SetDeadline(time.Time{})
	// The CONNECT's buffers serve no more requests: the TLS connection
	// reads what the reader still holds, then the socket itself. Two
	// buffers fewer are 16 KiB less for every connection a box holds.
	s.br, s.bw = nil, nil
	inner := &session{
		g:       s.g,
		raw:     s.raw,
		conn:    tc,
		br:      bufio.NewReaderSize(tc, bufSize),
		bw:      bufio.NewWriterSize(tc, bufSize),
		client:  s.client,
		tunnel:  t,
		subject: subject,
		task:    rec.task,
		state:   s.state,
		// The token, kept for the MCP door: it names the run.
		credentials: req.Header.Get("Proxy-Authorization"),
		firstBy:     time.Now().Add(s.g.lim.ReadHeaderTimeout),
	}
	inner.serve()
	tc.Close()
}

// bufferedConn reads what a bufio.Reader already holds, then the
// connection itself, and lets the reader go.
type bufferedConn struct {
	net.Conn
	r *bufio.Reader
}

func (c *bufferedConn) Read(b []byte) (int, error) {
	if c.r != nil {
		if c.r.Buffered() > 0 {
			return c.r.Read(b)
		}
		c.r = nil
	}
	return c.Conn.Read(b)
}

// tunnelTo resolves t, checks each address with the judge and pipes bytes
// unread between the client and the first address allowed.
func (s *session) tunnelTo(rec *Record, req *http1.Request, p *judge.Policy, t *target, subject string) {
	g := s.g
	addrs, err := g.resolver.Lookup(context.Background(), t.host)
	if err != nil {
		s.refuse(rec, req, http.StatusBadGateway, err.Error())
		return
	}
	var addr, judged netip.AddrPort
	loop := ""
	for _, a := range addrs {
		ap := netip.AddrPortFrom(a, uint16(t.port))
		if g.isSelf(ap) {
			loop = ap.String() + " is the gateway's own listener (a loop)"
			continue
		}
		d := p.JudgeConnectAddr(t.host, t.port, subject, a)
		if d.Verdict == judge.Tunnel {
			addr = ap
			rec.decided(d)
			break
		}
		if !judged.IsValid() {
			judged = ap
			rec.decided(d)
		}
	}
	if !addr.IsValid() {
		if judged.IsValid() {
			rec.Addr = judged.String()
		}
		s.refuse(rec, req, http.StatusForbidden, loop)
		return
	}
	rec.Addr = addr.String()
	if err := g.decision(rec); err != nil {
		s.refuse(rec, req, http.StatusServiceUnavailable, unrecorded)
		return
	}
	start := time.Now()
	up, err := g.policy.opts.Conn(context.Background(), addr)
	rec.UpstreamMS = float64(time.Since(start).Microseconds()) / 1000
	if err != nil {
		rec.Status, rec.Error = upstreamStatus(err), "upstream: "+err.Error()
		g.outcome(rec)
		s.writeError(rec, req, nil, true)
		return
	}
	defer up.Close()
	if err := s.established(req); err != nil {
		rec.Error = "client: " + err.Error()
		g.outcome(rec)
		return
	}
	rec.Status = http.StatusOK
	rec.BytesIn, rec.BytesOut = pipe(s.raw, s.br, up, g.lim.IdleTimeout)
	g.outcome(rec)
}

// pipe copies both ways between the client (read through cr, which may
// already hold bytes) and up until both directions end, one breaks, or
// nothing moved either way for idle. It returns the bytes sent each way.
func pipe(client net.Conn, cr io.Reader, up io.ReadWriteCloser, idle time.Duration) (in, out int64) {
	var last atomic.Int64
	last.Store(time.Now().UnixNano())
	upConn, _ := up.(net.Conn)
	done := make(chan int64, 1)
	go func() {
		n, err := copyIdle(client, up, upConn, idle, &last)
		if err != nil {
			// A broken direction breaks the tunnel: wake the other one.
			client.Close()
			up.Close()
		} else {
			closeWrite(client)
		}
		done <- n
	}()
	in, err := copyIdle(up, cr, client, idle, &last)
	if err != nil {
		client.Close()
		up.Close()
	} else {
		closeWrite(up)
	}
	return in, <-done
}

// copyIdle copies src to dst until src ends (a nil error) or fails. A read
// that times out ends the copy only if neither direction has moved for
// idle; srcConn, when not nil, is where src's read deadline is set.
func copyIdle(dst io.Writer, src io.Reader, srcConn net.Conn, idle time.Duration, last *atomic.Int64) (int64, error) {
	buf := make([]byte, 32<<10)
	dstConn, _ := dst.(net.Conn)
	var n int64
	for {
		if srcConn != nil {
			srcConn.SetReadDeadline(time.Now().Add(idle))
		}
		nr, err := src.Read(buf)
		if nr > 0 {
			last.Store(time.Now().UnixNano())
			if dstConn != nil {
				dstConn.SetWriteDeadline(time.Now().Add(idle))
			}
			nw, werr := dst.Write(buf[:nr])
			n += int64(nw)
			if werr != nil {
				return n, werr
			}
		}
		switch {
		case err == io.EOF:
			return n, nil
		case err != nil:
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() && time.Since(time.Unix(0, last.Load())) < idle {
				continue
			}
			return n, err
		}
	}
}

// closeWrite half-closes c when it can, so the far side sees the end of
// this direction while the other keeps flowing.
func closeWrite(c io.Closer) {
	if cw, ok := c.(interface{ CloseWrite() error }); ok {
		cw.CloseWrite()
		return
	}
	c.Close()
}

// switchProtocols relays a 101 answer to an upgrade a rule allowed, then
// pipes the two connections, as a tunnel: unread, or with metered set
// (a WebSocket under a metering rule), the upstream's frames read for
// usage on the way.
func (s *session) switchProtocols(rec *Record, req *http1.Request, resp *http.Response, metered bool) {
	up, ok := resp.Body.(io.ReadWriteCloser)
	if !ok {
		rec.Status, rec.Error = http.StatusBadGateway, "upstream switched protocols without a connection to hand over"
		s.g.outcome(rec)
		s.writeError(rec, req, nil, true)
		return
	}
	h := resp.Header.Clone()
	s.bw.WriteString("HTTP/1.1 101 Switching Protocols\r\n")
	h.Write(s.bw)
	s.bw.WriteString("\r\n")
	if err := s.bw.Flush(); err != nil {
		rec.Error = "client: " + err.Error()
		s.g.outcome(rec)
		return
	}
	client := s.conn
	if s.tunnel == nil {
		// The TCP connection itself, which can half-close.
		client = s.raw
	}
	var fm *frameMeter
	if metered {
		fm = newFrameMeter(up)
		up = fm
	}
	in, out := pipe(client, s.br, up, s.g.lim.IdleTimeout)
	rec.BytesIn += in
	rec.BytesOut = out
	if fm != nil {
		rec.Usage = fm.usage()
	}
	s.g.outcome(rec)
}
