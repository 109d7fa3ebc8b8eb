package gateway

import (
	"context"
	"io"
	"net/http"
	"time"

	"github.com/impyard/impyard/lib/http1"
	"github.com/impyard/impyard/lib/judge"
)

// DoorHost is the name boxes reach the yard's MCP servers at:
// https://mcp.impyard/<name>. It resolves nowhere: the gateway answers
// for it itself, through Config.Door.
const DoorHost = "mcp.impyard"

// DoorRequest is one judged request to the door.
type DoorRequest struct {
	Subject string // the imp asking
	Task    string
	Path    string // /<name>
	Method  string
	Header  http.Header
	Body    []byte
	// Decision is the judge's: Deny is answered as JSON-RPC errors, Gate
	// files the call as a gate, Allow makes it.
	Decision judge.Decision
	// Record is the id of the request's decision record.
	Record string
	// Credentials is the Proxy-Authorization the request's connection
	// was authenticated with (inside a tunnel, the CONNECT's): what names
	// the run, where the subject names only the imp.
	Credentials string
}

// DoorReply is the door's answer.
type DoorReply struct {
	Status int
	Header http.Header
	Body   []byte
	// Error, when set, is recorded as the exchange's error: the call was
	// allowed but not made, or failed.
	Error string
	// Stream, when set, is the body in place of Body, sent as it comes
	// (chunked, each part flushed): a call's server-sent events.
	Stream DoorStream
}

// DoorStream is a reply's body of unknown length.
type DoorStream interface {
	io.Reader
	// End ends the stream, early if the client went away first, and
	// returns the exchange's error to record ("" for none).
	End() string
}

// Door serves the MCP servers behind DoorHost. Serve must answer every
// request without waiting on anyone's approval.
type Door interface {
	Serve(ctx context.Context, r *DoorRequest) *DoorReply
}

// door answers a request to DoorHost. A denied one is recorded as any
// denial and answered by the door in JSON-RPC; an allowed or gated one is
// recorded before the door acts on it, as a forwarded request is.
func (s *session) door(rec *Record, req *http1.Request, t *target, subject string, pol *judge.Policy, d judge.Decision, body []byte, keep bool) bool {
	g := s.g
	if t.protocol != "https" || t.port != 443 {
		return s.deny(rec, req, http.StatusForbidden, "the MCP door is https://"+DoorHost+"/ on port 443 only", keep)
	}
	creds := s.credentials
	if s.tunnel == nil {
		creds = req.Header.Get("Proxy-Authorization")
	}
	dr := &DoorRequest{Subject: subject, Task: rec.task, Path: t.path, Method: req.Method, Header: req.Header, Body: body, Decision: d, Record: rec.ID,
		Credentials: creds}
	// The policy the request was judged by, for PolicyOf: a gate the
	// door files is checked against its rules, as a proposal is.
	ctx, cancel := context.WithCancel(context.WithValue(context.Background(), policyKey{}, pol))
	defer cancel()
	if d.Verdict == judge.Deny {
		reply := g.cfg.Door.Serve(ctx, dr)
		rec.Verdict, rec.Status = VerdictDeny, reply.Status
		g.record(rec, true)
		return s.writeDoor(rec, req, reply, keep)
	}
	if err := g.decision(rec); err != nil {
		return s.deny(rec, req, http.StatusServiceUnavailable, unrecorded, keep)
	}
	stop := s.watchHangup(cancel)
	reply := g.cfg.Door.Serve(ctx, dr)
	if reply.Stream != nil {
		// Still watched while it streams: a client gone quiet and away
		// ends the call, not only one a write fails on.
		keep = s.streamDoor(rec, req, reply, keep)
		stop()
		return keep
	}
	stop()
	rec.Status, rec.Error = reply.Status, reply.Error
	rec.BytesOut = int64(len(reply.Body))
	g.outcome(rec)
	return s.writeDoor(rec, req, reply, keep)
}

func (s *session) writeDoor(rec *Record, req *http1.Request, reply *DoorReply, keep bool) bool {
	h := reply.Header.Clone()
	if h == nil {
		h = make(http.Header)
	}
	h["X-Impgw-Decision"] = []string{rec.ID}
	s.conn.SetWriteDeadline(time.Now().Add(s.g.lim.IdleTimeout))
	if err := http1.WriteSimple(s.bw, req.Minor, reply.Status, h, reply.Body, !keep); err != nil {
		return false
	}
	return keep
}

// streamDoor sends a reply whose body comes as the call goes on, and
// records the exchange once the stream has ended. A client that goes
// away ends the stream, and with it the call.
func (s *session) streamDoor(rec *Record, req *http1.Request, reply *DoorReply, keep bool) bool {
	h := reply.Header.Clone()
	if h == nil {
		h = make(http.Header)
	}
	h["X-Impgw-Decision"] = []string{rec.ID}
	s.conn.SetWriteDeadline(time.Now().Add(s.g.lim.IdleTimeout))
	resp := &http.Response{StatusCode: reply.Status, Header: h, ContentLength: -1, Body: io.NopCloser(reply.Stream)}
	n, closeConn, err := http1.WriteResponse(s.bw, resp, req.Method, req.Minor, !keep)
	rec.Status, rec.Error = reply.Status, reply.Stream.End()
	if err != nil && rec.Error == "" {
		rec.Error = "writing the stream to the client: " + err.Error()
	}
	rec.BytesOut = n
	s.g.outcome(rec)
	return err == nil && !closeConn
}
