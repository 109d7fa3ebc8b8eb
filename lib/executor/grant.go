package executor

import (
	"github.com/impyard/impyard/lib/config"
	"github.com/impyard/impyard/lib/gate"
	"github.com/impyard/impyard/lib/grant"
)

// grant applies an approved egress rule to the gateway policy.
func (r *Runner) grant(g *gate.Gate, payload []byte) (*Result, error) {
	detail, err := grant.Apply(r.Yard, g.Imp, payload)
	if err != nil {
		return nil, &outcome{err: err}
	}
	return &Result{Kind: config.EgressGrant, Detail: detail}, nil
}
