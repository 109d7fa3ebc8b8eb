// Package gate is the approval desk's store: gates/pending/<id>.json while a
// gate awaits a decision, gates/resolved/<id>.json once decided, both under
// the one lock of gates/ so a move between them is one transaction.
//
// A gate freezes its payload when it is filed: the payload is kept as JSON
// and its sha256 is taken over the canonical bytes (keys sorted, no
// insignificant space). Whoever later approves or executes recomputes the
// canonical bytes from the file and refuses on any mismatch, so a payload
// edited on disk after filing is never approved or sent. Of two processes
// deciding the same gate, exactly one writes a decision; with Decide the
// other finds it made and, once it checks out, succeeds without writing.
//
// Gates are filed and moved through lib/transition, which owns the
// transaction; this package supplies the two directories, the payload's
// freezing and the approval's signature. It is the only writer of gate
// files, and it signs an approval (see lib/approval) inside the
// transaction that writes it, over the gate's Subject (every field that
// decides what runs, where and for whom), the decider and the time
// written: no approval is written unsigned. VerifyApproval is what an
// executor checks before it sends.
package gate

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/impyard/impyard/lib/approval"
	"github.com/impyard/impyard/lib/config"
	"github.com/impyard/impyard/lib/event"
	"github.com/impyard/impyard/lib/id"
	"github.com/impyard/impyard/lib/notify"
	"github.com/impyard/impyard/lib/rate"
	"github.com/impyard/impyard/lib/state"
	"github.com/impyard/impyard/lib/store"
	"github.com/impyard/impyard/lib/strictjson"
	"github.com/impyard/impyard/lib/transition"
	"github.com/impyard/impyard/lib/yard"
)

// Kind and major of a gate file.
const (
	Kind  = "gate"
	Major = 1
)

// MaxPayload bounds a gate's payload.
const MaxPayload = 1 << 20

const (
	pending  = "pending"
	resolved = "resolved"
)

// Gate is one proposed irreversible action and its whole lifecycle.
type Gate struct {
	Schema    string             `json:"schema"`
	ID        string             `json:"id"`
	Imp       string             `json:"imp"`
	Intent    string             `json:"intent"`
	Task      string             `json:"task,omitempty"`
	Run       string             `json:"run,omitempty"`
	Rationale string             `json:"rationale,omitempty"`
	State     string             `json:"state"`
	SHA256    string             `json:"sha256"`
	Payload   json.RawMessage    `json:"payload"`
	Result    json.RawMessage    `json:"result,omitempty"`
	Created   time.Time          `json:"created"`
	Updated   time.Time          `json:"updated"`
	History   []state.Transition `json:"history"`

	// Approval is the signed approval, once approved; see VerifyApproval.
	Approval *approval.Approval `json:"approval,omitempty"`

	// Trust is why the gate was filed as it was, recorded at filing; nil
	// on gates filed before it was recorded.
	Trust *Trust `json:"trust,omitempty"`

	// Expires, when set at filing, is the gate's deadline (see Deadline);
	// Reminded is when the owner was told it nears (see Remind).
	Expires  *time.Time `json:"expires,omitempty"`
	Reminded *time.Time `json:"reminded,omitempty"`
}

// Trust is the verdict a gate was filed under: for a proposal, the trust
// ladder's (the entry that applied, if one did, and its reason); for a
// gate filed from the trusted side, who filed it, with no entry.
type Trust struct {
	Level string `json:"level"`           // gate or auto
	Entry string `json:"entry,omitempty"` // where the trust entry that applied is
	Why   string `json:"why"`
	// Rule is the trust entry that applied, whole (see trust.Rule), so an
	// auto-approval's signature covers what the entry said, not only
	// where it was.
	Rule json.RawMessage `json:"rule,omitempty"`
	// Reason is set when the entry would have approved the gate but
	// something held it back for a human: RateReason when the entry's
	// rate was spent.
	Reason string `json:"reason,omitempty"`
}

// RateReason is a Trust's Reason on a gate its auto entry would have
// approved past the entry's rate.
const RateReason = "rate"

// Sum is the sha256 of the verdict's canonical JSON, which an approval signs; ""
// for a gate filed before verdicts were recorded.
func (t *Trust) Sum() string {
	if t == nil {
		return ""
	}
	// Canonical, so a file rewritten with its keys in another order, as
	// any JSON tool may, still verifies.
	b, err := json.Marshal(t)
	if err == nil {
		b, err = Canonical(b)
	}
	if err != nil {
		// Only a Rule that is not JSON fails to encode; no approval can
		// have been signed over it, so none verifies.
		return "unencodable: " + err.Error()
	}
	return Sum(b)
}

// String says in one line which trust entry applied or why the gate
// waits for a human.
func (t *Trust) String() string {
	switch {
	case t == nil:
		return ""
	case t.Level == "auto" && t.Entry != "" && !strings.HasPrefix(t.Why, t.Entry):
		return "auto-approved by " + t.Entry + ": " + t.Why
	case t.Level == "auto" && t.Entry != "":
		return "auto-approved by " + t.Why
	case t.Entry != "" && !strings.HasPrefix(t.Why, t.Entry):
		return "gated by " + t.Entry + ": " + t.Why
	case t.Entry != "":
		return "gated by " + t.Why
	}
	return "gated: " + t.Why
}

// Canonical returns the canonical bytes of a JSON payload: duplicate keys
// refused, object keys sorted, no insignificant whitespace, numbers kept as
// written, no HTML escaping. The same JSON value always gives the same bytes.
func Canonical(payload []byte) ([]byte, error) {
	if err := strictjson.Valid(payload); err != nil {
		return nil, fmt.Errorf("payload is not valid JSON: %w", err)
	}
	dec := json.NewDecoder(bytes.NewReader(payload))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil, fmt.Errorf("payload is not valid JSON: %w", err)
	}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return bytes.TrimSuffix(buf.Bytes(), []byte("\n")), nil
}

// Sum is the hex sha256 of b.
func Sum(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

// ErrNoSigner is an approval asked for without a key to sign it with.
var ErrNoSigner = errors.New("an approval must be signed; no signing key was given")

// Frozen returns the gate's canonical payload bytes after checking they
// still hash to the sha256 recorded at filing.
//
// The record file holds the payload indented; with its whitespace removed
// it is, unless edited, the very bytes hashed at filing, and their hash
// matching says so: then canonicalising again (a decode into a tree and
// an encode, most of the cost of checking 100,000 gates) would give the
// same bytes, and is skipped. Any other payload is canonicalised and
// checked as before.
func (g *Gate) Frozen() ([]byte, error) {
	var compact bytes.Buffer
	if json.Compact(&compact, g.Payload) == nil && Sum(compact.Bytes()) == g.SHA256 {
		return compact.Bytes(), nil
	}
	b, err := Canonical(g.Payload)
	if err != nil {
		return nil, fmt.Errorf("gate %s: %w", g.ID, err)
	}
	if Sum(b) != g.SHA256 {
		return nil, fmt.Errorf("gate %s: payload no longer matches its sha256 %s (edited after filing?)", g.ID, g.SHA256)
	}
	return b, nil
}

// Matches reports whether the payload still hashes to the sha256
// recorded at filing (see Frozen).
func (g *Gate) Matches() bool {
	_, err := g.Frozen()
	return err == nil
}

// Subject is what an approval of g signs: every field of the gate that
// decides what is executed, where and for whom (see approval.Subject).
// The rationale, the result and the timeline after filing are not in it:
// none of them chooses an executor, a target or a payload.
func (g *Gate) Subject() approval.Subject {
	s := approval.Subject{Gate: g.ID, Imp: g.Imp, Intent: g.Intent, Task: g.Task, Run: g.Run,
		Filed: g.Created, SHA256: g.SHA256, Trust: g.Trust.Sum()}
	if len(g.History) > 0 {
		s.Filer, s.Via = g.History[0].By, g.History[0].Actor
	}
	if g.Expires != nil {
		s.Expires = *g.Expires
	}
	return s
}

// VerifyApproval checks that the gate's payload still hashes to its
// sha256 and that its approval is signed by a key of kr over its Subject,
// and the decider and time of the last approval in its timeline.
// It returns the key that signed. A missing signature wraps
// approval.ErrUnsigned, any other failed check approval.ErrInvalid, except
// a payload edited after filing, reported as Frozen reports it.
func (g *Gate) VerifyApproval(kr *approval.Keyring) (*approval.Trusted, error) {
	if _, err := g.Frozen(); err != nil {
		return nil, err
	}
	if !g.Approval.Current() {
		return kr.Verify(g.Subject(), g.Approval)
	}
	var last *state.Transition
	for i := range g.History {
		if g.History[i].To == state.Approved {
			last = &g.History[i]
		}
	}
	if last == nil {
		return nil, fmt.Errorf("%w: gate %s has no approval in its timeline", approval.ErrInvalid, g.ID)
	}
	if last.By != g.Approval.By || !last.At.Equal(g.Approval.At) {
		return nil, fmt.Errorf("%w: gate %s: its timeline says approved by %q at %s, its signature by %q at %s", approval.ErrInvalid,
			g.ID, last.By, last.At.UTC().Format(time.RFC3339Nano), g.Approval.By, g.Approval.At.UTC().Format(time.RFC3339Nano))
	}
	return kr.Verify(g.Subject(), g.Approval)
}

// ShaDigits is how much of the sha256 the approve command names: enough
// that no other payload a box could make matches it.
const ShaDigits = 16

// ApproveCommand is the impgate command that approves g's payload and no
// other.
func (g *Gate) ApproveCommand() string {
	return fmt.Sprintf("impgate approve --sha %s %s", g.SHA256[:ShaDigits], g.ID)
}

// FileOptions describe a new gate.
type FileOptions struct {
	Imp       string
	Intent    string
	Payload   []byte
	Rationale string
	Task      string
	Run       string
	By        string
	Actor     string
	// Approved files the gate already approved, with By as the decider (a
	// trust rule); the executor then treats it like any human approval.
	Approved bool
	// Signer signs an Approved gate's approval (the gateway's key).
	Signer *approval.Key
	// Trust is recorded in the gate: the verdict it was filed under.
	Trust *Trust
	// Expires, when positive, is how long the gate waits for a decision
	// before it becomes expired, whatever its executor says.
	Expires time.Duration
	// ID, when set, files under that id, so a filer that retries files
	// once: the same id with the same payload returns the gate already
	// filed; with another payload it is a conflict.
	ID string
	// Dedupe, when positive, makes a gate of the same imp, intent and
	// payload sha256 that is still filed, or was decided less than
	// Dedupe ago, the answer instead of a new gate (see Submit).
	Dedupe time.Duration
	// Rate, on an Approved gate with a Trust entry, bounds that entry's
	// auto-approvals of the imp: when Rate.N gates of the imp were
	// approved by the entry (its terms, wherever it stands and whatever
	// its rate) in the Rate.Period before now, the gate is
	// filed for a human instead, its Trust's Reason RateReason. The
	// count is read from the gates themselves, under the lock that files
	// them, so neither a restart nor a concurrent filer passes it.
	Rate rate.Limit
}

// ErrConflict is an id filed again with a different payload.
var ErrConflict = errors.New("conflict")

// File freezes a payload into a new gate and returns it.
func File(y *yard.Yard, o FileOptions) (*Gate, error) {
	g, _, err := Submit(y, o)
	return g, err
}

// Submit is File that may answer with an earlier gate: with o.Dedupe,
// duplicate says g is the gate of the same imp, intent and payload that
// was pending, or decided within o.Dedupe, and nothing was filed. The
// search and the filing are one transaction under the gates' lock, so of
// identical proposals made at once exactly one is filed.
func Submit(y *yard.Yard, o FileOptions) (g *Gate, duplicate bool, err error) {
	if err := id.CheckName(o.Imp); err != nil {
		return nil, false, err
	}
	if !id.ValidIntent(o.Intent) {
		return nil, false, fmt.Errorf("invalid intent %q: use a rule name (a-z, 0-9, '.', '_', '-')", o.Intent)
	}
	if len(o.Payload) > MaxPayload {
		return nil, false, fmt.Errorf("payload is %d bytes, over the %d limit", len(o.Payload), MaxPayload)
	}
	if o.Task != "" {
		if err := id.Check(id.Task, o.Task); err != nil {
			return nil, false, err
		}
	}
	if o.Run != "" {
		if err := id.Check(id.Run, o.Run); err != nil {
			return nil, false, err
		}
	}
	if o.ID != "" {
		if err := id.Check(id.Gate, o.ID); err != nil {
			return nil, false, err
		}
	}
	if o.Approved && o.Signer == nil {
		return nil, false, ErrNoSigner
	}
	canon, err := Canonical(o.Payload)
	if err != nil {
		return nil, false, err
	}
	s, err := gates(y)
	if err != nil {
		return nil, false, err
	}
	first := state.Transition{To: state.Filed, By: o.By, Actor: o.Actor, Why: o.Rationale}
	first.Stamp(state.Now())
	now := first.At
	g = &Gate{
		Schema: store.Schema(Kind, Major), Imp: o.Imp, Intent: o.Intent, Task: o.Task, Run: o.Run,
		Rationale: o.Rationale, State: state.Filed, SHA256: Sum(canon), Payload: canon,
		Created: now, Updated: now, Trust: o.Trust,
		History: []state.Transition{first},
	}
	if o.Expires > 0 {
		d := now.Add(o.Expires)
		g.Expires = &d
	}
	g, _, err = transition.Create(s, func(tx *store.Tx) (*Gate, bool, error) {
		if o.ID != "" {
			prev, err := Get(y, o.ID)
			if err == nil {
				if prev.SHA256 != g.SHA256 || prev.Intent != g.Intent || prev.Imp != g.Imp {
					return nil, false, fmt.Errorf("gate %s: %w: already filed for %s %s with payload sha256 %s; refusing a different one (%s)", o.ID, ErrConflict, prev.Imp, prev.Intent, prev.SHA256, g.SHA256)
				}
				return prev, true, nil
			}
			if !errors.Is(err, errNoGate) {
				return nil, false, err
			}
			g.ID = o.ID
		}
		if g.ID == "" && (o.Dedupe > 0 || o.Approved && !o.Rate.IsZero() && o.Trust != nil) {
			prev, approvals, err := recent(y, o, g.SHA256, now)
			if err != nil {
				return nil, false, err
			}
			if prev != nil {
				duplicate = true
				return prev, true, nil
			}
			if o.Approved && !o.Rate.Allows(approvals) {
				o.Approved = false
				t := *o.Trust
				t.Level, t.Reason = config.Gate, RateReason
				t.Why = fmt.Sprintf("%s: rate %s: %d auto-approvals of %s in the last %s; gated for a human", t.Entry, o.Rate, approvals, o.Imp, o.Rate.Period)
				g.Trust = &t
				g.History[0].By = o.Imp
			}
		}
		if g.ID == "" {
			g.ID = s.NewID(tx, func(gateID string) []string { return []string{name(pending, gateID), name(resolved, gateID)} })
		}
		if o.Approved {
			g.Apply(state.Transition{From: state.Filed, To: state.Approved, By: o.By, Actor: o.Actor, At: now, AtMS: first.AtMS, Why: "approved by trust rule"})
			g.Approval = o.Signer.Sign(g.Subject(), o.By, now)
		}
		return g, false, nil
	}, func(tx *store.Tx, g *Gate) error {
		return tx.Check(name(pending, g.ID), name(resolved, g.ID))
	})
	if err != nil {
		return nil, false, err
	}
	return g, duplicate, nil
}

// recent reads the imp's gates for Submit: the one a new gate of sum
// would duplicate (o.Dedupe), and how many the trust entry of o
// auto-approved within o.Rate's period before now.
func recent(y *yard.Yard, o FileOptions, sum string, now time.Time) (dup *Gate, approvals int, err error) {
	since := o.Rate.Since(now)
	var entry []byte
	if o.Trust != nil {
		entry = entryTerms(o.Trust.Rule)
	}
	// A gate neither window reaches has not been written since both
	// began. File times are the system clock's, as is now outside tests;
	// the minute covers file systems' coarse times.
	back := max(o.Dedupe, o.Rate.Period)
	_, err = Each(y, Filter{All: true, Imp: o.Imp, WrittenSince: time.Now().Add(-back - time.Minute)}, func(g *Gate) error {
		if o.Dedupe > 0 && dup == nil && g.Intent == o.Intent && g.SHA256 == sum {
			if at, decided := g.Decided(); !decided || now.Sub(at) < o.Dedupe {
				dup = g
			}
		}
		if o.Approved && o.Trust != nil && g.Trust != nil && g.Trust.Level == config.Auto &&
			!g.Created.Before(since) && (sameEntry(g.Trust.Rule, entry) || entry == nil && g.Trust.Entry == o.Trust.Entry) {
			approvals++
		}
		return nil
	})
	return dup, approvals, err
}

// sameEntry says whether rule, a trust entry a gate recorded, is entry
// (see entryTerms): an entry is counted by what it lets through, not by
// where it stands, which any entry written above it changes.
func sameEntry(rule json.RawMessage, entry []byte) bool {
	terms := entryTerms(rule)
	return terms != nil && bytes.Equal(terms, entry)
}

// entryTerms is a trust entry's canonical JSON without its rate, so that
// an entry whose rate the owner changed keeps its count; nil for one
// that does not read.
func entryTerms(rule json.RawMessage) []byte {
	var m map[string]json.RawMessage
	if json.Unmarshal(rule, &m) != nil || m == nil {
		return nil
	}
	delete(m, "rate")
	b, err := json.Marshal(m)
	if err != nil {
		return nil
	}
	if b, err = Canonical(b); err != nil {
		return nil
	}
	return b
}

// Decided returns when the gate left filed, and whether it has.
func (g *Gate) Decided() (time.Time, bool) {
	for _, h := range g.History {
		if h.From == state.Filed {
			return h.At, true
		}
	}
	return time.Time{}, false
}

// Timeline returns who the gate is and where it stands.
func (g *Gate) Timeline() transition.Timeline {
	return transition.Timeline{ID: g.ID, Imp: g.Imp, State: g.State, History: g.History}
}

// Apply makes h the gate's latest transition.
func (g *Gate) Apply(h state.Transition) {
	g.History = append(g.History, h)
	g.State, g.Updated = h.To, h.At
}

// gates is the gates store: one lock over pending/ and resolved/, so a
// move between them is one transaction.
func gates(y *yard.Yard) (transition.Store[*Gate], error) {
	d, err := y.GatesDir()
	if err != nil {
		return transition.Store[*Gate]{}, err
	}
	return transition.Store[*Gate]{
		Yard: y, Dir: d, Kind: Kind, IDKind: id.Gate, Machine: state.GateMachine,
		Read: func(tx *store.Tx, gateID string) (*Gate, error) {
			g, err := Get(y, gateID)
			// A pending copy beside a decision is what a crash between
			// writing the one and removing the other leaves.
			if err == nil && tx != nil && g.State != state.Filed && exists(tx, pending, gateID) {
				err = tx.Remove(name(pending, gateID))
			}
			return g, err
		},
		Write: write, First: "gate-filed",
		Detail: func(g *Gate, e *event.Event) { e.Task, e.SHA256, e.Intent = g.Task, g.SHA256, g.Intent },
		Outbox: func(e event.Event) error { return notify.Enqueue(y, e, config.Notifies) },
	}, nil
}

func name(where, gateID string) string { return filepath.Join(where, gateID+".json") }

func exists(tx *store.Tx, where, gateID string) bool {
	_, err := os.Lstat(tx.Path(name(where, gateID)))
	return err == nil
}

// write puts a filed gate in pending/ and any other in resolved/, removing
// its pending copy: a crash in between leaves both, and Get takes the
// resolved one.
func write(tx *store.Tx, g *Gate) error {
	b, err := store.Encode(g)
	if err != nil {
		return err
	}
	if g.State == state.Filed {
		return tx.Write(name(pending, g.ID), b)
	}
	if err := tx.Write(name(resolved, g.ID), b); err != nil {
		return err
	}
	if exists(tx, pending, g.ID) {
		return tx.Remove(name(pending, g.ID))
	}
	return nil
}

// Repair records the last transition of a gate whose writer died between
// its state write and its records. Every File and Move does this first;
// executors call it after a restart, when a finished gate may be the one
// that will not move again.
func Repair(y *yard.Yard) error {
	s, err := gates(y)
	if err != nil {
		return err
	}
	return transition.Repair(s)
}

// readGate reads one gate file, refusing it when a directory on the way
// below the yard root is a symlink.
func readGate(y *yard.Yard, path string) (*Gate, error) {
	b, err := y.ReadFile(path)
	if err != nil {
		return nil, err
	}
	return parseGate(path, b)
}

func parseGate(path string, b []byte) (*Gate, error) {
	var g Gate
	if err := store.Decode(path, b, Kind, Major, &g); err != nil {
		return nil, err
	}
	if id.Check(id.Gate, g.ID) != nil || g.ID+".json" != filepath.Base(path) {
		return nil, fmt.Errorf("%s: id %q does not match the file name", path, g.ID)
	}
	var last string
	if len(g.History) > 0 {
		last = g.History[len(g.History)-1].To
	}
	switch {
	case !state.GateMachine.Known(g.State):
		return &g, fmt.Errorf("%s: %w: unknown state %q", path, ErrHandEdited, g.State)
	case (filepath.Base(filepath.Dir(path)) == pending) != (g.State == state.Filed):
		return &g, fmt.Errorf("%s: %w: state %q does not belong in %s/", path, ErrHandEdited, g.State, filepath.Base(filepath.Dir(path)))
	case last != g.State:
		return &g, fmt.Errorf("%s: %w: state %q, but its timeline ends in %q", path, ErrHandEdited, g.State, last)
	}
	return &g, nil
}

// ErrHandEdited is a gate file whose state no transition wrote: one not
// in the gate state machine, one in the wrong directory, or one its
// timeline does not end in. No daemon acts on such a gate; a listing
// shows it with what is wrong (Filter.Edited).
var ErrHandEdited = errors.New("state edited by hand")

// Get reads one gate. A resolved copy wins over a pending one: a crash
// between writing the decision and removing the pending file leaves both,
// and the decision is the truth.
func Get(y *yard.Yard, gateID string) (*Gate, error) {
	if err := id.Check(id.Gate, gateID); err != nil {
		return nil, err
	}
	g, err := readGate(y, y.Path("gates", resolved, gateID+".json"))
	if store.IsNotExist(err) {
		g, err = readGate(y, y.Path("gates", pending, gateID+".json"))
		if store.IsNotExist(err) {
			return nil, fmt.Errorf("gate %s: %w in %s", gateID, errNoGate, y.Path("gates"))
		}
	}
	return g, err
}

// errNoGate is a gate id that names no gate; it is an os.ErrNotExist, so
// the engine's recovery passes over a marker naming a gate not written.
var errNoGate error = noGate{}

type noGate struct{}

func (noGate) Error() string        { return "no such gate" }
func (noGate) Is(target error) bool { return target == os.ErrNotExist }

// Change is one requested transition of a gate.
type Change struct {
	To    string
	By    string
	Actor string
	Why   string
	// SHA, when set, must be a prefix of the gate's payload hash: the
	// decision applies only to the payload the decider reviewed.
	SHA string
	// Edit changes other fields in the same write (a result). It runs
	// under the lock on the gate as read from disk; an error stops the move.
	Edit func(g *Gate) error
	// Signer signs an approval, over the exact values written; a move to
	// approved without one (or Signed) is refused.
	Signer *approval.Key
	// Signed is an approval made before the move, by a passkey that
	// signed the gate's message for By at Signed.At: the move is stamped
	// with that time, and written only when it verifies with the keyring
	// Decide is given.
	Signed *approval.Approval
	// Deadline, when set, is the gate's deadline as the decider's
	// org.toml says (Gate.Deadline): an approval at or past it is
	// refused with ErrExpired.
	Deadline func(g *Gate) time.Time

	// why, when set, gives the transition's reason from the gate as read
	// under the lock.
	why func(g *Gate) string
}

// Move applies one transition under the gates lock and records it (see
// transition.Move for the sequence and its invariant). A move written
// whose journal and audit records could not follow returns the gate moved
// and an error wrapping transition.ErrUnrecorded.
func Move(y *yard.Yard, gateID string, c Change) (*Gate, error) {
	g, _, err := move(y, gateID, c, false, nil)
	return g, err
}

// ErrDecided is a decision asked again that cannot stand as a repeat of
// the one made: a different payload, an approval that does not verify.
var ErrDecided = errors.New("already decided")

// errRepeat stops a move that would only repeat the decision made.
var errRepeat = errors.New("decision repeated")

// Decide moves a gate to approved or denied as Move does, except that a
// decision the gate already has is not refused but checked and left as
// it is, with repeated set: an approval again once the payload still
// hashes to its sha256, c.SHA (when given) begins that sha256 and the
// recorded approval verifies with the keyring keys loads (called only
// then), and so too of a gate executing or executed since; a denial
// again whatever its reason (the first one's stays). A
// repeat that fails those checks wraps ErrDecided and says which. Of two
// deciders racing, one writes and the other repeats, so a script that
// retries a decision it is not sure was made gets the same answer twice.
func Decide(y *yard.Yard, gateID string, c Change, keys func() (*approval.Keyring, error)) (g *Gate, repeated bool, err error) {
	return move(y, gateID, c, true, keys)
}

// checkRepeat checks that c asks again for the decision g holds, as
// Decide describes.
func checkRepeat(g *Gate, c Change, keys func() (*approval.Keyring, error)) error {
	last := g.Decision(c.To)
	if c.To == state.Denied {
		return errRepeat
	}
	if c.SHA != "" && !strings.HasPrefix(g.SHA256, strings.ToLower(c.SHA)) {
		return fmt.Errorf("gate %s: %w: approved by %s at %s for payload sha256 %s, which does not start with %s", g.ID, ErrDecided, last.By, stamp(last.At), g.SHA256, c.SHA)
	}
	kr, err := keys()
	if err != nil {
		return fmt.Errorf("gate %s: %w: approved by %s at %s, and that approval cannot be verified: %w", g.ID, ErrDecided, last.By, stamp(last.At), err)
	}
	if _, err := g.VerifyApproval(kr); err != nil {
		return fmt.Errorf("gate %s: %w: approved by %s at %s, but that approval does not verify: %w", g.ID, ErrDecided, last.By, stamp(last.At), err)
	}
	return errRepeat
}

// Decision is the last move of g to state to (approved, denied), as a
// repeat of it names it wherever the gate went on from it; the last move
// of all when it never was.
func (g *Gate) Decision(to string) state.Transition {
	last := g.History[len(g.History)-1]
	for _, h := range g.History {
		if h.To == to {
			last = h
		}
	}
	return last
}

func stamp(t time.Time) string { return t.UTC().Format(time.RFC3339) }

// move is Move, and with again Decide.
func move(y *yard.Yard, gateID string, c Change, again bool, keys func() (*approval.Keyring, error)) (*Gate, bool, error) {
	if err := id.Check(id.Gate, gateID); err != nil {
		return nil, false, err
	}
	if c.To == state.Approved && c.Signer == nil && (c.Signed == nil || keys == nil) {
		return nil, false, fmt.Errorf("gate %s: %w", gateID, ErrNoSigner)
	}
	s, err := gates(y)
	if err != nil {
		return nil, false, err
	}
	// An approved gate whose approval cannot count may be approved again,
	// which signs it anew: one without a signature of the current schema
	// (approved before approvals were signed, or signed as
	// impyard.approval/1), or, for a decider with a keyring that holds its
	// signing key, one signed by a key not in it (made with another
	// IMPYARD_HOME), which impexec leaves approved.
	foreign := func(g *Gate) bool {
		if keys == nil || !g.Approval.Current() || c.Signer == nil {
			return false
		}
		kr, err := keys()
		if err != nil {
			return false
		}
		trusted := func(fp string) bool {
			return slices.ContainsFunc(kr.Keys, func(k *approval.Trusted) bool { return k.Fingerprint == fp })
		}
		return trusted(c.Signer.Fingerprint()) && !trusted(g.Approval.Key)
	}
	resign := func(g *Gate) bool {
		return c.To == state.Approved && g.State == state.Approved && (!g.Approval.Current() || foreign(g))
	}
	// An approval asked again of a gate that went on from approved to
	// executing or executed asks for what is already so: the same
	// checks make it a repeat, and nothing runs a second time.
	approvedOn := func(g *Gate) bool {
		return g.State == state.Approved || g.State == state.Executing || g.State == state.Executed
	}
	repeat := func(g *Gate) bool {
		return again && (c.To == state.Denied && g.State == state.Denied ||
			c.To == state.Approved && approvedOn(g) && g.Approval.Current() && !foreign(g))
	}
	var held *Gate
	g, err := transition.Move(s, gateID, transition.Change[*Gate]{
		To: c.To, By: c.By, Actor: c.Actor, Why: c.Why,
		Allow: func(g *Gate) bool { return resign(g) || repeat(g) },
		Edit: func(g *Gate, h *state.Transition) error {
			if repeat(g) {
				held = g
				return checkRepeat(g, c, keys)
			}
			// Only the steps toward sending need the payload intact; a gate
			// whose payload was tampered with can still be denied or failed.
			if c.To == state.Approved || c.To == state.Executing || c.To == state.Executed {
				if _, err := g.Frozen(); err != nil {
					return err
				}
			}
			if c.SHA != "" && !strings.HasPrefix(g.SHA256, strings.ToLower(c.SHA)) {
				return fmt.Errorf("gate %s: payload sha256 is %s, which does not start with %s; not the payload that was reviewed", gateID, g.SHA256, c.SHA)
			}
			// Signing again a gate approved without a valid signature is
			// the approval, made now: the deadline holds for it too.
			if c.To == state.Approved && (g.State == state.Filed || resign(g)) && c.Deadline != nil {
				if d := c.Deadline(g); !d.IsZero() && !h.At.Before(d) {
					return fmt.Errorf("gate %s: %w: its deadline was %s (filed %s); nothing was approved", gateID, ErrExpired, stamp(d), stamp(g.Created))
				}
			}
			if c.Edit != nil {
				if err := c.Edit(g); err != nil {
					return err
				}
			}
			if c.why != nil {
				h.Why = c.why(g)
			}
			if resign(g) {
				h.Why = "approved again with a signature (its first approval had none)"
				if g.Approval != nil {
					h.Why = "approved again with a signature of " + approval.Schema + " (its first approval was of an older schema, which covered less of the gate)"
					if g.Approval.Current() {
						h.Why = fmt.Sprintf("approved again with a trusted key (its first approval was signed by key %q, which impexec does not trust)", g.Approval.Key)
					}
				}
				if c.Why != "" {
					h.Why += ": " + c.Why
				}
			}
			switch {
			case c.To == state.Approved && c.Signed != nil:
				return signed(g, c, h, keys)
			case c.To == state.Approved:
				g.Approval = c.Signer.Sign(g.Subject(), c.By, h.At)
			}
			return nil
		},
	})
	if errors.Is(err, errRepeat) {
		return held, true, nil
	}
	if c.To == state.Approved && errors.Is(err, state.ErrIllegal) {
		if g, gerr := Get(y, gateID); gerr == nil && g.State == state.Expired {
			h := g.History[len(g.History)-1]
			return nil, false, fmt.Errorf("gate %s: %w at %s: %s; nothing was approved", gateID, ErrExpired, stamp(h.At), h.Why)
		}
	}
	if err != nil && !errors.Is(err, transition.ErrUnrecorded) {
		return nil, false, err
	}
	// A move written whose record could not follow is made: the gate is
	// returned with the error, as transition.Move returns it.
	return g, false, err
}

// signed records c.Signed as g's approval, stamped at its time, once it
// verifies: a passkey's approval replayed onto another gate, or over a
// gate changed since its message was shown, is refused and nothing is
// written.
func signed(g *Gate, c Change, h *state.Transition, keys func() (*approval.Keyring, error)) error {
	a := c.Signed
	if a.By != c.By || !a.At.Equal(state.Second(a.At)) {
		return fmt.Errorf("gate %s: %w: a signed approval must be by the decider, at a whole second", g.ID, approval.ErrInvalid)
	}
	kr, err := keys()
	if err != nil {
		return fmt.Errorf("gate %s: %w", g.ID, err)
	}
	if _, err := kr.Verify(g.Subject(), a); err != nil {
		return err
	}
	h.At, h.AtMS = a.At.UTC(), a.At.UnixMilli()
	g.Approval = a
	return nil
}

// Filter selects gates in a listing.
type Filter struct {
	All bool // resolved gates too, not only pending ones
	Imp string
	// Known and Settled, for a daemon listing again and again, pass over
	// the files of gates it is done with (see transition.Source).
	Known   *transition.Known
	Settled func(*Gate) bool
	// WrittenSince, when set, passes over the resolved gates whose file
	// was last written before it, by its modification time, unread: a
	// gate's file is rewritten at each move, so none of them moved since.
	WrittenSince time.Time
	// Edited lists gates whose state was edited by hand (ErrHandEdited)
	// rather than reporting them as unreadable; only EachListed says
	// what is wrong with them, so only a listing sets it.
	Edited bool
}

// List reads the gates matching f, sorted by id. Unreadable files are
// returned in bad, by name; the rest are still listed.
func List(y *yard.Yard, f Filter) (gates []*Gate, bad []error) {
	bad, _ = Each(y, f, func(g *Gate) error {
		gates = append(gates, g)
		return nil
	})
	return gates, bad
}

// Each calls fn with every gate matching f in id order, holding only a
// few hundred at a time (see transition.Each). Unreadable files are
// returned in bad, by name, and the rest are still passed to fn; an error
// from fn stops Each and is returned.
func Each(y *yard.Yard, f Filter, fn func(*Gate) error) (bad []error, err error) {
	return each(y, f, func(g *Gate, _ error) *Gate { return g }, func(g *Gate) *Gate { return g }, fn)
}

// Listed is a gate as a listing shows it: the gate file and whether its
// payload still matches its sha256 (see Matches).
type Listed struct {
	*Gate
	PayloadMatches bool `json:"payload_matches"`
	// Problem says what is wrong with a gate whose state was edited by
	// hand (ErrHandEdited), listed with Filter.Edited.
	Problem string `json:"problem,omitempty"`
	// ShortID is the id's shortest unique abbreviation (id.Shortest),
	// set by the listing.
	ShortID string `json:"short_id,omitempty"`
}

// EachListed is Each for a listing: it works out each gate's
// PayloadMatches, which re-encodes and hashes the payload, on the
// goroutines that read the files rather than in fn.
func EachListed(y *yard.Yard, f Filter, fn func(*Listed) error) (bad []error, err error) {
	return EachListedAs(y, f, func(l *Listed) *Listed { return l }, fn)
}

// EachListedAs is EachListed passing fn prep's value of each listed
// gate. prep runs on the goroutines that read the files, several at
// once, so what a listing does with each gate (render it) is spread
// over the cores rather than done in fn, one gate at a time.
func EachListedAs[T any](y *yard.Yard, f Filter, prep func(*Listed) T, fn func(T) error) (bad []error, err error) {
	return each(y, f, func(g *Gate, edited error) *listedAs[T] {
		l := &Listed{Gate: g, PayloadMatches: g.Matches()}
		if edited != nil {
			l.Problem = edited.Error()
		}
		return &listedAs[T]{gate: g, v: prep(l)}
	}, func(l *listedAs[T]) *Gate { return l.gate }, func(l *listedAs[T]) error { return fn(l.v) })
}

// listedAs is a gate EachListedAs read and prep's value of it.
type listedAs[T any] struct {
	gate *Gate
	v    T
}

// each reads the gates matching f and passes prep's value of each to fn;
// prep runs on the reading goroutines, for the gates f selects only, and
// gateOf takes the gate back out of its value.
func each[R any](y *yard.Yard, f Filter, prep func(*Gate, error) *R, gateOf func(*R) *Gate, fn func(*R) error) (bad []error, err error) {
	if f.Imp != "" {
		if err := id.CheckName(f.Imp); err != nil {
			return []error{err}, nil
		}
	}
	parse := func(path string, b []byte) (*R, error) {
		g, err := parseGate(path, b)
		var edited error
		if f.Edited && errors.Is(err, ErrHandEdited) {
			edited, err = err, nil
		}
		if err != nil || (f.Imp != "" && g.Imp != f.Imp) {
			return nil, err // nil, nil: not selected
		}
		return prep(g, edited), nil
	}
	// A resolved copy wins over a pending one (see Get), even one that
	// cannot be read: it is reported, and the pending copy is not listed
	// as if the gate were still open.
	resolvedIDs := map[string]bool{}
	var settled func(*R) bool
	if f.Settled != nil {
		settled = func(r *R) bool { return r != nil && f.Settled(gateOf(r)) }
	}
	srcs := []transition.Source[*R]{
		{Rel: filepath.Join("gates", resolved), Parse: parse, Known: f.Known, Settled: settled, Want: func(gid string) bool {
			resolvedIDs[gid] = true
			if f.All && !f.WrittenSince.IsZero() {
				fi, err := os.Lstat(y.Path("gates", resolved, gid+".json"))
				// One that cannot be looked at is read, and reported if
				// it cannot be read either.
				return err != nil || !fi.ModTime().Before(f.WrittenSince)
			}
			return f.All
		}},
		{Rel: filepath.Join("gates", pending), Parse: parse, Known: f.Known, Settled: settled, Want: func(gid string) bool { return !resolvedIDs[gid] }},
	}
	return transition.Each(y, Kind, id.Gate, srcs, func(r *R) error {
		if r == nil {
			return nil
		}
		return fn(r)
	})
}
