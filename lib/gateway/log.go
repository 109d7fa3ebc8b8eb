package gateway

import (
	"errors"
	"strings"
	"time"

	"github.com/impyard/impyard/lib/store"
)

// Filter selects decision records for a reader of the audit log (impgw
// log). A zero field selects everything.
type Filter struct {
	Since   time.Time // records at or after
	Imp     string    // the subject, exactly
	Verdict string    // one of Verdicts
	Host    string    // the request's host, without regard to case
	Rule    string    // the rule that decided, exactly
}

// Verdicts are the verdicts a record can carry, in the order they are
// listed to a user.
var Verdicts = []string{VerdictAllow, VerdictDeny, VerdictTunnel, VerdictGate, VerdictReject}

// Match reports whether r passes every set field of f.
func (f *Filter) Match(r *Record) bool {
	switch {
	case !f.Since.IsZero() && r.Time.Before(f.Since):
		return false
	case f.Imp != "" && r.Request.Imp != f.Imp:
		return false
	case f.Verdict != "" && r.Verdict != f.Verdict:
		return false
	case f.Host != "" && !strings.EqualFold(r.Request.Host, f.Host):
		return false
	case f.Rule != "" && r.Rule != f.Rule:
		return false
	}
	return true
}

// awaitsOutcome reports whether an outcome line will complete r: a
// request the gateway forwarded (or a tunnel it opened) whose exchange
// was not over when its decision was written.
func awaitsOutcome(r *Record) bool {
	return (r.Verdict == VerdictAllow || r.Verdict == VerdictTunnel || r.Verdict == VerdictGate) && r.RefusedBy == "" && r.Status == 0
}

// LogReader reads the decision records of an audit log as it grows, each
// completed by its outcome line. Lines of other schemas (the gate and
// task events that share the log) are skipped, or given to Other. A
// record is returned once it is complete: at once when no outcome is to
// follow, else when its outcome line is read, or by Flush.
type LogReader struct {
	Path string
	// Other, when set, is given each line of another schema, in the
	// log's order: it returns what to list with the decisions (a
	// refused proposal's record), nil to pass the line over, or an error
	// for a line of its kind it cannot read.
	Other func(line []byte) (any, error)

	tail    store.Tail
	pending map[string]*Record
	order   []*Record // pending, in the order their decisions were written
}

// Entry is one thing a LogReader lists: a decision record, completed by
// its outcome, or what Other made of a line of another kind (Record nil).
type Entry struct {
	*Record
	Other any
}

// Skip passes over what the log holds now (see store.Tail.Skip): the
// next Next returns only what is appended after, and the outcomes of
// decisions passed over are ignored.
func (l *LogReader) Skip() error {
	l.tail.Path = l.Path
	return l.tail.Skip()
}

// Next reads the lines appended since the last call and returns the
// entries they complete, and the lines it skipped (damaged, or a decision
// it could not read). A line without its newline yet is kept for the next
// call. A missing file has no lines.
func (l *LogReader) Next() ([]Entry, []store.BadLine, error) {
	l.tail.Path = l.Path
	var out []Entry
	var skipped []store.BadLine
	bad, err := l.tail.Next(nil, func(line []byte, n int) {
		if e, err := l.take(line); err != nil {
			skipped = append(skipped, store.BadLine{Path: l.Path, Line: n, Err: err})
		} else if e.Record != nil || e.Other != nil {
			out = append(out, e)
		}
	})
	return out, append(bad, skipped...), err
}

// take reads one line and returns the entry it completes, if any.
func (l *LogReader) take(line []byte) (Entry, error) {
	o, err := ParseOutcome(line)
	if err == nil {
		r := l.pending[o.ID]
		if r == nil {
			return Entry{}, nil // its decision was before the reader started, or lost
		}
		r.Complete(o)
		l.drop(o.ID)
		return Entry{Record: r}, nil
	}
	if !errors.Is(err, ErrNotOutcome) {
		return Entry{}, err
	}
	r, err := ParseRecord(line)
	switch {
	case errors.Is(err, ErrNotDecision):
		if l.Other == nil {
			return Entry{}, nil
		}
		v, err := l.Other(line)
		return Entry{Other: v}, err
	case err != nil:
		return Entry{}, err
	}
	if l.pending[r.ID] != nil {
		// A forward refused after its decision was written: the refusal
		// is the record.
		l.drop(r.ID)
	}
	if !awaitsOutcome(r) {
		return Entry{Record: r}, nil
	}
	if l.pending == nil {
		l.pending = map[string]*Record{}
	}
	l.pending[r.ID] = r
	l.order = append(l.order, r)
	return Entry{}, nil
}

func (l *LogReader) drop(id string) {
	delete(l.pending, id)
	for i, r := range l.order {
		if r.ID == id {
			l.order = append(l.order[:i], l.order[i+1:]...)
			break
		}
	}
}

// Flush returns the records still awaiting their outcome, as they stand
// (an exchange still open, or one the gateway never finished), oldest
// first, and a torn last line, if any, as skipped.
func (l *LogReader) Flush() ([]Entry, []store.BadLine) {
	var out []Entry
	for _, r := range l.order {
		out = append(out, Entry{Record: r})
	}
	l.order, l.pending = nil, nil
	return out, l.tail.Torn()
}

// OutcomeJSON is the outcome line (without its newline) that completes
// r's record, for an exchange that ended at end: what the gateway appends
// once a forwarded request is over.
func (r *Record) OutcomeJSON(end time.Time) []byte {
	return r.appendOutcomeJSON(make([]byte, 0, 256), end)
}
