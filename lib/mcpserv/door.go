package mcpserv

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"

	"github.com/impyard/impyard/lib/config"
	"github.com/impyard/impyard/lib/id"
)

// JSON-RPC error codes the door answers with, in the range JSON-RPC
// leaves to implementations.
const (
	CodeDenied  = -32001 // the judge denied the request, or the imp may not call the server
	CodePending = -32002 // the call is a gate, pending approval
	CodeServer  = -32003 // the server could not be started, or died during the call
)

// Host is the name boxes reach the servers at (gateway.DoorHost).
const Host = "mcp.impyard"

// Verdicts of a Request: the judge's, as the gateway hands them on.
const (
	Denied = iota // the judge denied it: answered with JSON-RPC errors
	Allowed
	Gated // a tools/call sent alone, filed as a gate
)

// Request is one judged request to the door. It holds no type of the
// gateway's, so that what reads servers' states (impsup) links none of it.
type Request struct {
	Subject string // the imp asking
	Task    string
	Run     string // the run its token names, "" for a token of none
	Path    string // /<name>
	Method  string
	Body    []byte
	Verdict int
	Rule    string // the deciding rule
	Reason  string // the judge's reason
	// Accept is the request's Accept: a client that takes
	// text/event-stream gets a call's answer as a stream, with what the
	// server says of the call (progress, log messages) before it.
	Accept string
}

// Reply is the door's answer; Error, when set, is recorded as the
// exchange's error.
type Reply struct {
	Status int
	Header http.Header
	Body   []byte
	Error  string
	// Stream, when set, is the body in place of Body: server-sent
	// events, read until EOF. Its End says the exchange's error.
	Stream *Stream
}

// Door is the gateway's door to the yard's MCP servers.
type Door struct {
	M *Manager
	// Propose decides a gated call as the proposal it is, with the
	// envelope (intent mcp.<name>, the Payload) the door makes of it.
	Propose Proposer
}

// Proposer decides a gated call of r's imp, as the gateway decides
// every proposal of a box (lib/proposal): the pause, the run's
// gates_per_run and gate_bytes_per_run, and [[trust]] apply to it as to
// any other, and it is recorded as any other.
type Proposer func(ctx context.Context, r *Request, envelope []byte) Proposed

// Proposed is the decision on a gated call.
type Proposed struct {
	Verdict string // proposal.Verdict's name: gated, auto-approved, duplicate or refused
	Refusal string // proposal.Refusal's name, when refused
	Gate    string // the gate filed, or for a duplicate the identical one's
	Reason  string // what the box may be told
	// Err: the decision could not be recorded; it stands all the same.
	Err error
}

// message is one JSON-RPC message of a request body.
type message struct {
	ID     json.RawMessage `json:"id,omitempty"`
	Method string          `json:"method"`
	Params json.RawMessage `json:"params,omitempty"`
}

// Payload is a gated call, as its gate holds it: the exact call impexec
// makes once it is approved.
type Payload struct {
	Server    string          `json:"server"`
	Tool      string          `json:"tool"`
	Arguments json.RawMessage `json:"arguments,omitempty"`
}

func jsonReply(status int, v any) *Reply {
	b, _ := json.Marshal(v)
	return &Reply{Status: status, Header: http.Header{"Content-Type": {"application/json"}}, Body: b}
}

func rpcError(id json.RawMessage, code int, msg string, data any) map[string]any {
	e := map[string]any{"code": code, "message": msg}
	if data != nil {
		e["data"] = data
	}
	if id == nil {
		id = json.RawMessage("null")
	}
	return map[string]any{"jsonrpc": "2.0", "id": id, "error": e}
}

// refuse answers every request in body with the same error; a body of
// notifications alone, or one that does not parse, gets status.
func refuse(status int, body []byte, code int, msg string) *Reply {
	msgs, batch, err := parse(body)
	if err != nil {
		return jsonReply(status, rpcError(nil, code, msg, nil))
	}
	var out []any
	for _, m := range msgs {
		if m.ID != nil {
			out = append(out, rpcError(m.ID, code, msg, nil))
		}
	}
	switch {
	case len(out) == 0:
		return jsonReply(status, rpcError(nil, code, msg, nil))
	case !batch:
		return jsonReply(http.StatusOK, out[0])
	}
	return jsonReply(http.StatusOK, out)
}

func parse(body []byte) ([]message, bool, error) {
	text := strings.TrimLeft(string(body), " \t\r\n")
	if strings.HasPrefix(text, "[") {
		var ms []message
		err := json.Unmarshal(body, &ms)
		return ms, true, err
	}
	var m message
	if err := json.Unmarshal(body, &m); err != nil {
		return nil, false, err
	}
	return []message{m}, false, nil
}

// Serve answers one judged request to the door.
func (d *Door) Serve(ctx context.Context, r *Request) *Reply {
	if r.Method == http.MethodGet {
		// No server-sent event stream: every answer comes in the body of
		// the POST that asked. Said whatever the policy, since a GET
		// carries nothing, so that clients fall back to POST alone.
		return &Reply{Status: http.StatusMethodNotAllowed, Header: http.Header{"Allow": {"POST, DELETE"}}}
	}
	if r.Verdict == Denied {
		return refuse(http.StatusForbidden, r.Body, CodeDenied, "denied by impgw: "+r.Reason)
	}
	name := strings.TrimPrefix(r.Path, "/")
	org, err := d.M.Org()
	if err != nil {
		reply := refuse(http.StatusServiceUnavailable, r.Body, CodeServer, "org.toml unusable: no MCP server is served")
		reply.Error = err.Error()
		return reply
	}
	spec := org.MCP[name]
	if id.CheckName(name) != nil || spec == nil {
		reply := refuse(http.StatusNotFound, r.Body, CodeDenied, "no MCP server at "+Host+"/"+name)
		reply.Error = "no [mcp." + name + "] in org.toml"
		return reply
	}
	if !spec.Allows(r.Subject) {
		reply := refuse(http.StatusForbidden, r.Body, CodeDenied, fmt.Sprintf("imp %q may not call [mcp.%s]", r.Subject, name))
		reply.Error = "not in [mcp." + name + "] imps"
		return reply
	}
	switch r.Method {
	case http.MethodPost:
	case http.MethodDelete:
		// Sessions are the door's own, one per imp: a client's end of
		// one leaves the process for its next.
		return &Reply{Status: http.StatusOK}
	default:
		return &Reply{Status: http.StatusMethodNotAllowed, Header: http.Header{"Allow": {"POST, DELETE"}}}
	}
	msgs, batch, err := parse(r.Body)
	if err != nil || len(msgs) == 0 {
		return jsonReply(http.StatusBadRequest, rpcError(nil, -32700, "parse error", nil))
	}
	if r.Verdict == Gated {
		// The judge gates only a tools/call sent alone.
		return d.file(ctx, r, name, msgs[0])
	}
	if strings.Contains(r.Accept, "text/event-stream") && hasRequest(msgs) {
		return d.stream(ctx, r, name, spec, msgs)
	}
	var out []json.RawMessage
	failed := ""
	for _, m := range msgs {
		resp, err := d.one(ctx, r.Subject, name, spec, m, nil)
		if err != nil && failed == "" {
			failed = err.Error()
		}
		if resp != nil {
			out = append(out, resp)
		}
	}
	var reply *Reply
	switch {
	case len(out) == 0:
		reply = &Reply{Status: http.StatusAccepted}
	case !batch:
		reply = &Reply{Status: http.StatusOK, Header: http.Header{"Content-Type": {"application/json"}}, Body: out[0]}
	default:
		b, _ := json.Marshal(out)
		reply = &Reply{Status: http.StatusOK, Header: http.Header{"Content-Type": {"application/json"}}, Body: b}
	}
	reply.Error = failed
	return reply
}

func hasRequest(msgs []message) bool {
	for _, m := range msgs {
		if m.ID != nil {
			return true
		}
	}
	return false
}

// Stream is a reply's body of server-sent events: each notification a
// call's server writes while it runs, then its response. A batch's calls
// are made one after the other, as they are without a stream.
type Stream struct {
	pr     *io.PipeReader
	cancel context.CancelFunc
	done   chan struct{}
	failed string // read after done
}

func (s *Stream) Read(b []byte) (int, error) { return s.pr.Read(b) }

// End stops the stream and the call under way with it (the server is
// told it is cancelled), waits for its writer, and says what failed.
func (s *Stream) End() string {
	s.pr.Close()
	s.cancel()
	<-s.done
	return s.failed
}

// event frames one JSON-RPC message as a server-sent event. A message
// is one line of JSON (the door's encoder writes no line break, and a
// server's stdout is read line by line), so one data line holds it.
func event(msg []byte) []byte {
	return append(append([]byte("event: message\ndata: "), msg...), "\n\n"...)
}

// stream answers msgs with a stream: the call goes on while the client
// reads, and what the server says of it reaches the client as it comes.
func (d *Door) stream(ctx context.Context, r *Request, name string, spec *config.MCPServer, msgs []message) *Reply {
	pr, pw := io.Pipe()
	ctx, cancel := context.WithCancel(ctx)
	s := &Stream{pr: pr, cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(s.done)
		defer pw.Close()
		for _, m := range msgs {
			notes := make(chan []byte, NoteBuffer)
			var mu sync.Mutex
			open := true
			sink := func(b []byte) {
				mu.Lock()
				defer mu.Unlock()
				if !open {
					return
				}
				select {
				case notes <- b:
				default:
					// The client reads slower than the server writes:
					// the notification is lost, never the response.
				}
			}
			type answer struct {
				resp json.RawMessage
				err  error
			}
			ans := make(chan answer, 1)
			go func() {
				resp, err := d.one(ctx, r.Subject, name, spec, m, sink)
				mu.Lock()
				open = false
				mu.Unlock()
				ans <- answer{resp, err}
			}()
			var a answer
		wait:
			for {
				select {
				case n := <-notes:
					pw.Write(event(n))
				case a = <-ans:
					break wait
				}
			}
			for len(notes) > 0 {
				pw.Write(event(<-notes))
			}
			if a.err != nil && s.failed == "" {
				s.failed = a.err.Error()
			}
			if a.resp != nil {
				pw.Write(event(a.resp))
			}
		}
	}()
	return &Reply{Status: http.StatusOK, Header: http.Header{"Content-Type": {"text/event-stream"}, "Cache-Control": {"no-cache"}}, Stream: s}
}

// one bridges one message; the response is nil for a notification.
// sink, when set, takes the server's notifications during a call.
func (d *Door) one(ctx context.Context, subject, name string, spec *config.MCPServer, m message, sink func([]byte)) (json.RawMessage, error) {
	switch {
	case m.Method == "initialize":
		var p struct {
			ProtocolVersion string `json:"protocolVersion"`
		}
		json.Unmarshal(m.Params, &p)
		init, secrets, err := d.M.initialized(ctx, name, subject, spec, p.ProtocolVersion)
		if err != nil {
			return serverError(m.ID, err), err
		}
		b, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": m.ID, "result": init})
		return Redact(b, secrets), nil
	case m.ID == nil && m.Method == "notifications/initialized":
		// The door initialized the process itself.
		return nil, nil
	case m.ID == nil && m.Method == "notifications/cancelled":
		var p struct {
			RequestID json.RawMessage `json:"requestId"`
			Reason    string          `json:"reason"`
		}
		if json.Unmarshal(m.Params, &p) == nil && p.RequestID != nil {
			d.M.cancelled(name, subject, spec, string(p.RequestID), p.Reason)
		}
		return nil, nil
	case m.ID == nil:
		return nil, d.M.notify(name, subject, spec, m.Method, m.Params)
	}
	resp, secrets, err := d.M.call(ctx, name, subject, spec, m.Method, m.Params, string(m.ID), sink)
	if err != nil {
		return serverError(m.ID, err), err
	}
	var obj map[string]json.RawMessage
	if err := json.Unmarshal(resp, &obj); err != nil {
		return serverError(m.ID, err), err
	}
	obj["id"] = m.ID
	b, err := json.Marshal(obj)
	if err != nil {
		return serverError(m.ID, err), err
	}
	return Redact(b, secrets), nil
}

func serverError(id json.RawMessage, err error) json.RawMessage {
	msg := "MCP server failed: " + err.Error()
	if errors.Is(err, ErrExited) {
		msg = "MCP server exited during the call; it is restarted for the next one"
	}
	b, _ := json.Marshal(rpcError(id, CodeServer, msg, nil))
	return b
}

// file makes a gated call the proposal it is and answers at once: the
// box is never held open for an approval.
func (d *Door) file(ctx context.Context, r *Request, name string, m message) *Reply {
	var p struct {
		Name      string          `json:"name"`
		Arguments json.RawMessage `json:"arguments"`
	}
	if err := json.Unmarshal(m.Params, &p); err != nil || m.ID == nil {
		return jsonReply(http.StatusBadRequest, rpcError(m.ID, -32602, "a gated tools/call needs an id and params", nil))
	}
	if string(p.Arguments) == "null" {
		p.Arguments = nil
	}
	payload, err := json.Marshal(Payload{Server: name, Tool: p.Name, Arguments: p.Arguments})
	if err != nil {
		return jsonReply(http.StatusOK, rpcError(m.ID, -32602, "the call's arguments are not JSON", nil))
	}
	env, _ := json.Marshal(map[string]any{"intent": config.MCPIntentPrefix + name, "payload": json.RawMessage(payload),
		"rationale": "MCP tool call " + p.Name + " on " + name + ", gated by rule " + r.Rule})
	if d.Propose == nil {
		reply := jsonReply(http.StatusServiceUnavailable, rpcError(m.ID, CodeServer, "the gated call could not be filed", nil))
		reply.Error = "the door has no proposer: gated calls cannot be filed"
		return reply
	}
	pr := d.Propose(ctx, r, env)
	var reply *Reply
	switch pr.Verdict {
	case "gated":
		reply = jsonReply(http.StatusOK, rpcError(m.ID, CodePending, "pending approval "+pr.Gate+": the result reaches your mailbox once it is approved and made",
			map[string]any{"gate_id": pr.Gate, "status": "pending"}))
	case "auto-approved":
		reply = jsonReply(http.StatusOK, rpcError(m.ID, CodePending, "approved "+pr.Gate+" ("+pr.Reason+"): the result reaches your mailbox once it is made",
			map[string]any{"gate_id": pr.Gate, "status": "approved"}))
	case "duplicate":
		reply = jsonReply(http.StatusOK, rpcError(m.ID, CodePending, "not filed again: "+pr.Reason,
			map[string]any{"gate_id": pr.Gate, "status": "duplicate", "duplicate": true}))
	default:
		reply = jsonReply(http.StatusOK, rpcError(m.ID, CodeDenied, "refused by impgw: "+pr.Reason, map[string]any{"refusal": pr.Refusal}))
		reply.Error = "gated call refused (" + pr.Refusal + ")"
	}
	if pr.Err != nil {
		reply.Error = "recording the proposal: " + pr.Err.Error()
	}
	return reply
}
