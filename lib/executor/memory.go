package executor

import (
	"github.com/impyard/impyard/lib/config"
	"github.com/impyard/impyard/lib/gate"
	"github.com/impyard/impyard/lib/memory"
	"github.com/impyard/impyard/lib/store"
)

// remember keeps an approved entry in the imp's memory.md, with the gate
// as its provenance. It finds an entry of its gate already there, so it
// is idempotent.
func (r *Runner) remember(g *gate.Gate, payload []byte) (*Result, error) {
	_, detail, err := memory.Apply(r.Yard, g.Imp, g.ID, payload, store.Now())
	if err != nil {
		return nil, &outcome{err: err}
	}
	return &Result{Kind: config.Memory, Detail: detail}, nil
}
