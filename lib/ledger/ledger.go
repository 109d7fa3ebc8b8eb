// Package ledger meters spend: ledger/<imp>.jsonl holds one line per cost,
// the configured cost of each executed action and the bytes each imp moves
// through the gateway. Budgets read it to soft-deny an imp's proactive work
// once its daily cap is spent; owner tasks always run.
package ledger

import (
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"sync"
	"time"

	"github.com/impyard/impyard/lib/config"
	"github.com/impyard/impyard/lib/id"
	"github.com/impyard/impyard/lib/store"
	"github.com/impyard/impyard/lib/yard"
)

// Entry kinds.
const (
	Action = "action"
	Bytes  = "bytes"
)

// Entry is one metered cost.
type Entry struct {
	Schema string    `json:"schema"`
	TS     time.Time `json:"ts"`
	Imp    string    `json:"imp"`
	Kind   string    `json:"kind"`
	Intent string    `json:"intent,omitempty"`
	Gate   string    `json:"gate,omitempty"`
	Task   string    `json:"task,omitempty"`
	Cost   float64   `json:"cost,omitempty"`
	Bytes  int64     `json:"bytes,omitempty"`
}

// ErrOverBudget is the soft-deny of proactive work past its daily cap.
var ErrOverBudget = errors.New("over budget")

func path(y *yard.Yard, imp string) (string, error) {
	if err := id.CheckName(imp); err != nil {
		return "", err
	}
	d, err := store.MkdirAll(y.Root, "ledger")
	if err != nil {
		return "", err
	}
	return filepath.Join(d, imp+".jsonl"), nil
}

// Debit appends e to the imp's ledger.
func Debit(y *yard.Yard, e Entry) error {
	p, err := path(y, e.Imp)
	if err != nil {
		return err
	}
	e.Schema = store.Schema("ledger", 1)
	if e.TS.IsZero() {
		e.TS = time.Now()
	}
	e.TS = store.Second(e.TS)
	return store.AppendJSONL(p, e)
}

// Spent sums the imp's costs and bytes on the UTC day of at. An action is
// counted once per gate: an executor that resumes after a crash may debit
// the same gate again.
func Spent(y *yard.Yard, imp string, at time.Time) (cost float64, bytes int64, err error) {
	if err := id.CheckName(imp); err != nil {
		return 0, 0, err
	}
	// Reading makes nothing: a missing ledger/ has no entries.
	p := filepath.Join(y.Path("ledger"), imp+".jsonl")
	day := at.UTC().Format("2006-01-02")
	gates := map[string]bool{}
	_, err = store.ReadJSONL(p, func(line []byte) error {
		var e Entry
		if json.Unmarshal(line, &e) != nil || e.TS.UTC().Format("2006-01-02") != day {
			return nil
		}
		if e.Gate != "" {
			if gates[e.Gate] {
				return nil
			}
			gates[e.Gate] = true
		}
		cost += e.Cost
		bytes += e.Bytes
		return nil
	})
	return cost, bytes, err
}

// Check returns ErrOverBudget (wrapped, with the figures) when proactive
// work of imp has spent its daily cap. Owner work is never refused.
func Check(y *yard.Yard, org *config.Org, imp string, proactive bool, at time.Time) error {
	if !proactive || org == nil {
		return nil
	}
	b, ok := org.Budget[imp]
	if !ok || (b.Daily == 0 && b.Bytes == 0) {
		return nil
	}
	cost, bytes, err := Spent(y, imp, at)
	if err != nil {
		return err
	}
	if b.Daily > 0 && cost >= b.Daily {
		return fmt.Errorf("%w: imp %s spent %.4g of its daily %.4g on proactive work", ErrOverBudget, imp, cost, b.Daily)
	}
	if b.Bytes > 0 && bytes >= b.Bytes {
		return fmt.Errorf("%w: imp %s moved %d of its daily %d bytes", ErrOverBudget, imp, bytes, b.Bytes)
	}
	return nil
}

// Meter records the bytes each imp moves through the gateway. It keeps one
// group-commit log per imp, so metering costs a request no system call of
// its own.
type Meter struct {
	y      *yard.Yard
	report func(error)
	mu     sync.Mutex
	logs   map[string]*store.Log
}

// NewMeter returns a Meter for the yard; report hears write failures.
func NewMeter(y *yard.Yard, report func(error)) *Meter {
	return &Meter{y: y, report: report, logs: map[string]*store.Log{}}
}

// Bytes debits n bytes to imp. The subject "org" is the trusted side and
// is not metered.
func (m *Meter) Bytes(imp string, n int64) {
	if id.CheckName(imp) != nil {
		return
	}
	m.mu.Lock()
	l := m.logs[imp]
	if l == nil {
		p, err := path(m.y, imp)
		if err != nil {
			m.mu.Unlock()
			m.report(err)
			return
		}
		l = store.NewLog(p, func(err error) {
			if err != nil {
				m.report(err)
			}
		})
		m.logs[imp] = l
	}
	m.mu.Unlock()
	line, err := store.Line(Entry{Schema: store.Schema("ledger", 1), TS: store.Now(), Imp: imp, Kind: Bytes, Bytes: n})
	if err == nil {
		err = l.Append(line, false)
	}
	if err != nil {
		m.report(err)
	}
}

// Sync waits until every metered entry is written.
func (m *Meter) Sync() {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, l := range m.logs {
		l.Sync()
	}
}
