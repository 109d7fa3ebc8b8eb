package executor

import (
	"github.com/impyard/impyard/lib/config"
	"github.com/impyard/impyard/lib/gate"
	"github.com/impyard/impyard/lib/grant"
)

// grant applies an approved egress rule to the gateway policy. A grant
// that expires counts from its signed approval, so a resumed execution
// computes the very rule the first attempt wrote.
func (r *Runner) grant(g *gate.Gate, payload []byte) (*Result, error) {
	gr := grant.Grant{Imp: g.Imp, Task: g.Task, Approved: r.now()}
	if g.Approval != nil && !g.Approval.At.IsZero() {
		gr.Approved = g.Approval.At
	}
	detail, err := grant.Apply(r.Yard, gr, payload)
	if err != nil {
		return nil, &outcome{err: err}
	}
	return &Result{Kind: config.EgressGrant, Detail: detail}, nil
}

// sweepGrants removes granted rules whose time has passed from the
// policy; the gateway stopped applying them already.
func (r *Runner) sweepGrants() {
	detail, err := grant.Sweep(r.Yard, r.now())
	switch {
	case err != nil:
		r.logf("sweeping expired grants: %v", err)
	case detail != "":
		r.logf("%s", detail)
	}
}
