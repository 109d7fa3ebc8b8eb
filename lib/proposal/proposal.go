// Package proposal decides what becomes of an action a box proposes, and
// records the decision. It owns the whole verdict on a proposal: the
// envelope's shape, the configuration, the intent's name, its executor, the payload's
// fields, the proactive budget and the trust ladder, checked in that
// order, and the gate it files when the verdict is to gate or to
// auto-approve.
//
// A Decision is a value whose zero value is a refusal: every path that
// does not end in a filed gate refuses, with a fixed kind and a reason.
// Every proposal a Decider sees leaves exactly one record line
// (RecordSchema) in the audit log, refused or not, so a trust-ladder deny,
// an unknown intent or a proposal over budget is on record like a gate;
// refusals also enter the imp's journal, without their reason, which may
// name host files a box is not to learn. Refusals of one run are recorded
// up to a cap (RefusalsPerRun), then once more as a proposal-quota event,
// then answered without a record, so a box cannot grow the logs without
// bound by being refused. What the HTTP answer to a decision is belongs to
// lib/control.
package proposal

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/impyard/impyard/lib/approval"
	"github.com/impyard/impyard/lib/config"
	"github.com/impyard/impyard/lib/gate"
	"github.com/impyard/impyard/lib/grant"
	"github.com/impyard/impyard/lib/intent"
	"github.com/impyard/impyard/lib/ledger"
	"github.com/impyard/impyard/lib/memory"
	"github.com/impyard/impyard/lib/pause"
	"github.com/impyard/impyard/lib/queue"
	"github.com/impyard/impyard/lib/state"
	"github.com/impyard/impyard/lib/strictjson"
	"github.com/impyard/impyard/lib/trust"
	"github.com/impyard/impyard/lib/yard"
)

// MaxEnvelope bounds an envelope's bytes.
const MaxEnvelope = 1 << 20

// Verdict is what becomes of a proposal. The zero value refuses.
type Verdict int

const (
	Refused      Verdict = iota // nothing is filed
	Gated                       // a gate is filed for a human
	AutoApproved                // a gate is filed approved by a trust entry
	Duplicate                   // nothing is filed: Gate is the identical proposal's gate (see the executor's dedupe)
)

func (v Verdict) String() string {
	switch v {
	case Gated:
		return "gated"
	case AutoApproved:
		return "auto-approved"
	case Duplicate:
		return "duplicate"
	}
	return "refused"
}

// Refusal says why a proposal was refused. The zero value names no reason
// and is still a refusal.
type Refusal int

const (
	Unexplained    Refusal = iota // the zero Decision
	BadEnvelope                   // unreadable, not the envelope's JSON, no intent or no payload
	TooLarge                      // the envelope is over MaxEnvelope
	NotOwn                        // run_id or task_id is not the token's
	ConfigBroken                  // org.toml or the imp's imp.toml does not load
	UnknownIntent                 // the intent names no policy rule and no executor
	PayloadRefused                // the payload is not what its intent declares
	OverBudget                    // proactive work over its daily budget
	TrustDeny                     // a trust entry at level deny
	NotFiled                      // the gate could not be filed
	Failed                        // the decision could not be made (the yard could not be read)
	NoExecutor                    // the intent has no executor configured, so a gate could never be executed
	GateCap                       // the run has filed its gates_per_run gates or gate_bytes_per_run payload bytes
	Paused                        // the imp or the yard is paused (lib/pause): nothing is filed, no trust applies
)

var refusalNames = [...]string{
	Unexplained:    "unexplained",
	BadEnvelope:    "bad-envelope",
	TooLarge:       "too-large",
	NotOwn:         "not-own",
	ConfigBroken:   "config-broken",
	UnknownIntent:  "unknown-intent",
	PayloadRefused: "payload-refused",
	OverBudget:     "over-budget",
	TrustDeny:      "trust-deny",
	NotFiled:       "not-filed",
	Failed:         "failed",
	NoExecutor:     "no-executor",
	GateCap:        "gate-cap",
	Paused:         "paused",
}

func (r Refusal) String() string {
	if r >= 0 && int(r) < len(refusalNames) {
		return refusalNames[r]
	}
	return refusalNames[Unexplained]
}

// Decision is the verdict on one proposal.
type Decision struct {
	Verdict Verdict
	Refusal Refusal // why, when Verdict is Refused
	// Reason is told to the box: the refusal, or the trust ladder's word
	// on a gated or auto-approved proposal.
	Reason string
	Entry  string     // the trust entry that decided, "" when none did
	Gate   *gate.Gate // the gate filed, nil when refused
	// Wait is how long an auto-approved proposal waits for its execution
	// ([gateway] wait).
	Wait time.Duration
}

// Envelope is what a box proposes.
type Envelope struct {
	Intent    string          `json:"intent"`
	Payload   json.RawMessage `json:"payload"`
	Rationale string          `json:"rationale"`
	RunID     string          `json:"run_id"`
	TaskID    string          `json:"task_id"`
}

// Proposal is one proposal as it reaches the gateway: who sent it, known
// from its token, never from the body, and the body.
type Proposal struct {
	Imp, Run, Task string
	Body           io.Reader
	// Rules are the names of the policy rules in force: an intent must
	// name one, or be intent.EgressGrant.
	Rules []string
	// Signer signs an auto-approval; without it an auto-approval is not
	// filed.
	Signer *approval.Key
	Now    time.Time
	// Org reads org.toml; nil is config.LoadOrg. A daemon passes its
	// config.Keeper, so an org.toml refused as unsafe leaves the last
	// good one in force.
	Org func() (*config.Org, error)
}

func refuse(kind Refusal, format string, a ...any) Decision {
	return Decision{Refusal: kind, Reason: fmt.Sprintf(format, a...)}
}

// Decide decides p and files its gate when the verdict is not a refusal;
// env is the envelope as far as it was read. It records nothing and
// counts nothing: a Decider records, and holds each run to its gate caps.
func Decide(y *yard.Yard, p Proposal) (d Decision, env Envelope) {
	return decide(y, p, nil)
}

// takeGate takes a gate of size payload bytes from the run's caps b
// before it is filed, or says why not; undo gives it back when the gate
// was not filed after all.
type takeGate func(p Proposal, b config.Budget, size int) (undo func(), why string)

// decide is Decide, with take, when set, asked for each gate before it
// is filed.
func decide(y *yard.Yard, p Proposal, take takeGate) (d Decision, env Envelope) {
	body, err := io.ReadAll(io.LimitReader(p.Body, MaxEnvelope+1))
	if err != nil {
		return refuse(BadEnvelope, "reading the body: %v", err), env
	}
	if len(body) > MaxEnvelope {
		return refuse(TooLarge, "body over the %d byte limit", MaxEnvelope), env
	}
	if err := strictjson.Unmarshal(body, &env); err != nil {
		return refuse(BadEnvelope, "envelope: %v (the imp comes from the token; the envelope holds intent, payload, rationale, run_id, task_id)", err), Envelope{}
	}
	switch {
	case env.Intent == "":
		return refuse(BadEnvelope, "envelope has no intent"), env
	case len(env.Payload) == 0:
		return refuse(BadEnvelope, "envelope has no payload"), env
	case env.RunID != "" && env.RunID != p.Run:
		return refuse(NotOwn, "run_id %q is not this token's run", env.RunID), env
	case env.TaskID != "" && env.TaskID != p.Task:
		return refuse(NotOwn, "task_id %q is not this token's task", env.TaskID), env
	}
	// Before anything else is read: a pause refuses every proposal, so
	// no trust entry approves one and no gate waits to surprise the owner.
	if ps, _ := pause.Load(y); ps.Of(p.Imp) != nil {
		return refuse(Paused, "%s", ps.Why(p.Imp)), env
	}
	loadOrg := p.Org
	if loadOrg == nil {
		loadOrg = func() (*config.Org, error) { return config.LoadOrg(y) }
	}
	org, err := loadOrg()
	if err == nil {
		err = org.CheckIntents(p.Rules, intent.EgressGrant)
	}
	if err != nil {
		return refuse(ConfigBroken, "every action is denied while the configuration does not load: %v", err), env
	}
	if env.Intent == intent.TrustPromote {
		return refuse(UnknownIntent, "intent %q is filed only by impyard itself, when the owner's approvals have earned it; an imp cannot propose it", env.Intent), env
	}
	if !org.Intent(env.Intent, p.Rules, intent.EgressGrant) {
		return refuse(UnknownIntent, "intent %q names no rule in the gateway policy and no trusted-side executor", env.Intent), env
	}
	exe, err := org.Executor(env.Intent)
	if err != nil {
		return refuse(NoExecutor, "%v", err), env
	}
	payload := []byte(env.Payload)
	if err := trust.Admit(org, env.Intent, payload); err != nil {
		return refuse(PayloadRefused, "%v", err), env
	}
	if env.Intent == intent.EgressGrant {
		if payload, err = grant.Rule(p.Imp, p.Task, payload); err != nil {
			return refuse(PayloadRefused, "%v", err), env
		}
	}
	if exe.Kind == config.Memory {
		if err := memory.Check(y, p.Imp, payload); err != nil {
			return refuse(PayloadRefused, "%v", err), env
		}
	}
	impCfg, err := config.LoadImp(y, p.Imp)
	if err != nil && !errors.Is(err, config.ErrNoImpConfig) {
		return refuse(ConfigBroken, "every action of %s is denied while its configuration does not load: %v", p.Imp, err), env
	}
	proactive := false
	if p.Task != "" {
		if t, err := queue.Get(y, p.Task); err == nil {
			proactive = t.Proactive
		}
	}
	if err := ledger.Check(y, org, p.Imp, proactive, p.Now); err != nil {
		if errors.Is(err, ledger.ErrOverBudget) {
			return refuse(OverBudget, "%v; proposals of proactive tasks wait for tomorrow or the owner", err), env
		}
		return refuse(Failed, "%v", err), env
	}
	t := trust.Decide(org, impCfg, p.Imp, env.Intent, payload)
	if t.Level == config.Deny {
		d = refuse(TrustDeny, "intent %q is refused for %s by %s", env.Intent, p.Imp, t.Entry)
		d.Entry = t.Entry
		return d, env
	}
	undo := func() {}
	if take != nil {
		var why string
		if undo, why = take(p, org.Bounds(p.Imp), len(payload)); why != "" {
			d = refuse(GateCap, "%s; the owner may raise gates_per_run or gate_bytes_per_run in [budget.%s]", why, p.Imp)
			d.Entry = t.Entry
			return d, env
		}
	}
	fo := gate.FileOptions{Imp: p.Imp, Intent: env.Intent, Payload: payload, Rationale: env.Rationale,
		Task: p.Task, Run: p.Run, By: p.Imp, Actor: "impgw", Dedupe: exe.DedupeWindow(),
		Trust: &gate.Trust{Level: config.Gate, Entry: t.Entry, Why: t.Why, Rule: t.Rule}}
	if t.Level == config.Auto {
		fo.Approved, fo.By, fo.Signer, fo.Rate = true, "trust: "+t.Entry, p.Signer, t.Rate
		fo.Trust.Level = config.Auto
	}
	g, dup, err := gate.Submit(y, fo)
	if err != nil {
		undo()
		d = refuse(NotFiled, "%v", err)
		d.Entry = t.Entry
		return d, env
	}
	verdict, why := Gated, t.Why
	switch {
	case dup:
		// Nothing was filed, so nothing counts against the run's caps.
		undo()
		verdict, why = Duplicate, fmt.Sprintf("an identical %s proposal of %s is gate %s (%s)", env.Intent, p.Imp, g.ID, g.State)
	case g.State != state.Filed:
		verdict = AutoApproved
	case g.Trust != nil:
		why = g.Trust.Why
	}
	return Decision{Verdict: verdict, Reason: why, Entry: t.Entry, Gate: g, Wait: org.Gateway.Wait.Duration}, env
}
