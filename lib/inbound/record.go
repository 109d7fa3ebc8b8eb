package inbound

import (
	"strings"
	"time"

	"github.com/impyard/impyard/lib/store"
)

// RecordSchema marks a delivery's record among the other lines of the
// audit log.
var RecordSchema = store.Schema("inbound", 1)

// Verdicts of a delivery.
const (
	Accepted = "accepted"
	Refused  = "refused"
	// Ping is a Discord PING, answered and filing nothing.
	Ping = "ping"
)

// Record is one delivery, accepted or refused. It never holds the body
// or a header's value other than the delivery id.
type Record struct {
	Schema   string    `json:"schema"`
	TS       time.Time `json:"ts"`
	TSMS     int64     `json:"ts_ms"`
	Source   string    `json:"source"`
	Kind     string    `json:"kind,omitempty"`
	Imp      string    `json:"imp,omitempty"`
	Delivery string    `json:"delivery,omitempty"`
	User     string    `json:"user,omitempty"`
	Verdict  string    `json:"verdict"`
	Status   int       `json:"status"`
	Reason   string    `json:"reason,omitempty"`
	Task     string    `json:"task,omitempty"`
	Client   string    `json:"client"`
	Bytes    int64     `json:"bytes"`
}

// maxReason bounds a record's reason, in bytes.
const maxReason = 256

// record appends rec to the audit log.
func (r *Relay) record(rec *Record) error {
	now := r.now()
	rec.Schema, rec.TS, rec.TSMS = RecordSchema, store.Second(now), store.Millis(now)
	if len(rec.Source) > 64 {
		rec.Source = rec.Source[:64]
	}
	// A refusal's reason may quote what the sender sent (a path): a
	// line of the audit log stays short whatever anyone on the network
	// sends.
	if len(rec.Reason) > maxReason {
		rec.Reason = strings.ToValidUTF8(rec.Reason[:maxReason], "") + "…"
	}
	line, err := store.Line(rec)
	if err != nil {
		return err
	}
	p, err := r.yard.DecisionsPath()
	if err != nil {
		return err
	}
	return store.AppendLine(p, line)
}
