package gateway

import (
	"context"
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
}

// DoorReply is the door's answer.
type DoorReply struct {
	Status int
	Header http.Header
	Body   []byte
	// Error, when set, is recorded as the exchange's error: the call was
	// allowed but not made, or failed.
	Error string
}

// Door serves the MCP servers behind DoorHost. Serve must answer every
// request without waiting on anyone's approval.
type Door interface {
	Serve(ctx context.Context, r *DoorRequest) *DoorReply
}

// door answers a request to DoorHost. A denied one is recorded as any
// denial and answered by the door in JSON-RPC; an allowed or gated one is
// recorded before the door acts on it, as a forwarded request is.
func (s *session) door(rec *Record, req *http1.Request, t *target, subject string, d judge.Decision, body []byte, keep bool) bool {
	g := s.g
	if t.protocol != "https" || t.port != 443 {
		return s.deny(rec, req, http.StatusForbidden, "the MCP door is https://"+DoorHost+"/ on port 443 only", keep)
	}
	dr := &DoorRequest{Subject: subject, Task: rec.task, Path: t.path, Method: req.Method, Header: req.Header, Body: body, Decision: d, Record: rec.ID}
	ctx, cancel := context.WithCancel(context.Background())
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
