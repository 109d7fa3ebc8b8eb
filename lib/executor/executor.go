// Package executor performs approved gates: the trusted side's hands.
//
// Guarantees:
//   - Only an approved gate is executed, only its frozen payload, and only
//     after its canonical bytes are checked against the sha256 the human
//     approved. A mismatch fails the gate and sends nothing.
//   - Only an approval signed by a key in IMPYARD_HOME/keys/ over the
//     gate's id, imp, intent, task, run, filing, sha256, trust verdict,
//     decider and time (approval.Subject) is executed (or resumed); any
//     other fails the gate with "approval signature does not verify",
//     except that an approval with no signature at all, one of the older
//     schema impyard.approval/1, or one signed by a key not in keys/ (made
//     with another IMPYARD_HOME), is refused and left as it is, for the
//     owner to approve again. The keys it verifies with are recorded in
//     the yard for approvers (lib/signers). An
//     approved gate already taken to executing once (a marker in
//     IMPYARD_HOME/executed/) is a replayed approval and fails unsent.
//   - A gate executes at most once to completion. The approved -> executing
//     move happens under the gates lock, so one executor wins; a per-gate
//     lock held for the whole execution tells a live executor from a dead one.
//   - Nothing is sent before the gate's move to executing is recorded in
//     the journal and the audit log and its began mark, the replay marker,
//     is written whole and synced.
//   - An executing gate without a whole began mark was never begun (its
//     move's record or its mark could not be written, or a crash came
//     between them): it is begun, once. With one, the executor may have
//     acted: an idempotent executor resumes (HTTP with the same
//     Idempotency-Key, the gate id); one that is not goes to failed with
//     "outcome unknown" and is never retried without a new approval.
//   - A gate whose intent has no executor configured is left as it is,
//     approved (or executing), nothing sent, until org.toml names one:
//     only the executor itself refusing the action fails the gate.
//   - Transient failures of idempotent executors are retried with backoff,
//     a bounded number of times.
//   - Every step is a gate transition, so it lands in the gate's timeline,
//     the imp's journal and the audit log; executed costs go to the ledger.
package executor

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/impyard/impyard/lib/approval"
	"github.com/impyard/impyard/lib/config"
	"github.com/impyard/impyard/lib/crash"
	"github.com/impyard/impyard/lib/gate"
	"github.com/impyard/impyard/lib/health"
	"github.com/impyard/impyard/lib/ledger"
	"github.com/impyard/impyard/lib/pause"
	"github.com/impyard/impyard/lib/signers"
	"github.com/impyard/impyard/lib/state"
	"github.com/impyard/impyard/lib/store"
	"github.com/impyard/impyard/lib/temporary"
	"github.com/impyard/impyard/lib/transition"
	"github.com/impyard/impyard/lib/yard"
)

// Actor is how executors sign their transitions.
const Actor = "impexec"

// ErrBusy means another live executor holds the gate.
var ErrBusy = temporary.New("another executor is working on this gate")

// ErrGatewayDown means impgw does not answer, so an HTTP action is not
// begun: the gate stays as it was, to be executed once impgw is back.
var ErrGatewayDown = health.ErrGatewayDown

// ErrPaused means the gate's imp (or the yard) is paused: the gate is held,
// approved, nothing sent, until 'impsup resume'.
var ErrPaused = temporary.New("held by a pause")

// Runner executes gates of one yard.
type Runner struct {
	Yard *yard.Yard
	Home string // IMPYARD_HOME: the org token, the CA, secrets
	// Backoff is the first retry delay; it doubles each time.
	Backoff time.Duration
	// Logf reports what happened, one line per event; may be nil.
	Logf func(format string, a ...any)
	// Ready, if set, is called once by Run after its first scan of the
	// gates: from then on it watches them and has taken up every gate
	// waiting at start.
	Ready func()
	// Now is the clock expiring grants are swept by; nil is time.Now.
	Now func() time.Time

	orgs config.Keeper

	// warned is the UTC day each imp's budget warning was last written.
	warnedMu sync.Mutex
	warned   map[string]string
}

func (r *Runner) now() time.Time {
	if r.Now != nil {
		return r.Now()
	}
	return time.Now()
}

// Org is org.toml as this runner acts on it: re-read each time, and when
// a writer of the yard could have written it (config.ErrUnsafe), the last
// good one it read, the refusal logged once per change. With no good one
// yet, the refusal is the error: impexec run starts on nothing else.
func (r *Runner) Org() (*config.Org, error) { return r.orgs.Load(r.Yard, r.logf) }

// Result is what an executor reports back; it is kept in the gate.
type Result struct {
	Kind     string `json:"kind"`
	Status   int    `json:"status,omitempty"`
	Body     string `json:"body,omitempty"`
	Attempts int    `json:"attempts,omitempty"`
	Detail   string `json:"detail,omitempty"`
}

// outcome is a failed attempt: sent says whether the action may have taken
// effect, transient whether trying again can help.
type outcome struct {
	err       error
	sent      bool
	transient bool
}

func (o *outcome) Error() string { return o.err.Error() }

func (r *Runner) logf(format string, a ...any) {
	if r.Logf != nil {
		r.Logf(format, a...)
	}
}

// Execute takes a gate as far as it can go now: an approved gate is
// executed, an executing gate left by a dead executor is resumed or failed,
// a decided or finished gate is left alone. It returns the gate as it ends.
func (r *Runner) Execute(ctx context.Context, gateID string) (*gate.Gate, error) {
	g, err := gate.Get(r.Yard, gateID)
	if err != nil {
		return nil, err
	}
	// Whatever the gate, so that 'impexec once' of any gate brings the
	// record up to date, for the approval that may follow.
	r.recordSigners()
	if g.State != state.Approved && g.State != state.Executing {
		if g.State == state.Filed {
			return g, fmt.Errorf("gate %s is filed, not approved", gateID)
		}
		// Finished: only make sure a crash did not keep its last step out
		// of the journal and the audit log.
		return g, gate.Repair(r.Yard)
	}
	lockPath, err := gate.ExecLock(r.Yard, gateID)
	if err != nil {
		return nil, err
	}
	unlock, ok, err := store.TryLock(lockPath)
	if err != nil {
		return nil, err
	}
	if !ok {
		return g, ErrBusy
	}
	defer unlock()
	// Re-read under the execution lock: another executor may have finished
	// it between our first look and the lock.
	if g, err = gate.Get(r.Yard, gateID); err != nil {
		return nil, err
	}
	org, err := r.Org()
	if err != nil {
		// Fail closed without deciding anything: the gate waits, approved,
		// until the owner fixes the configuration.
		return g, fmt.Errorf("gate %s not executed: %w", gateID, err)
	}
	if g.State != state.Approved && g.State != state.Executing {
		return g, nil
	}
	if g, err = r.verify(g); err != nil || g.State == state.Failed {
		return g, err
	}
	exe := executorFor(org, g.Intent)
	began := false
	if g.State == state.Executing {
		if began, err = r.began(gateID); err != nil {
			return g, fmt.Errorf("gate %s not taken up, nothing sent: %w", gateID, err)
		}
	}
	if exe == nil {
		// The owner can add the executor: nothing is decided, the gate
		// waits as it is. Even one that began waits, since whether it may
		// be resumed depends on the executor.
		_, err := org.Executor(g.Intent)
		return g, fmt.Errorf("gate %s waits, %s, nothing sent: %w", gateID, g.State, err)
	}
	switch {
	case g.State == state.Approved:
		if why := late(g, org); why != "" {
			return r.fail(g, why+"; nothing was sent")
		}
		// The owner who pressed stop expects nothing more to go out: the
		// gate keeps its approval and is executed after resume.
		if ps, _ := pause.Load(r.Yard); ps.Of(g.Imp) != nil {
			return g, fmt.Errorf("gate %s not executed, nothing sent: %s: %w", gateID, ps.Why(g.Imp), ErrPaused)
		}
		if err := r.gatewayUp(org, exe); err != nil {
			return g, fmt.Errorf("gate %s not executed: %w", gateID, err)
		}
		// Verified again under the gates lock, over the very file moved.
		moved, err := gate.Move(r.Yard, gateID, gate.Change{To: state.Executing, By: Actor, Actor: Actor, Why: "executor " + exe.Kind,
			Edit: func(g *gate.Gate) error { return r.verifyOnly(g) }})
		if errors.Is(err, transition.ErrUnrecorded) {
			// Nothing is sent before its record is written; without a
			// began mark the next pass begins it once it is.
			return moved, fmt.Errorf("gate %s not executed, nothing sent: %w", gateID, err)
		}
		if err != nil {
			return moved, err
		}
		g = moved
		if err := r.markStarted(gateID); err != nil {
			return g, fmt.Errorf("gate %s not executed, nothing sent: %w", gateID, err)
		}
		crash.Point("after-mark-executing")
	case !began:
		// Taken to executing by an executor that stopped before its began
		// mark: nothing was sent, so it is begun now, once the record of
		// its move to executing is written.
		if err := gate.Repair(r.Yard); err != nil {
			return g, fmt.Errorf("gate %s not executed, nothing sent: %w", gateID, err)
		}
		if err := r.gatewayUp(org, exe); err != nil {
			return g, fmt.Errorf("gate %s not executed: %w", gateID, err)
		}
		r.logf("gate %s: beginning an execution that stopped before anything was sent", gateID)
		if err := r.markStarted(gateID); err != nil {
			return g, fmt.Errorf("gate %s not executed, nothing sent: %w", gateID, err)
		}
		crash.Point("after-mark-executing")
	case !idempotent(exe):
		return r.fail(g, "outcome unknown: an executor stopped while this gate was executing and its executor is not idempotent; not retried without a new approval")
	default:
		if err := r.gatewayUp(org, exe); err != nil {
			return g, fmt.Errorf("gate %s not resumed: %w", gateID, err)
		}
		r.logf("gate %s: resuming an interrupted execution (idempotent)", gateID)
	}
	payload, err := g.Frozen()
	if err != nil {
		return r.fail(g, err.Error()+"; nothing was sent")
	}
	res, err := r.perform(ctx, g, org, exe, payload)
	crash.Point("after-send")
	if err != nil {
		var o *outcome
		msg := err.Error()
		if errors.As(err, &o) && o.sent && !idempotent(exe) {
			msg = "outcome unknown: " + msg
		}
		return r.fail(g, msg)
	}
	if exe.Cost > 0 {
		if err := ledger.Debit(r.Yard, ledger.Entry{Imp: g.Imp, Kind: ledger.Action, Intent: g.Intent, Gate: g.ID, Task: g.Task, Cost: exe.Cost}); err != nil {
			return g, err
		}
	}
	crash.Point("before-mark-executed")
	body, err := json.Marshal(res)
	if err != nil {
		return g, err
	}
	g, err = gate.Move(r.Yard, gateID, gate.Change{To: state.Executed, By: Actor, Actor: Actor, Why: summary(res),
		Edit: func(g *gate.Gate) error { g.Result = body; return nil }})
	if err == nil {
		r.logf("gate %s: executed (%s)", gateID, summary(res))
		r.earned(org, g)
	}
	return g, err
}

// verify checks the approval of an approved or executing gate against the
// public keys in IMPYARD_HOME/keys/ and fails a gate whose approval does
// not verify. A gate with no signature at all is left approved and
// refused: it may have been approved before approvals were signed, and the
// owner can approve it again. Without any key to verify with, nothing is
// decided either: the gate waits for the right IMPYARD_HOME. An approved
// gate that was already taken to executing is a replay, and fails.
func (r *Runner) verify(g *gate.Gate) (*gate.Gate, error) {
	err := r.verifyOnly(g)
	if err == nil && g.State == state.Approved {
		err = r.replayed(g.ID)
	}
	switch {
	case err == nil:
		return g, nil
	case errors.Is(err, approval.ErrNoKeys), errors.Is(err, ErrUnknownKey):
		return g, fmt.Errorf("gate %s not executed: %w", g.ID, err)
	case errors.Is(err, approval.ErrUnsigned) && g.State == state.Approved:
		return g, fmt.Errorf("gate %s not executed: %w (approved before approvals were signed or covered the whole gate, or written into the yard by hand); check it with 'impgate show %s' and approve it again with 'impgate approve %s'",
			g.ID, err, g.ID, g.ID)
	case g.State == state.Executing:
		return r.fail(g, err.Error()+"; not resumed")
	}
	return r.fail(g, err.Error()+"; nothing was sent")
}

// ErrUnknownKey is an approval signed by a key that is not in
// IMPYARD_HOME/keys/, made perhaps with another IMPYARD_HOME: the owner
// can approve again with a key that is, so the gate waits as it is.
var ErrUnknownKey = errors.New("approval signed by a key this executor does not trust")

func (r *Runner) verifyOnly(g *gate.Gate) error {
	kr, err := approval.LoadKeyring(r.Home)
	if err != nil {
		return err
	}
	_, err = g.VerifyApproval(kr)
	if errors.Is(err, approval.ErrInvalid) && !errors.Is(err, approval.ErrUnsigned) && !slices.ContainsFunc(kr.Keys, func(k *approval.Trusted) bool { return k.Fingerprint == g.Approval.Key }) {
		return fmt.Errorf("%w: gate %s was signed by key %q, which is not in %s; nothing was sent, and 'impgate approve %s' with the IMPYARD_HOME impexec uses approves it again",
			ErrUnknownKey, g.ID, g.Approval.Key, kr.Dir, g.ID)
	}
	return err
}

// recordSigners records the keys this executor verifies approvals with
// in the yard, for approvers to check theirs against before they sign
// (lib/signers); a failure is logged, never the gate's.
func (r *Runner) recordSigners() {
	kr, err := approval.LoadKeyring(r.Home)
	if err == nil {
		err = signers.Record(r.Yard, kr, Actor)
	}
	if err != nil && !errors.Is(err, approval.ErrNoKeys) {
		r.logf("recording the keys approvals are verified with: %v", err)
	}
}

func (r *Runner) fail(g *gate.Gate, why string) (*gate.Gate, error) {
	r.logf("gate %s: failed: %s", g.ID, why)
	res, _ := json.Marshal(Result{Kind: "failure", Detail: why})
	out, err := gate.Move(r.Yard, g.ID, gate.Change{To: state.Failed, By: Actor, Actor: Actor, Why: why,
		Edit: func(g *gate.Gate) error { g.Result = res; return nil }})
	if err != nil {
		return g, err
	}
	return out, nil
}

func idempotent(e *config.Executor) bool {
	// Appending to the owner's log checks for the gate first, so it is
	// idempotent whatever the configuration says, unless it also runs a
	// command, which may not be.
	return e.Idempotent || (e.Kind == config.MessageUser && len(e.Command) == 0) || e.Kind == config.EgressGrant ||
		// A push checks the remote first and pushes a sha already there as
		// a no-op success.
		e.Kind == config.GitPush ||
		// memory.Apply finds an entry of its gate already written.
		e.Kind == config.Memory ||
		// An earned entry already in imp.toml is not appended again.
		e.Kind == config.TrustPromote
}

func summary(res *Result) string {
	if res.Status != 0 {
		return fmt.Sprintf("%s status %d after %d attempt(s)", res.Kind, res.Status, res.Attempts)
	}
	if res.Detail != "" {
		return res.Kind + ": " + res.Detail
	}
	return res.Kind
}

// perform runs the configured executor, retrying transient failures of an
// idempotent one with doubling backoff.
func (r *Runner) perform(ctx context.Context, g *gate.Gate, org *config.Org, exe *config.Executor, payload []byte) (*Result, error) {
	tries := 1
	if idempotent(exe) {
		tries += exe.Retries
		if exe.Retries == 0 {
			tries += 3
		}
	}
	delay := r.Backoff
	if delay == 0 {
		delay = 200 * time.Millisecond
	}
	var last error
	for attempt := 1; attempt <= tries; attempt++ {
		res, err := r.once(ctx, g, org, exe, payload)
		if err == nil {
			res.Attempts = attempt
			return res, nil
		}
		last = err
		var o *outcome
		if !errors.As(err, &o) || !o.transient || attempt == tries {
			break
		}
		r.logf("gate %s: attempt %d failed (%v); retrying in %v", g.ID, attempt, err, delay)
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(delay):
		}
		delay *= 2
	}
	return nil, last
}

func (r *Runner) once(ctx context.Context, g *gate.Gate, org *config.Org, exe *config.Executor, payload []byte) (*Result, error) {
	switch exe.Kind {
	case config.HTTP:
		return r.sendHTTP(ctx, g, org.Gateway.Listen, exe, payload)
	case config.MessageUser:
		return r.messageUser(ctx, g, exe, payload)
	case config.EgressGrant:
		return r.grant(g, payload)
	case config.GitPush:
		return r.gitPush(ctx, g, exe, payload)
	case config.Memory:
		return r.remember(g, payload)
	case config.TrustPromote:
		return r.promote(g, org, payload)
	case config.MCP:
		return r.callMCP(ctx, g)
	}
	return nil, &outcome{err: fmt.Errorf("executor kind %q is not available in this impexec", exe.Kind)}
}

func trim(s string, n int) string {
	s = strings.ToValidUTF8(s, "?")
	if len(s) > n {
		return s[:n] + "…"
	}
	return s
}
