// Package mcpcall is the owner's channel through which impexec has the
// running gateway make an approved MCP call: a unix socket impgw serve
// keeps at IMPYARD_HOME/sock/impgw, its directory 0700 and the socket
// 0600, so only IMPYARD_HOME's owner reaches it. IMPYARD_HOME is never
// mounted into a box nor written by a writer of the yard, and the socket
// is served by no listener a box can reach.
//
// What it guarantees:
//   - The gateway makes a call only for a gate that is executing with an
//     approval that verifies, with the keys in IMPYARD_HOME/keys/, over
//     its frozen payload, and only exactly that payload's call (server,
//     tool, arguments) of the server its intent names, for an imp its
//     entry allows. Anything else is refused, nothing sent.
//   - The call is made by the gateway's own server manager, so a boxed
//     server has its network, its requests judged and recorded as
//     mcp:<name>.
//   - With no gateway answering, Up says so (health.ErrGatewayDown,
//     temporary) before impexec commits to anything.
package mcpcall

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"time"

	"github.com/impyard/impyard/lib/approval"
	"github.com/impyard/impyard/lib/config"
	"github.com/impyard/impyard/lib/gate"
	"github.com/impyard/impyard/lib/health"
	"github.com/impyard/impyard/lib/home"
	"github.com/impyard/impyard/lib/mcpserv"
	"github.com/impyard/impyard/lib/state"
	"github.com/impyard/impyard/lib/yard"
)

// ErrRefused is the gateway's refusal of a call it was asked to make:
// the gate is not executing, its approval does not verify, or its
// payload is not a call its intent's server allows. Nothing was sent.
var ErrRefused = errors.New("refused by the gateway")

// callPath is the one request the socket serves besides /v1/health.
const callPath = "/v1/mcp/call"

// request asks for the call of one gate; the gateway reads everything
// else from the gate itself.
type request struct {
	Gate string `json:"gate"`
}

// reply is the gateway's answer: the call's result, or why there is
// none, and whether the call reached the server.
type reply struct {
	Result  json.RawMessage `json:"result,omitempty"`
	Sent    bool            `json:"sent"`
	Refused bool            `json:"refused,omitempty"`
	Error   string          `json:"error,omitempty"`
}

// Listen makes the socket, replacing one a gateway that was killed left:
// the caller holds the yard's gateway presence, so no live gateway
// serves it.
func Listen(homeDir string) (net.Listener, error) {
	h := home.Dir(homeDir)
	if err := h.Private(h.Sockets()); err != nil {
		return nil, err
	}
	p := h.GatewaySocket()
	if fi, err := os.Lstat(p); err == nil && fi.Mode().Type() == os.ModeSocket {
		os.Remove(p)
	}
	ln, err := net.Listen("unix", p)
	if err != nil {
		return nil, fmt.Errorf("the gateway's socket for impexec: %w", err)
	}
	if err := os.Chmod(p, 0o600); err != nil {
		ln.Close()
		return nil, fmt.Errorf("%s: %w", p, err)
	}
	return ln, nil
}

// Handler serves the socket for the gateway: y's gates, verified with
// homeDir's keys, called with m as org says.
type Handler struct {
	Yard *yard.Yard
	Home string
	Org  func() (*config.Org, error)
	M    *mcpserv.Manager
	Logf func(format string, a ...any)
}

// Timeout bounds an approved MCP call, start of the server included.
const Timeout = 2 * time.Minute

func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path == "/v1/health" {
		w.WriteHeader(http.StatusOK)
		return
	}
	if r.URL.Path != callPath || r.Method != http.MethodPost {
		http.NotFound(w, r)
		return
	}
	var q request
	if err := json.NewDecoder(io.LimitReader(r.Body, 4096)).Decode(&q); err != nil {
		answer(w, http.StatusBadRequest, reply{Refused: true, Error: fmt.Sprintf("request: %v", err)})
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), Timeout)
	defer cancel()
	name, spec, p, err := h.approved(q.Gate)
	if err != nil {
		h.logf("error: refused the call of gate %s asked on the socket: %v", q.Gate, err)
		answer(w, http.StatusForbidden, reply{Refused: true, Error: err.Error()})
		return
	}
	res, sent, err := h.M.Call(ctx, name, p.imp, spec, p.Tool, p.Arguments)
	if err != nil {
		answer(w, http.StatusBadGateway, reply{Sent: sent, Error: err.Error()})
		return
	}
	answer(w, http.StatusOK, reply{Result: res, Sent: true})
}

func answer(w http.ResponseWriter, status int, v reply) {
	b, _ := json.Marshal(v)
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	w.Write(b)
}

func (h *Handler) logf(format string, a ...any) {
	if h.Logf != nil {
		h.Logf(format, a...)
	}
}

type call struct {
	mcpserv.Payload
	imp string
}

// approved reads gate id and checks it is executing with an approval
// that verifies over its frozen payload, an MCP call its intent's server
// allows its imp to make.
func (h *Handler) approved(id string) (string, *config.MCPServer, *call, error) {
	g, err := gate.Get(h.Yard, id)
	if err != nil {
		return "", nil, nil, err
	}
	if g.State != state.Executing {
		return "", nil, nil, fmt.Errorf("gate %s is %s, not executing", g.ID, g.State)
	}
	kr, err := approval.LoadKeyring(h.Home)
	if err != nil {
		return "", nil, nil, err
	}
	if _, err := g.VerifyApproval(kr); err != nil {
		return "", nil, nil, fmt.Errorf("gate %s: %w", g.ID, err)
	}
	payload, err := g.Frozen()
	if err != nil {
		return "", nil, nil, err
	}
	var p mcpserv.Payload
	dec := json.NewDecoder(bytes.NewReader(payload))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&p); err != nil {
		return "", nil, nil, fmt.Errorf("gate %s: MCP payload: %w", g.ID, err)
	}
	org, err := h.Org()
	if err != nil {
		return "", nil, nil, err
	}
	name, spec := org.MCPServerFor(g.Intent)
	switch {
	case spec == nil:
		return "", nil, nil, fmt.Errorf("gate %s: org.toml has no [mcp.%s]", g.ID, name)
	case p.Server != name:
		return "", nil, nil, fmt.Errorf("gate %s: payload names server %q, its intent %s", g.ID, p.Server, g.Intent)
	case !spec.Allows(g.Imp):
		return "", nil, nil, fmt.Errorf("gate %s: imp %s may not call [mcp.%s]", g.ID, g.Imp, name)
	}
	return name, spec, &call{Payload: p, imp: g.Imp}, nil
}

// client reaches the socket of homeDir's gateway.
func client(homeDir string, timeout time.Duration) *http.Client {
	p := home.Dir(homeDir).GatewaySocket()
	return &http.Client{Timeout: timeout, Transport: &http.Transport{
		Proxy: nil,
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", p)
		},
	}}
}

// Up checks that homeDir's gateway answers on its socket; the error
// wraps health.ErrGatewayDown.
func Up(homeDir string) error {
	c := client(homeDir, 2*time.Second)
	defer c.CloseIdleConnections()
	resp, err := c.Get("http://impgw/v1/health")
	if err == nil {
		resp.Body.Close()
		if resp.StatusCode == http.StatusOK {
			return nil
		}
		err = fmt.Errorf("status %s", resp.Status)
	}
	return fmt.Errorf("%w: impgw does not answer on %s (is impgw serve running?): %w", health.ErrGatewayDown, home.Dir(homeDir).GatewaySocket(), err)
}

// Call asks homeDir's gateway to make the call of gate id, executing.
// sent reports whether the call may have reached the server: false when
// the gateway could not be reached or refused (ErrRefused).
func Call(ctx context.Context, homeDir, id string) (result json.RawMessage, sent bool, err error) {
	c := client(homeDir, Timeout+10*time.Second)
	defer c.CloseIdleConnections()
	body, _ := json.Marshal(request{Gate: id})
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, "http://impgw"+callPath, bytes.NewReader(body))
	if err != nil {
		return nil, false, err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := c.Do(req)
	if err != nil {
		// Whether the request was written before the connection failed
		// is unknown once it was dialled: the call may have been made.
		var op *net.OpError
		if errors.As(err, &op) && op.Op == "dial" {
			return nil, false, fmt.Errorf("%w: %w", health.ErrGatewayDown, err)
		}
		return nil, true, err
	}
	defer resp.Body.Close()
	var rep reply
	if err := json.NewDecoder(io.LimitReader(resp.Body, 8<<20)).Decode(&rep); err != nil {
		return nil, true, fmt.Errorf("the gateway's answer (%s): %w", resp.Status, err)
	}
	switch {
	case rep.Refused:
		return nil, false, fmt.Errorf("%w: %s", ErrRefused, rep.Error)
	case rep.Error != "":
		return nil, rep.Sent, errors.New(rep.Error)
	}
	return rep.Result, true, nil
}
