package executor

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"time"

	"github.com/impyard/impyard/lib/config"
	"github.com/impyard/impyard/lib/gate"
	"github.com/impyard/impyard/lib/mailbox"
	"github.com/impyard/impyard/lib/mcpserv"
)

// mcpTimeout bounds an approved MCP call, start of the server included.
const mcpTimeout = 2 * time.Minute

// callMCP makes an approved MCP tool call (a gate the gateway's door
// filed): it starts the server of the gate's intent on its own, with its
// secrets (a boxed one in a box with no network), makes exactly the frozen call, and leaves the result, its
// secrets redacted, in the imp's mailbox, where its next turn reads it.
func (r *Runner) callMCP(ctx context.Context, g *gate.Gate, org *config.Org, payload []byte) (*Result, error) {
	var p mcpserv.Payload
	dec := json.NewDecoder(bytes.NewReader(payload))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&p); err != nil {
		return nil, &outcome{err: fmt.Errorf("gate %s: MCP payload: %w", g.ID, err)}
	}
	name, spec := org.MCPServerFor(g.Intent)
	switch {
	case spec == nil:
		return nil, &outcome{err: fmt.Errorf("gate %s: org.toml has no [mcp.%s]", g.ID, name)}
	case p.Server != name:
		return nil, &outcome{err: fmt.Errorf("gate %s: payload names server %q, its intent %s", g.ID, p.Server, g.Intent)}
	case !spec.Allows(g.Imp):
		return nil, &outcome{err: fmt.Errorf("gate %s: imp %s may not call [mcp.%s]", g.ID, g.Imp, name)}
	}
	ctx, cancel := context.WithTimeout(ctx, mcpTimeout)
	defer cancel()
	// A boxed server's box gets no gateway here: an approved call runs
	// with no network at all.
	boxes := &mcpserv.Boxes{Address: org.Containerd.Address, Namespace: org.Containerd.Namespace, Home: r.Home, Yard: r.Yard.Root}
	defer boxes.Close()
	res, sent, err := mcpserv.CallOnce(ctx, r.Home, name, spec, boxes, p.Tool, p.Arguments, io.Discard)
	if err != nil {
		return nil, &outcome{err: fmt.Errorf("gate %s: %w", g.ID, err), sent: sent}
	}
	text := fmt.Sprintf("Result of MCP call %s on %s (gate %s):\n%s", p.Tool, name, g.ID, res)
	if len(text) > mailbox.MaxText {
		text = text[:mailbox.MaxText-len("\n[truncated]")] + "\n[truncated]"
	}
	msg, err := mailbox.Send(r.Yard, g.Imp, Actor, text)
	if err != nil {
		// The call was made: not delivering its result must not make it
		// look unmade, so the gate fails with the outcome known.
		return nil, &outcome{err: fmt.Errorf("gate %s: call made, result not delivered to mailbox/%s: %w", g.ID, g.Imp, err), sent: true}
	}
	return &Result{Kind: config.MCP, Body: trim(string(res), 4096), Detail: "result in mailbox message " + msg}, nil
}
