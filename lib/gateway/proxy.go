package gateway

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/impyard/impyard/lib/http1"
	"github.com/impyard/impyard/lib/judge"
	"github.com/impyard/impyard/lib/mcp"
)

// proxy judges a request for t by pol, the policy in force when its head
// arrived, and forwards it when allowed. It reports whether the
// connection can carry another request.
func (s *session) proxy(rec *Record, req *http1.Request, t *target, subject string, pol *loaded) bool {
	g := s.g
	if h := req.Header["Host"]; len(h) == 1 {
		if err := sameHost(h[0], t); err != nil {
			return s.refuse(rec, req, http.StatusForbidden, err.Error())
		}
	}
	for _, k := range []string{"Content-Type", "Content-Encoding"} {
		if len(req.Header[k]) > 1 {
			s.reject(rec, badRequest("more than one %s header", k))
			return false
		}
	}
	if req.ContentLength > 0 {
		rec.Request.BodySize = req.ContentLength
	}
	body, release, err := s.readBody(req)
	if err != nil {
		s.reject(rec, err)
		return false
	}
	defer release()
	rec.Request.BodySize, rec.BytesIn = int64(len(body)), int64(len(body))
	keep := !req.Close

	// What is judged and metered is the body decoded; what goes upstream
	// is body, the bytes as sent, which decode to it.
	plain, unpack, err := s.decodeBody(req.Header.Get("Content-Encoding"), body, g.lim.MaxBodyBytes)
	if err != nil {
		return s.deny(rec, req, decodeStatus(err), err.Error(), keep)
	}
	defer unpack()
	rec.Request.BodySize = int64(len(plain))

	jr := newJudgeRequest(t, req.Method, req.Header, plain, subject)
	rec.Request.MCP, rec.Request.MCPError, rec.Request.Placeholders = jr.MCP, jr.MCPError, jr.Placeholders
	if req.ContentLength != 0 {
		// Reading the body took time: judge by the policy as it is now.
		pol = g.policy.get()
	}
	jr.Task, jr.Time = rec.task, g.cfg.Now()
	d := pol.policy.Judge(jr)
	rec.decided(d)
	if t.host == DoorHost && g.cfg.Door != nil {
		return s.door(rec, req, t, subject, pol.policy, d, body, keep)
	}
	if d.Verdict == judge.Gate {
		return s.deny(rec, req, http.StatusForbidden, "rule "+d.Rule+" gates the call, and only the MCP door at https://"+DoorHost+"/ files gates", keep)
	}
	if d.Verdict != judge.Allow && s.uncredentialed(req, subject, pol.policy, jr) {
		s.challenge(rec, req, reasonNoCredentials, !keep)
		return keep
	}
	if d.Verdict != judge.Allow {
		if a, err := netip.ParseAddr(t.host); err == nil {
			// An IP host is its own address: the judge saw it already.
			rec.Addr = netip.AddrPortFrom(a, uint16(t.port)).String()
		}
		return s.deny(rec, req, http.StatusForbidden, "", keep)
	}
	addr, d, status, reason := s.pickAddr(pol.policy, jr, d)
	rec.decided(d)
	if status == 0 && len(d.Rated) > 0 {
		if why, retry := g.takeRates(subject, d.Rated, time.Now()); why != "" {
			status, reason, rec.retry = http.StatusTooManyRequests, why, retry
		}
	}
	if status == 0 && d.Meter != "" && g.cfg.Admit != nil && subject != "" {
		end, err := g.cfg.Admit(Call{Subject: subject, Task: rec.task, ID: rec.ID, Path: t.path, Body: plain})
		switch {
		case errors.Is(err, ErrUnmetered):
			status, reason = http.StatusServiceUnavailable, err.Error()
		case err != nil:
			status, reason, rec.retry = http.StatusTooManyRequests, err.Error(), retryAfter(err, time.Now())
		case end != nil:
			// Every path from here meters the record once, through
			// outcome or deny, before this returns.
			rec.call = rec.ID
			defer end()
		}
	}
	if status != 0 {
		if addr.IsValid() {
			rec.Addr = addr.String()
		}
		return s.deny(rec, req, status, reason, keep)
	}
	out, reason, shown := s.outbound(req, t, jr, d, body)
	if out == nil {
		rec.shown = shown
		return s.deny(rec, req, http.StatusForbidden, reason, keep)
	}
	if d.Meter != "" {
		// Usage is read from the bytes relayed: a compressed response
		// would hide it, and identity is always acceptable; so is a
		// WebSocket without permessage-deflate.
		delete(out.Header, "Accept-Encoding")
		delete(out.Header, "Sec-Websocket-Extensions")
	}
	if d.Inject != nil {
		rec.Request.Headers = RecordHeaders(req.Header, append([]string{d.Inject.Header}, pol.policy.Redact()...)...)
	}
	rec.Addr = addr.String()
	if err := g.decision(rec); err != nil {
		return s.deny(rec, req, http.StatusServiceUnavailable, unrecorded, keep)
	}
	sent := time.Now()
	resp, err := pol.upstream.RoundTripWithin(addr, out, d.Timeout)
	rec.UpstreamMS = float64(time.Since(sent).Microseconds()) / 1000
	if err != nil {
		rec.Status, rec.Error = upstreamStatus(err), "upstream: "+err.Error()
		if rec.Status == http.StatusGatewayTimeout {
			wait := d.Timeout
			if wait == 0 {
				wait = g.lim.UpstreamTimeout
			}
			rec.Error = fmt.Sprintf("upstream: no response within %s: %v", wait, err)
		}
		g.outcome(rec)
		s.writeError(rec, req, nil, !keep)
		return keep
	}
	defer resp.Body.Close()
	rec.Status = resp.StatusCode
	if resp.StatusCode == http.StatusSwitchingProtocols {
		if out.Header.Get("Upgrade") == "" {
			// An upstream may not turn a judged connection into a pipe no
			// later request on it would be judged in.
			rec.Status, rec.Error = http.StatusBadGateway, "upstream switched protocols unasked"
			g.outcome(rec)
			s.writeError(rec, req, nil, true)
			return false
		}
		s.switchProtocols(rec, req, resp, d.WebSocket && d.Meter != "")
		return false
	}
	var ur *usageReader
	if d.Meter != "" && resp.StatusCode >= 200 && resp.StatusCode < 300 {
		ur = newUsageReader(resp.Body, d.Meter, resp.Header.Get("Content-Type"))
		resp.Body = ur
	}
	n, closeConn, err := http1.WriteResponse(s.bw, resp, req.Method, req.Minor, !keep)
	rec.BytesOut = n
	if err != nil {
		rec.Error = "relaying the response: " + err.Error()
	}
	if ur != nil {
		rec.Usage = ur.usage()
	}
	g.outcome(rec)
	return !closeConn
}

// newJudgeRequest describes a request to the judge, body decoded: MCP
// calls lifted from it, placeholders found.
func newJudgeRequest(t *target, method string, h http.Header, body []byte, subject string) *judge.Request {
	jr := &judge.Request{
		Subject:  subject,
		Protocol: t.protocol,
		Method:   method,
		Host:     t.host,
		Port:     t.port,
		Path:     t.path,
		Query:    t.query,
		Header:   h,
		BodySize: int64(len(body)),
		Body:     body,
	}
	u := ""
	if strings.Contains(t.host, judge.PlaceholderPrefix) || strings.Contains(t.path, judge.PlaceholderPrefix) || strings.Contains(t.query, judge.PlaceholderPrefix) {
		// Only then is the URL worth rendering to be scanned.
		u = t.url()
	}
	jr.Placeholders = judge.FindPlaceholders(h, u, body)
	lifted, err := mcp.Lift(h.Get("Content-Type"), body)
	if err != nil {
		jr.MCPError = err.Error()
	} else if lifted.Calls != nil {
		jr.MCP = &lifted
	}
	return jr
}

// decided copies a judge decision into the record.
func (r *Record) decided(d judge.Decision) {
	r.Verdict, r.Rule, r.Reason, r.WouldDeny = d.Verdict.String(), d.Rule, d.Reason, d.WouldDeny
}

// deny records and answers a request that is not forwarded. An empty
// reason keeps the judge's; any other is the gateway's own refusal. The
// body was read, so the connection survives unless the client closes it.
func (s *session) deny(rec *Record, req *http1.Request, status int, reason string, keep bool) bool {
	rec.Verdict, rec.Status = VerdictDeny, status
	if reason != "" {
		rec.Reason, rec.RefusedBy = reason, RefusedByGateway
	}
	s.g.record(rec, true)
	s.writeError(rec, req, nil, !keep)
	return keep
}

// readBody reads the request body within the size and time limits,
// sending 100 Continue first when the client waits for it. The body's
// bytes are taken from the gateway's body budget first, and release
// gives them back once the body is no longer needed; a body that does
// not fit is refused with 503 before any of it is read. A chunked body,
// whose size is known only at its end, holds the size limit while it is
// read.
func (s *session) readBody(req *http1.Request) (body []byte, release func(), err error) {
	release = func() {}
	if req.ContentLength == 0 {
		return nil, release, nil
	}
	lim := &s.g.lim
	hold := req.ContentLength
	if hold < 0 || hold > lim.MaxBodyBytes {
		hold = lim.MaxBodyBytes
	}
	if !s.g.bodies.take(hold) {
		return nil, release, errBudget
	}
	defer func() {
		if err != nil {
			s.g.bodies.give(hold)
			return
		}
		s.g.bodies.give(hold - int64(len(body)))
		n := int64(len(body))
		release = func() { s.g.bodies.give(n) }
	}()
	if req.Expect100 && req.ContentLength <= lim.MaxBodyBytes {
		s.bw.WriteString("HTTP/1.1 100 Continue\r\n\r\n")
		if err := s.bw.Flush(); err != nil {
			return nil, release, err
		}
	}
	s.conn.SetReadDeadline(time.Now().Add(lim.ReadBodyTimeout))
	body, err = req.ReadBody(s.br, lim.MaxBodyBytes, lim.MaxHeaderBytes)
	return body, release, err
}

// pickAddr resolves the host (the name was already judged, so a denied
// name never causes a lookup) and judges each address, returning the
// first the policy allows. A non-zero status means none was: then the
// address and decision are the judge's first refusal, or the reason is
// the gateway's own (no such host, a loop).
func (s *session) pickAddr(p *judge.Policy, jr *judge.Request, d judge.Decision) (netip.AddrPort, judge.Decision, int, string) {
	addrs, err := s.g.resolver.Lookup(context.Background(), jr.Host)
	if err != nil {
		return netip.AddrPort{}, d, http.StatusBadGateway, err.Error()
	}
	loop := ""
	refused, judged := d, netip.AddrPort{}
	for _, a := range addrs {
		ap := netip.AddrPortFrom(a, uint16(jr.Port))
		if s.g.isSelf(ap) {
			loop = ap.String() + " is the gateway's own listener (a loop)"
			continue
		}
		jr.Addr = a
		d2 := p.Judge(jr)
		if d2.Verdict == judge.Allow {
			return ap, d2, 0, ""
		}
		if !judged.IsValid() {
			refused, judged = d2, ap
		}
	}
	jr.Addr = netip.Addr{}
	if !judged.IsValid() {
		return netip.AddrPort{}, d, http.StatusForbidden, loop
	}
	return judged, refused, http.StatusForbidden, ""
}

// outbound builds the request sent upstream: hop-by-hop fields and
// Proxy-Authorization dropped, the rule's secret injected. It returns nil
// and a reason when the request must not go out after all, with the
// reason to tell the client when that must say less.
func (s *session) outbound(req *http1.Request, t *target, jr *judge.Request, d judge.Decision, body []byte) (*http.Request, string, string) {
	h := req.Header.Clone()
	upgrade := h.Get("Upgrade")
	http1.StripHopByHop(h)
	delete(h, "Host")
	delete(h, "Expect")
	delete(h, "Content-Length")
	if _, ok := h["User-Agent"]; !ok {
		// Without this, Request.Write would add Go's own.
		h["User-Agent"] = []string{""}
	}
	if upgrade != "" {
		// The judge allowed it, so a rule asked for it by name.
		h["Upgrade"] = []string{upgrade}
		h["Connection"] = []string{"Upgrade"}
	}
	for _, p := range jr.Placeholders {
		if d.Inject == nil || p.Where != d.Inject.Header || p.Secret != d.Inject.Secret {
			return nil, fmt.Sprintf("credential placeholder for %q in %s may not be sent here", p.Secret, p.Where), ""
		}
	}
	if in := d.Inject; in != nil {
		secret, err := s.g.secret(in.Secret)
		if err != nil {
			s.g.logf("error: %v", err)
			return nil, err.Error(), err.shown()
		}
		key := http.CanonicalHeaderKey(in.Header)
		placeholder := judge.PlaceholderPrefix + in.Secret
		if v := h.Get(key); strings.Contains(v, placeholder) {
			h[key] = []string{strings.ReplaceAll(v, placeholder, secret)}
		} else {
			h[key] = []string{strings.Replace(in.Format, "%s", secret, 1)}
		}
	}
	out := &http.Request{
		Method:     req.Method,
		URL:        &url.URL{Scheme: t.protocol, Host: net.JoinHostPort(t.host, strconv.Itoa(t.port)), Opaque: t.path, RawQuery: t.query},
		Proto:      "HTTP/1.1",
		ProtoMajor: 1,
		ProtoMinor: 1,
		Header:     h,
		Host:       t.hostHeader(),
	}
	if len(body) > 0 {
		out.ContentLength = int64(len(body))
		out.Body = io.NopCloser(bytes.NewReader(body))
		out.GetBody = func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(body)), nil }
	}
	return out, "", ""
}

// decodeStatus is the answer to a body decodeBody refused.
func decodeStatus(err error) int {
	var he *http1.Error
	switch {
	case errors.As(err, &he):
		return he.Status
	case errors.Is(err, ErrBomb):
		return http.StatusRequestEntityTooLarge
	case errors.Is(err, ErrEncoding):
		return http.StatusUnsupportedMediaType
	}
	return http.StatusBadRequest
}

func upstreamStatus(err error) int {
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		return http.StatusGatewayTimeout
	}
	return http.StatusBadGateway
}
