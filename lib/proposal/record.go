package proposal

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/impyard/impyard/lib/config"
	"github.com/impyard/impyard/lib/event"
	"github.com/impyard/impyard/lib/store"
	"github.com/impyard/impyard/lib/yard"
)

// RecordSchema marks a proposal record among the other lines of the audit
// log it shares.
var RecordSchema = store.Schema("proposal", 1)

// Field names of a proposal record, the one line written per proposal.
const (
	FieldSchema  = "schema"
	FieldTime    = "ts"    // whole seconds, UTC
	FieldTimeMS  = "ts_ms" // the same instant in unix milliseconds
	FieldImp     = "imp"
	FieldRun     = "run"
	FieldTask    = "task"
	FieldIntent  = "intent"
	FieldVerdict = "verdict"
	FieldRefusal = "refusal"
	FieldReason  = "reason"
	FieldEntry   = "trust_entry"
	FieldGate    = "gate_id"
	FieldSHA256  = "payload_sha256"
	FieldSize    = "payload_size"
)

// DefaultRefusalsPerRun is how many refused proposals of one run are
// recorded when a Decider names no other cap.
const DefaultRefusalsPerRun = 100

// QuotaEvent is the event recorded, once per run, when its refusals reach
// the cap.
const QuotaEvent = "proposal-quota"

// Record is one proposal as recorded: who proposed what, and the
// decision. It never holds the payload, only its hash and size as the box
// sent it (a gate's own sha256 is that of its canonical form).
type Record struct {
	Time      time.Time
	Imp       string
	Run, Task string
	Intent    string
	Verdict   Verdict
	Refusal   Refusal
	Reason    string
	Entry     string
	Gate      string
	SHA256    string // "" when the envelope held no payload
	Size      int
}

// NewRecord makes the record of decision d on a proposal of p whose
// envelope read as env.
func NewRecord(p Proposal, env Envelope, d Decision) *Record {
	r := &Record{Time: p.Now, Imp: p.Imp, Run: p.Run, Task: p.Task, Intent: env.Intent,
		Verdict: d.Verdict, Refusal: d.Refusal, Reason: d.Reason, Entry: d.Entry}
	if d.Gate != nil {
		r.Gate = d.Gate.ID
	}
	if len(env.Payload) > 0 {
		sum := sha256.Sum256(env.Payload)
		r.SHA256, r.Size = hex.EncodeToString(sum[:]), len(env.Payload)
	}
	return r
}

// MarshalJSON writes the record's fields in a fixed order under the Field
// names; refusal is present only on a refused proposal, trust_entry and
// gate_id only when set.
func (r *Record) MarshalJSON() ([]byte, error) {
	var b bytes.Buffer
	first := true
	put := func(name string, v any) {
		if !first {
			b.WriteByte(',')
		}
		first = false
		k, _ := json.Marshal(name)
		b.Write(k)
		b.WriteByte(':')
		enc := json.NewEncoder(&b)
		enc.SetEscapeHTML(false)
		enc.Encode(v)
		b.Truncate(b.Len() - 1) // the encoder's newline
	}
	b.WriteByte('{')
	put(FieldSchema, RecordSchema)
	put(FieldTime, store.FormatTime(r.Time))
	put(FieldTimeMS, json.Number(strconv.FormatInt(store.Millis(r.Time), 10)))
	put(FieldImp, r.Imp)
	put(FieldRun, r.Run)
	put(FieldTask, r.Task)
	put(FieldIntent, r.Intent)
	put(FieldVerdict, r.Verdict.String())
	if r.Verdict == Refused {
		put(FieldRefusal, r.Refusal.String())
	}
	put(FieldReason, r.Reason)
	if r.Entry != "" {
		put(FieldEntry, r.Entry)
	}
	if r.Gate != "" {
		put(FieldGate, r.Gate)
	}
	put(FieldSHA256, r.SHA256)
	put(FieldSize, json.Number(strconv.Itoa(r.Size)))
	b.WriteByte('}')
	return b.Bytes(), nil
}

// Decider decides proposals and records each; its zero value is ready.
// It holds each run to its imp's gates_per_run and gate_bytes_per_run
// ([budget.<imp>]): the gate past either is refused (GateCap) before
// anything is filed. The counts behind those caps and its cap on refusal
// records live in its memory: a restarted gateway counts afresh.
type Decider struct {
	// RefusalsPerRun caps the refusals of one run that are recorded; 0
	// means DefaultRefusalsPerRun.
	RefusalsPerRun int

	mu    sync.Mutex
	runs  map[string]*refusals
	gates map[string]*filed
}

// filed is what one run has filed: gates and their payload bytes,
// counting those being filed.
type filed struct {
	gates int
	bytes int64
}

type refusals struct {
	n      int  // refusals recorded, or being recorded
	capped bool // the proposal-quota event is recorded, or being recorded
}

// Decide decides p (see Decide) and records the decision: a line of
// RecordSchema in the audit log, and for a refusal the same line, less
// its reason and trust entry, in the imp's journal too, where the owner
// and the imp's next brief see it.
// Refusals past the run's cap are not recorded; the first of them is
// recorded as a proposal-quota event instead. The error is the record's:
// the decision stands either way (a gate it filed is filed), but it is not
// on record.
func (dc *Decider) Decide(y *yard.Yard, p Proposal) (Decision, error) {
	if p.Now.IsZero() {
		p.Now = time.Now()
	}
	d, env := decide(y, p, dc.takeGate)
	if d.Verdict != Refused {
		return d, writeRecord(y, NewRecord(p, env, d), false)
	}
	record, quota, undo := dc.admit(p)
	switch {
	case record:
		if err := writeRecord(y, NewRecord(p, env, d), true); err != nil {
			undo()
			return d, err
		}
	case quota:
		err := event.Record(y, event.Event{Event: QuotaEvent, Imp: p.Imp, Actor: "impgw", By: p.Imp, Task: p.Task,
			Why: fmt.Sprintf("refused proposals of %s: the cap of %d records per run is reached; later refusals of this run are answered without a record", quotaKey(p), dc.cap())})
		if err != nil {
			undo()
			return d, err
		}
	}
	return d, nil
}

// takeGate counts a gate of size payload bytes against the run's caps,
// or says which it would pass. Every gate counts, auto-approved or not:
// each is a file of its payload in gates/.
func (dc *Decider) takeGate(p Proposal, b config.Budget, size int) (undo func(), why string) {
	dc.mu.Lock()
	defer dc.mu.Unlock()
	if dc.gates == nil {
		dc.gates = map[string]*filed{}
	}
	key := quotaKey(p)
	f := dc.gates[key]
	if f == nil {
		f = &filed{}
		dc.gates[key] = f
	}
	switch {
	case f.gates+1 > b.GatesPerRun:
		return nil, fmt.Sprintf("run %s has filed %d gates, its gates_per_run cap", key, f.gates)
	case f.bytes+int64(size) > b.GateBytesPerRun:
		return nil, fmt.Sprintf("run %s has filed %d payload bytes, and %d more would pass its gate_bytes_per_run cap of %d", key, f.bytes, size, b.GateBytesPerRun)
	}
	f.gates++
	f.bytes += int64(size)
	return func() {
		dc.mu.Lock()
		f.gates--
		f.bytes -= int64(size)
		dc.mu.Unlock()
	}, ""
}

func (dc *Decider) cap() int {
	if dc.RefusalsPerRun > 0 {
		return dc.RefusalsPerRun
	}
	return DefaultRefusalsPerRun
}

// quotaKey is what refusals are counted by: the run, or for a token
// issued without one, its imp and task.
func quotaKey(p Proposal) string {
	if p.Run != "" {
		return p.Run
	}
	return p.Imp + "/" + p.Task
}

// admit takes one refusal from the run's quota: record it, record the
// quota event instead, or neither. undo gives back what was taken, when
// the record could not be written.
func (dc *Decider) admit(p Proposal) (record, quota bool, undo func()) {
	dc.mu.Lock()
	defer dc.mu.Unlock()
	if dc.runs == nil {
		dc.runs = map[string]*refusals{}
	}
	key := quotaKey(p)
	r := dc.runs[key]
	if r == nil {
		r = &refusals{}
		dc.runs[key] = r
	}
	switch {
	case r.n < dc.cap():
		r.n++
		return true, false, func() { dc.mu.Lock(); r.n--; dc.mu.Unlock() }
	case !r.capped:
		r.capped = true
		return false, true, func() { dc.mu.Lock(); r.capped = false; dc.mu.Unlock() }
	}
	return false, false, func() {}
}

// writeRecord appends r to the audit log and, when journal is set, to the
// imp's journal, in that order: a record in the journal is in the audit
// log too, which for a proposal (no marker, no repair) only the order
// keeps. The journal's copy has no reason and
// no trust entry: they may name host files (org.toml, imp.toml), and the
// journal goes into the imp's brief, inside the box, which learns no host
// path; the audit log's line has them.
func writeRecord(y *yard.Yard, r *Record, journal bool) error {
	b, _ := r.MarshalJSON()
	ap, err := y.DecisionsPath()
	if err != nil {
		return err
	}
	if err := store.AppendLine(ap, append(b, '\n')); err != nil {
		return err
	}
	if !journal {
		return nil
	}
	jp, err := y.JournalPath(r.Imp)
	if err != nil {
		return err
	}
	told := *r
	told.Reason, told.Entry = "", ""
	b, _ = told.MarshalJSON()
	return store.AppendLine(jp, append(b, '\n'))
}

// ErrNotProposal is returned by ParseRecord for a line of another kind.
var ErrNotProposal = errors.New("not a proposal record")

// ParseRecord reads a proposal record line, as MarshalJSON writes it and
// as a reader of the audit log meets it beside the gateway's decisions.
// A line of another schema returns ErrNotProposal; a verdict this
// version does not know is an error, a refusal it does not know reads
// as Unexplained.
func ParseRecord(line []byte) (*Record, error) {
	var w struct {
		Schema  string      `json:"schema"`
		Time    string      `json:"ts"`
		TimeMS  int64       `json:"ts_ms"`
		Imp     string      `json:"imp"`
		Run     string      `json:"run"`
		Task    string      `json:"task"`
		Intent  string      `json:"intent"`
		Verdict string      `json:"verdict"`
		Refusal string      `json:"refusal"`
		Reason  string      `json:"reason"`
		Entry   string      `json:"trust_entry"`
		Gate    string      `json:"gate_id"`
		SHA256  string      `json:"payload_sha256"`
		Size    json.Number `json:"payload_size"`
	}
	var schema struct {
		Schema string `json:"schema"`
	}
	if err := json.Unmarshal(line, &schema); err != nil {
		return nil, err
	}
	if schema.Schema != RecordSchema {
		return nil, ErrNotProposal
	}
	if err := json.Unmarshal(line, &w); err != nil {
		return nil, fmt.Errorf("proposal record: %w", err)
	}
	t, err := time.Parse(time.RFC3339Nano, w.Time)
	if err != nil {
		return nil, fmt.Errorf("proposal record: %s: %w", FieldTime, err)
	}
	if w.TimeMS != 0 {
		if p := store.FromMillis(w.TimeMS); store.Second(p).Equal(store.Second(t)) {
			t = p
		}
	}
	r := &Record{Time: t, Imp: w.Imp, Run: w.Run, Task: w.Task, Intent: w.Intent, Reason: w.Reason,
		Entry: w.Entry, Gate: w.Gate, SHA256: w.SHA256}
	known := false
	for v := Refused; v <= Duplicate; v++ {
		if v.String() == w.Verdict {
			r.Verdict, known = v, true
		}
	}
	if !known {
		return nil, fmt.Errorf("proposal record: unknown %s %q", FieldVerdict, w.Verdict)
	}
	for k, name := range refusalNames {
		if name == w.Refusal {
			r.Refusal = Refusal(k)
		}
	}
	if w.Size != "" {
		n, err := w.Size.Int64()
		if err != nil {
			return nil, fmt.Errorf("proposal record: %s: %w", FieldSize, err)
		}
		r.Size = int(n)
	}
	return r, nil
}

// Refusals reads the audit log for the proposals refused under task,
// oldest first: what became of a task's actions that no gate records.
// Only the lines that name the task are parsed; one of them that cannot
// be read is returned in bad, the others' damage is not this reader's
// to report. Refusals past a run's cap (RefusalsPerRun) have no record
// and are not found.
func Refusals(y *yard.Yard, task string) (refused []*Record, bad []error, err error) {
	name, _ := json.Marshal(task)
	key := append([]byte(`"`+FieldTask+`":`), name...)
	schema := []byte(`"` + RecordSchema + `"`)
	_, err = store.ReadJSONLContaining(y.Decisions(), [][]byte{key, schema}, func(line []byte) error {
		r, err := ParseRecord(line)
		switch {
		case errors.Is(err, ErrNotProposal):
		case err != nil:
			bad = append(bad, fmt.Errorf("%s: a proposal of task %s: %w", y.Decisions(), task, err))
		case r.Task == task && r.Verdict == Refused:
			refused = append(refused, r)
		}
		return nil
	})
	return refused, bad, err
}
