package executor

import (
	"errors"

	"github.com/impyard/impyard/lib/approval"
	"github.com/impyard/impyard/lib/config"
	"github.com/impyard/impyard/lib/earn"
	"github.com/impyard/impyard/lib/gate"
	"github.com/impyard/impyard/lib/intent"
)

// trustPromote is the built-in executor of trust-promote gates: no
// [executors] entry configures it, and none may.
var trustPromote = &config.Executor{Kind: config.TrustPromote}

// mcpCall is the built-in executor of the gates the MCP door files, one
// intent mcp.<name> per [mcp.<name>]. A tool call may act on the world,
// so it is not idempotent: one stopped midway is never made again.
var mcpCall = config.MCPExecutor

// executorFor is the executor of intent: the configured one, or for
// trust-promote and mcp.<name> the built-in one.
func executorFor(org *config.Org, in string) *config.Executor {
	if in == intent.TrustPromote {
		return trustPromote
	}
	if _, s := org.MCPServerFor(in); s != nil {
		return mcpCall
	}
	return org.Executors[in]
}

// promote appends the earned entry of an approved trust-promote gate to
// the imp's imp.toml, once earn.Append has derived it again from the
// gates it names and their approvals, checked with the keys in
// IMPYARD_HOME/keys/.
func (r *Runner) promote(g *gate.Gate, org *config.Org, payload []byte) (*Result, error) {
	kr, err := approval.LoadKeyring(r.Home)
	if err != nil {
		return nil, &outcome{err: err}
	}
	detail, err := earn.Append(r.Yard, org, kr, g, payload)
	if err != nil {
		return nil, &outcome{err: err}
	}
	return &Result{Kind: config.TrustPromote, Detail: detail}, nil
}

// earned files the trust-promote gate that the execution of g may have
// made due ([[earn]] in org.toml); a failure is logged, never the gate's.
func (r *Runner) earned(org *config.Org, g *gate.Gate) {
	p, err := earn.Propose(r.Yard, org, g.Imp, g.Intent)
	if err != nil {
		r.logf("gate %s: %v", g.ID, err)
	}
	if p != nil {
		r.logf("gate %s: %s has earned trust for %s: trust-promote gate %s filed", g.ID, g.Imp, g.Intent, p.ID)
	}
}

// earnedAll proposes every promotion due, catching one that a stop
// between an execution and its filing left behind. A promotion that
// cannot be made narrow was logged after the execution that made it due;
// it is not logged again at every rescan.
func (r *Runner) earnedAll(org *config.Org) {
	filed, errs := earn.ProposeAll(r.Yard, org)
	for _, err := range errs {
		if !errors.Is(err, earn.ErrNoNarrowEntry) {
			r.logf("%v", err)
		}
	}
	for _, p := range filed {
		r.logf("%s has earned trust: trust-promote gate %s filed", p.Imp, p.ID)
	}
}
