package executor

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/impyard/impyard/lib/config"
	"github.com/impyard/impyard/lib/gate"
	"github.com/impyard/impyard/lib/mailbox"
	"github.com/impyard/impyard/lib/mcpcall"
	"github.com/impyard/impyard/lib/mcpserv"
)

// callMCP has the running gateway make an approved MCP tool call (a
// gate the gateway's door filed) on the owner's socket (lib/mcpcall): the
// gateway checks the gate again and makes exactly its frozen call with
// its own server, which so has its network, judged as mcp:<name>. The
// result, its secrets redacted, is left in the imp's mailbox, where its
// next turn reads it.
func (r *Runner) callMCP(ctx context.Context, g *gate.Gate) (*Result, error) {
	var p mcpserv.Payload
	if err := json.Unmarshal(g.Payload, &p); err != nil {
		return nil, &outcome{err: fmt.Errorf("gate %s: MCP payload: %w", g.ID, err)}
	}
	res, sent, err := mcpcall.Call(ctx, r.Home, g.ID)
	if err != nil {
		return nil, &outcome{err: fmt.Errorf("gate %s: %w", g.ID, err), sent: sent}
	}
	text := fmt.Sprintf("Result of MCP call %s on %s (gate %s):\n%s", p.Tool, p.Server, g.ID, res)
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
