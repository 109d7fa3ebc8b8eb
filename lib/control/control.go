// Package control is the gateway's control API: the only door through
// which a box acts on the trusted side. Every request is authenticated by
// a bearer token that names the subject (an imp, with its run and task);
// what the request body claims about who is asking is never believed.
//
//	POST /v1/actions      propose an action: an envelope {intent, payload,
//	                      rationale, run_id, task_id}; the trust ladder
//	                      decides: gate it (202 pending), execute it now
//	                      (200 done, or 202 if slower than the wait), or
//	                      refuse it (403); proactive work over budget: 429
//	GET  /v1/gates        the caller's own imp's gates (?state=)
//	GET  /v1/gates/<id>   one of them, with its full timeline
//	GET  /v1/queue        the caller's own imp's tasks, read-only
//	POST /v1/journal      append a note to the caller's own journal (429
//	                      beyond the run's quota of notes)
//	GET  /v1/mailbox      the owner's messages left for the caller's imp
//	                      since its run's brief, marked delivered to the
//	                      run: what a box polls at its turn boundaries
//	                      (?again=1: also what its run was given before)
//
// An imp never sees another imp's gates or tasks: a gate of another imp
// answers 404 as if it did not exist.
//
// What becomes of a proposal, and its record, is lib/proposal's decision;
// this package only answers it over HTTP.
package control

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/impyard/impyard/lib/approval"
	"github.com/impyard/impyard/lib/config"
	"github.com/impyard/impyard/lib/event"
	"github.com/impyard/impyard/lib/gate"
	"github.com/impyard/impyard/lib/http1"
	"github.com/impyard/impyard/lib/id"
	"github.com/impyard/impyard/lib/judge"
	"github.com/impyard/impyard/lib/ledger"
	"github.com/impyard/impyard/lib/mailbox"
	"github.com/impyard/impyard/lib/proposal"
	"github.com/impyard/impyard/lib/queue"
	"github.com/impyard/impyard/lib/run"
	"github.com/impyard/impyard/lib/state"
	"github.com/impyard/impyard/lib/store"
	"github.com/impyard/impyard/lib/strictjson"
	"github.com/impyard/impyard/lib/token"
	"github.com/impyard/impyard/lib/yard"
)

// Limits on what a box may send.
const (
	MaxEnvelope = proposal.MaxEnvelope
	MaxNote     = 16 << 10
)

// API serves the control endpoints of one yard.
type API struct {
	Yard *yard.Yard
	Home string
	// Policy returns the policy in force for a request (gateway.PolicyOf
	// under impgw serve), to check that an intent names a rule.
	Policy func(ctx context.Context) *judge.Policy
	// Poll is how often an auto-approved action's gate is re-read while
	// waiting for its execution.
	Poll time.Duration
	// RunOf names the run whose box sent the request, when the listener
	// it came on belongs to one box; that box may only use its run's token.
	RunOf func(r *http.Request) (runID string, ok bool)
	// Signer is the gateway's key, which signs trust auto-approvals;
	// without it an auto-approval is refused.
	Signer *approval.Key
	// Org reads org.toml for proposals (see proposal.Proposal.Org); nil
	// is config.LoadOrg.
	Org func() (*config.Org, error)

	notes   noteQuota
	decider proposal.Decider
}

// org reads org.toml through Org, as proposals do, so that every quota
// of the control API acts on the configuration the gateway keeps.
func (a *API) org() (*config.Org, error) {
	if a.Org != nil {
		return a.Org()
	}
	return config.LoadOrg(a.Yard)
}

// Envelope is what a box proposes.
type Envelope = proposal.Envelope

type apiError struct {
	status int
	msg    string
	retry  string // Retry-After, when the refusal passes at a known time
}

func (e *apiError) Error() string { return e.msg }

func fail(status int, format string, a ...any) error {
	return &apiError{status: status, msg: fmt.Sprintf(format, a...)}
}

func (a *API) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	status, body, retry := a.serve(r)
	if retry != "" {
		w.Header().Set("Retry-After", retry)
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	b, _ := json.Marshal(body)
	w.Write(append(b, '\n'))
}

func (a *API) serve(r *http.Request) (status int, body any, retry string) {
	sub, err := a.authenticate(r)
	if err == nil {
		var out any
		out, err = a.route(r, sub)
		if err == nil {
			if res, ok := out.(*actionResult); ok {
				return res.status, res, ""
			}
			return http.StatusOK, out, ""
		}
	}
	var ae *apiError
	if errors.As(err, &ae) {
		return ae.status, map[string]string{"error": ae.msg}, ae.retry
	}
	return http.StatusInternalServerError, map[string]string{"error": err.Error()}, ""
}

func (a *API) authenticate(r *http.Request) (*token.Subject, error) {
	h := r.Header.Get("Authorization")
	tok, ok := strings.CutPrefix(h, "Bearer ")
	if !ok || tok == "" {
		return nil, fail(http.StatusUnauthorized, "no token: send Authorization: Bearer TOKEN")
	}
	sub, err := token.Lookup(a.Home, strings.TrimSpace(tok))
	if errors.Is(err, token.ErrUnknown) {
		return nil, fail(http.StatusUnauthorized, "unknown or revoked token")
	}
	if err != nil {
		return nil, err
	}
	if sub.Imp() == "" {
		return nil, fail(http.StatusForbidden, "the org subject has no control API: it acts through gates it executes")
	}
	if a.RunOf != nil {
		if runID, ok := a.RunOf(r); ok && sub.Run != runID {
			return nil, fail(http.StatusForbidden, "the token is not this box's: run %s may only use its own", runID)
		}
	}
	return sub, nil
}

func (a *API) route(r *http.Request, sub *token.Subject) (any, error) {
	switch p := r.URL.Path; {
	case p == "/v1/actions":
		if r.Method != http.MethodPost {
			return nil, fail(http.StatusMethodNotAllowed, "use POST")
		}
		return a.action(r, sub)
	case p == "/v1/gates":
		if r.Method != http.MethodGet {
			return nil, fail(http.StatusMethodNotAllowed, "use GET")
		}
		return a.gates(r, sub)
	case strings.HasPrefix(p, "/v1/gates/"):
		if r.Method != http.MethodGet {
			return nil, fail(http.StatusMethodNotAllowed, "use GET")
		}
		return a.oneGate(strings.TrimPrefix(p, "/v1/gates/"), sub)
	case p == "/v1/queue":
		if r.Method != http.MethodGet {
			return nil, fail(http.StatusMethodNotAllowed, "use GET")
		}
		tasks, _ := queue.List(a.Yard, queue.Filter{Imp: sub.Imp(), State: r.URL.Query().Get("state")})
		if tasks == nil {
			tasks = []*queue.Task{}
		}
		return map[string]any{"tasks": tasks}, nil
	case p == "/v1/journal":
		if r.Method != http.MethodPost {
			return nil, fail(http.StatusMethodNotAllowed, "use POST")
		}
		return a.note(r, sub)
	case p == "/v1/mailbox":
		if r.Method != http.MethodGet {
			return nil, fail(http.StatusMethodNotAllowed, "use GET")
		}
		again, err := queryBool(r, "again")
		if err != nil {
			return nil, err
		}
		return a.mailbox(sub, again)
	}
	return nil, fail(http.StatusNotFound, "no such endpoint")
}

// queryBool reads a yes-or-no query parameter: absent is no.
func queryBool(r *http.Request, name string) (bool, error) {
	v := r.URL.Query().Get(name)
	if v == "" {
		return false, nil
	}
	b, err := strconv.ParseBool(v)
	if err != nil {
		return false, fail(http.StatusBadRequest, "%s=%q: want 1 or 0, true or false", name, v)
	}
	return b, nil
}

func readBody(r *http.Request, limit int64) ([]byte, error) {
	b, err := io.ReadAll(io.LimitReader(r.Body, limit+1))
	if err != nil {
		return nil, fail(http.StatusBadRequest, "reading the body: %v", err)
	}
	if int64(len(b)) > limit {
		return nil, fail(http.StatusRequestEntityTooLarge, "body over the %d byte limit", limit)
	}
	return b, nil
}

func (a *API) gates(r *http.Request, sub *token.Subject) (any, error) {
	want := r.URL.Query().Get("state")
	if want != "" && !state.GateMachine.Known(want) {
		return nil, fail(http.StatusBadRequest, "unknown gate state %q", want)
	}
	all, _ := gate.List(a.Yard, gate.Filter{All: true, Imp: sub.Imp()})
	out := []*gate.Gate{}
	for _, g := range all {
		if want == "" || g.State == want {
			out = append(out, g)
		}
	}
	return map[string]any{"gates": out}, nil
}

func (a *API) oneGate(gateID string, sub *token.Subject) (any, error) {
	if id.Check(id.Gate, gateID) != nil {
		return nil, fail(http.StatusNotFound, "no such gate")
	}
	g, err := gate.Get(a.Yard, gateID)
	if err != nil || g.Imp != sub.Imp() {
		return nil, fail(http.StatusNotFound, "no such gate")
	}
	return g, nil
}

func (a *API) note(r *http.Request, sub *token.Subject) (any, error) {
	b, err := readBody(r, MaxNote)
	if err != nil {
		return nil, err
	}
	var n struct {
		Note string `json:"note"`
	}
	if err := strictjson.Unmarshal(b, &n); err != nil {
		return nil, fail(http.StatusBadRequest, "journal note: %v", err)
	}
	if strings.TrimSpace(n.Note) == "" {
		return nil, fail(http.StatusBadRequest, "journal note is empty")
	}
	undo, err := a.admitNote(sub, len(n.Note))
	if err != nil {
		return nil, err
	}
	err = event.Record(a.Yard, event.Event{Event: "note", Imp: sub.Imp(), Actor: "box", By: sub.Imp(), Task: sub.Task, Why: n.Note})
	if err != nil {
		undo()
		return nil, err
	}
	return map[string]string{"status": "noted"}, nil
}

// mailbox hands the caller's run the messages left for its imp that no
// run has had yet, but for those its brief carries, and marks them
// delivered to it. Messages are delivered to a run, so a token without
// one, or of a run that ended, has no mailbox.
func (a *API) mailbox(sub *token.Subject, again bool) (any, error) {
	if sub.Run == "" {
		return nil, fail(http.StatusForbidden, "this token names no run: messages are delivered to a run's box (its brief, or GET /v1/mailbox while it runs)")
	}
	r, err := run.Read(a.Yard, sub.Run)
	if store.IsNotExist(err) {
		return nil, fail(http.StatusForbidden, "run %s has no record: messages are delivered to a running box", sub.Run)
	}
	if err != nil {
		// A record that cannot be read is the yard's trouble, not the
		// caller's fault.
		return nil, err
	}
	if r.Imp != sub.Imp() {
		return nil, fail(http.StatusForbidden, "run %s is not imp %s's", sub.Run, sub.Imp())
	}
	if !r.Live() {
		return nil, fail(http.StatusConflict, "run %s is %s: messages are delivered to a running box", sub.Run, r.State)
	}
	briefed, err := run.BriefMessages(a.Yard, sub.Run)
	if err != nil {
		return nil, err
	}
	msgs, err := mailbox.Take(a.Yard, sub.Imp(), sub.Run, briefed, again)
	if err != nil {
		return nil, err
	}
	return map[string]any{"messages": msgs}, nil
}

type actionResult struct {
	status int
	Status string          `json:"status"`
	GateID string          `json:"gate_id,omitempty"`
	Result json.RawMessage `json:"result,omitempty"`
	Reason string          `json:"reason,omitempty"`
	// Duplicate says GateID is an identical proposal's gate, not a new
	// one (the executor's dedupe).
	Duplicate bool `json:"duplicate,omitempty"`
}

func (a *API) action(r *http.Request, sub *token.Subject) (any, error) {
	// One reading of the ledger's clock decides the budget and, when it
	// refuses, the midnight it names: read twice, a refusal just before
	// midnight would name the one after next.
	now := ledger.Now()
	d, err := a.Propose(r.Context(), proposal.Proposal{Imp: sub.Imp(), Run: sub.Run, Task: sub.Task, Body: r.Body, Now: now})
	if err != nil {
		return nil, fmt.Errorf("recording the proposal: %w", err)
	}
	switch d.Verdict {
	case proposal.Gated:
		return &actionResult{status: http.StatusAccepted, Status: "pending", GateID: d.Gate.ID, Reason: d.Reason}, nil
	case proposal.AutoApproved:
		return a.await(r, d.Gate.ID, d.Wait)
	case proposal.Duplicate:
		// Always 202: the box's proposal was not acted on now, and what
		// became of the earlier one is the gate's to say.
		return &actionResult{status: http.StatusAccepted, Status: dupStatus(d.Gate), GateID: d.Gate.ID, Reason: d.Reason, Duplicate: true}, nil
	}
	err = fail(refusalStatus[d.Refusal], "%s", d.Reason)
	if d.Refusal == proposal.OverBudget {
		// Budgets start afresh at the next UTC midnight.
		_, next := ledger.Day(now)
		err.(*apiError).retry = http1.RetryAfter(next, now)
	}
	return nil, err
}

// Propose decides p with the rules in force for ctx (see Policy), the
// API's signer and org.toml: what a box proposes here, and what the
// gateway proposes for it (the MCP door's gated calls), so that one
// Decider counts both against the run's caps and records both.
func (a *API) Propose(ctx context.Context, p proposal.Proposal) (proposal.Decision, error) {
	p.Rules, p.Signer, p.Org = a.ruleNames(ctx), a.Signer, a.Org
	if p.Now.IsZero() {
		p.Now = ledger.Now()
	}
	return a.decider.Decide(a.Yard, p)
}

// dupStatus is the status a duplicate answers with: "pending" while its
// gate waits, as for a gate just filed, else the gate's state.
func dupStatus(g *gate.Gate) string {
	if g.State == state.Filed {
		return "pending"
	}
	return g.State
}

// refusalStatus answers each kind of refused proposal; a kind not listed
// (the zero Decision's) is a plain 403.
var refusalStatus = map[proposal.Refusal]int{
	proposal.Unexplained:    http.StatusForbidden,
	proposal.BadEnvelope:    http.StatusBadRequest,
	proposal.TooLarge:       http.StatusRequestEntityTooLarge,
	proposal.NotOwn:         http.StatusForbidden,
	proposal.ConfigBroken:   http.StatusForbidden,
	proposal.UnknownIntent:  http.StatusForbidden,
	proposal.PayloadRefused: http.StatusBadRequest,
	proposal.OverBudget:     http.StatusTooManyRequests,
	proposal.TrustDeny:      http.StatusForbidden,
	proposal.NotFiled:       http.StatusBadRequest,
	proposal.Failed:         http.StatusInternalServerError,
	proposal.NoExecutor:     http.StatusBadRequest,
	proposal.GateCap:        http.StatusTooManyRequests,
	proposal.Paused:         http.StatusForbidden,
}

// await waits a bounded time for an auto-approved gate's execution; the
// box is never held longer than that.
func (a *API) await(r *http.Request, gateID string, wait time.Duration) (any, error) {
	poll := a.Poll
	if poll == 0 {
		poll = 20 * time.Millisecond
	}
	deadline := time.Now().Add(wait)
	for {
		g, err := gate.Get(a.Yard, gateID)
		if err != nil {
			return nil, err
		}
		switch g.State {
		case state.Executed:
			return &actionResult{status: http.StatusOK, Status: "done", GateID: g.ID, Result: g.Result}, nil
		case state.Failed:
			return &actionResult{status: http.StatusOK, Status: "failed", GateID: g.ID, Result: g.Result,
				Reason: g.History[len(g.History)-1].Why}, nil
		}
		if time.Now().After(deadline) {
			return &actionResult{status: http.StatusAccepted, Status: "pending", GateID: g.ID}, nil
		}
		select {
		case <-r.Context().Done():
			return &actionResult{status: http.StatusAccepted, Status: "pending", GateID: g.ID}, nil
		case <-time.After(poll):
		}
	}
}

func (a *API) ruleNames(ctx context.Context) []string {
	if a.Policy == nil {
		return nil
	}
	var names []string
	for _, rl := range a.Policy(ctx).Rules() {
		names = append(names, rl.Name)
	}
	return names
}
