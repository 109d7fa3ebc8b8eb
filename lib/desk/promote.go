package desk

import (
	"encoding/json"
	"time"

	"github.com/impyard/impyard/lib/approval"
	"github.com/impyard/impyard/lib/config"
	"github.com/impyard/impyard/lib/earn"
	"github.com/impyard/impyard/lib/gate"
	"github.com/impyard/impyard/lib/state"
	"github.com/impyard/impyard/lib/yard"
)

// Promotion is what a trust-promote gate proposes: the entry, as the
// TOML its approval appends, and the gates it rests on.
type Promotion struct {
	Entry *earn.Entry `json:"entry,omitempty"`
	TOML  string      `json:"toml,omitempty"`
	Gates []Rest      `json:"gates,omitempty"`
	// Wide is where the entry lets through more than the gates it rests
	// on held (earn.Entry.Wide).
	Wide []string `json:"wide,omitempty"`
	// NotDerived says why the entry is not the one the owner's approvals
	// derive (earn.Check): impexec will refuse to append it.
	NotDerived string `json:"not_derived,omitempty"`
	Error      string `json:"error,omitempty"`
}

// Rest is one gate a promotion rests on, as the owner decided it.
type Rest struct {
	ID      string          `json:"id"`
	State   string          `json:"state"`
	By      string          `json:"approved_by,omitempty"`
	At      time.Time       `json:"approved_at,omitzero"`
	Payload json.RawMessage `json:"payload,omitempty"`
	Error   string          `json:"error,omitempty"`
}

// promotion reads what g, a trust-promote gate, proposes, and checks it
// against what the approvals it rests on derive, as impexec will, with
// the public keys in home.
func promotion(y *yard.Yard, home string, g *gate.Gate) *Promotion {
	e, err := earn.Parse(g.Payload)
	if err != nil {
		return &Promotion{Error: err.Error()}
	}
	p := &Promotion{Entry: e, TOML: e.TOML(""), Wide: e.Wide()}
	org, err := config.LoadOrg(y)
	var kr *approval.Keyring
	if err == nil {
		kr, err = approval.LoadKeyring(home)
	}
	if err == nil {
		err = earn.Check(y, org, kr, g, g.Payload)
	}
	if err != nil {
		p.NotDerived = err.Error()
	}
	for _, gid := range e.Gates {
		rest := Rest{ID: gid}
		rg, err := gate.Get(y, gid)
		if err != nil {
			rest.Error = err.Error()
			p.Gates = append(p.Gates, rest)
			continue
		}
		rest.State = rg.State
		if frozen, err := rg.Frozen(); err == nil {
			rest.Payload = frozen
		} else {
			rest.Error = err.Error()
		}
		for _, h := range rg.History {
			if h.To == state.Approved {
				rest.By, rest.At = h.By, h.At
			}
		}
		p.Gates = append(p.Gates, rest)
	}
	return p
}
