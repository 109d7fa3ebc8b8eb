// Package desk says what the approval desk shows about a gate before
// anyone decides it: where its payload will go, the trust verdict it was
// filed under, whether its payload still matches its sha256, whether its
// approval (if any) verifies, and the exact command that approves what
// was shown. It reads; it never moves a gate.
package desk

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/impyard/impyard/lib/approval"
	"github.com/impyard/impyard/lib/config"
	"github.com/impyard/impyard/lib/executor"
	"github.com/impyard/impyard/lib/gate"
	"github.com/impyard/impyard/lib/grant"
	"github.com/impyard/impyard/lib/intent"
	"github.com/impyard/impyard/lib/pause"
	"github.com/impyard/impyard/lib/state"
	"github.com/impyard/impyard/lib/yard"
)

// Report is a gate and what the desk found about it. Its JSON is the
// gate file's fields and these.
type Report struct {
	*gate.Gate

	// PayloadMatches says whether the payload's canonical bytes still
	// hash to its sha256; PayloadError says why not.
	PayloadMatches bool   `json:"payload_matches"`
	PayloadError   string `json:"payload_error,omitempty"`

	// Destination is where the payload would go if executed now;
	// DestinationError why that cannot be said.
	Destination      *executor.Destination `json:"destination,omitempty"`
	DestinationError string                `json:"destination_error,omitempty"`

	// Waiting, for an approved or executing gate that impexec cannot take
	// up as org.toml stands, says so and why: the gate is not failed for
	// it, and executes once the owner fixes the configuration.
	Waiting string `json:"waiting,omitempty"`

	// Verdict is the trust verdict the gate was filed under, in words.
	Verdict string `json:"trust_verdict"`

	// Verifies is set once the gate has an approval to check.
	Verifies *bool  `json:"approval_verifies,omitempty"`
	Key      string `json:"approval_key,omitempty"`
	Error    string `json:"approval_error,omitempty"`

	// Promotion is what a trust-promote gate proposes.
	Promotion *Promotion `json:"promotion,omitempty"`

	// Approve is the command that approves exactly this payload; only
	// for a pending gate whose payload matches and whose deadline is
	// ahead.
	Approve string `json:"approve_command,omitempty"`

	// Times is its age and, with a deadline, the time it has left.
	Times
	// Grant, for an egress-grant gate, is how long its rule holds and for
	// whom: "permanent", or its scope and expiry.
	Grant string `json:"grant,omitempty"`
}

// Inspect reports on g in yard y, checking an approval against the
// public keys in home (IMPYARD_HOME).
func Inspect(y *yard.Yard, home string, g *gate.Gate) *Report {
	r := &Report{Gate: g, Verdict: Verdict(g)}
	if _, err := g.Frozen(); err != nil {
		r.PayloadError = err.Error()
	} else {
		r.PayloadMatches = true
	}
	org, err := config.LoadOrg(y)
	loaded := err == nil
	r.Times = Timing(g, org, state.Now())
	if loaded {
		r.Destination, err = executor.Where(y, org, g)
	}
	if err != nil {
		r.DestinationError = err.Error()
		if (g.State == state.Approved || g.State == state.Executing) && (!loaded || errors.Is(err, config.ErrNoExecutor)) {
			r.Waiting = "impexec leaves it " + g.State + ", nothing sent: " + err.Error()
		}
	}
	if g.State == state.Approved && r.Waiting == "" {
		// A pause file that does not read holds the whole yard, as it
		// does for impexec: Load says why in the state it returns.
		ps, _ := pause.Load(y)
		if why := ps.Why(g.Imp); why != "" {
			r.Waiting = "impexec holds it, approved, nothing sent: " + why
		}
	}
	r.verify(home)
	if g.Intent == intent.TrustPromote {
		r.Promotion = promotion(y, home, g)
	}
	if g.Intent == intent.EgressGrant && r.PayloadMatches {
		var approved time.Time
		if g.Approval != nil {
			approved = g.Approval.At
		}
		r.Grant = grant.Describe(g.Payload, g.Task, approved)
	}
	if g.State == state.Filed && r.Left != nil && *r.Left <= 0 {
		r.Waiting = "past its deadline " + r.Times.Deadline.Format(time.RFC3339) + ", undecided: impexec marks it expired, and an approval is refused"
	} else if g.State == state.Filed && r.PayloadMatches {
		r.Approve = g.ApproveCommand()
	}
	return r
}

// Verdict says which trust entry applied or why g waits for a human, from
// what was recorded at filing; for a gate filed before that was recorded,
// from its timeline, or that it is not known.
func Verdict(g *gate.Gate) string {
	if g.Trust != nil {
		return g.Trust.String()
	}
	for _, h := range g.History {
		if h.To == state.Approved {
			if entry, ok := strings.CutPrefix(h.By, "trust: "); ok {
				return "auto-approved by " + entry + " (its reason was not recorded)"
			}
		}
	}
	return "not recorded (filed before gates recorded their trust verdict)"
}

func (r *Report) verify(home string) {
	g := r.Gate
	approved := false
	for _, h := range g.History {
		approved = approved || h.To == state.Approved
	}
	if !approved && g.Approval == nil {
		return
	}
	ok := false
	r.Verifies = &ok
	kr, err := approval.LoadKeyring(home)
	if err != nil {
		r.Error = err.Error()
		return
	}
	key, err := g.VerifyApproval(kr)
	switch {
	case errors.Is(err, approval.ErrUnsigned) && g.State == state.Approved:
		r.Error = err.Error() + fmt.Sprintf(" (approved before approvals were signed or covered the whole gate, or written into the yard by hand); 'impgate approve %s' signs it", g.ID)
	case err != nil:
		r.Error = err.Error()
	default:
		ok = true
		r.Key = key.Name + " " + key.Fingerprint
	}
}
