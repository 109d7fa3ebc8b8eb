// Package rate is the one way impyard writes and counts a rate: "N/PERIOD"
// (N events per PERIOD, a Go duration such as "1h" or "30s"), as trust
// entries and gateway rules carry it.
//
// Limit is the parsed rate; its zero value is "no limit". Window counts
// events of many keys in memory over a sliding window: an event is
// admitted when fewer than N were admitted for its key in the PERIOD
// before it, and the refusal says when the oldest of them leaves the
// window. A Window forgets on restart; a caller whose count must survive
// one counts from its own durable records with Limit.Allows.
package rate

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"
)

// ErrSyntax is a rate that is not "N/PERIOD".
var ErrSyntax = errors.New(`a rate is "N/PERIOD": a positive count, a slash and a Go duration such as 10/1h`)

// Limit is N events per Period. The zero value limits nothing.
type Limit struct {
	N      int
	Period time.Duration
}

// MaxN bounds N, so a window never holds more times per key than this.
const MaxN = 1 << 20

// Parse reads "N/PERIOD".
func Parse(s string) (Limit, error) {
	n, per, ok := strings.Cut(strings.TrimSpace(s), "/")
	if !ok {
		return Limit{}, fmt.Errorf("rate %q: %w", s, ErrSyntax)
	}
	count, err := strconv.Atoi(n)
	if err != nil || count < 1 || count > MaxN {
		return Limit{}, fmt.Errorf("rate %q: count must be 1 to %d: %w", s, MaxN, ErrSyntax)
	}
	d, err := time.ParseDuration(per)
	if err != nil || d <= 0 {
		return Limit{}, fmt.Errorf("rate %q: period must be a positive duration: %w", s, ErrSyntax)
	}
	return Limit{N: count, Period: d}, nil
}

// IsZero reports whether l limits nothing.
func (l Limit) IsZero() bool { return l.N == 0 }

// String writes l as Parse reads it; "" for the zero Limit.
func (l Limit) String() string {
	if l.IsZero() {
		return ""
	}
	return fmt.Sprintf("%d/%s", l.N, short(l.Period))
}

// short writes a duration without the zero units time.Duration.String
// adds: 1h, not 1h0m0s, as an owner writes it.
func short(d time.Duration) string {
	s := d.String()
	if strings.HasSuffix(s, "m0s") {
		s = strings.TrimSuffix(s, "0s")
	}
	if strings.HasSuffix(s, "h0m") {
		s = strings.TrimSuffix(s, "0m")
	}
	return s
}

// UnmarshalText reads "N/PERIOD", for TOML and JSON strings.
func (l *Limit) UnmarshalText(b []byte) error {
	v, err := Parse(string(b))
	if err != nil {
		return err
	}
	*l = v
	return nil
}

// MarshalText writes l as Parse reads it.
func (l Limit) MarshalText() ([]byte, error) { return []byte(l.String()), nil }

// Since is where the window that ends at now starts: events at or after
// it count.
func (l Limit) Since(now time.Time) time.Time { return now.Add(-l.Period) }

// Allows reports whether one more event at now fits when counted events
// happened in the window ending at now; a zero Limit allows everything.
func (l Limit) Allows(counted int) bool { return l.IsZero() || counted < l.N }

// Window counts events per key over a sliding window. Its zero value is
// ready; a Window is safe for concurrent use.
type Window struct {
	mu   sync.Mutex
	keys map[string]*events
	// seen counts Take calls since the last sweep of idle keys.
	seen int
}

// events are one key's admitted times, oldest first, and the period of
// the limit they were last counted under.
type events struct {
	times  []time.Time
	period time.Duration
}

// Take admits one event of key at now under l, or returns how long until
// one would be admitted. A zero Limit admits everything and keeps nothing.
func (w *Window) Take(key string, l Limit, now time.Time) (ok bool, retry time.Duration) {
	if l.IsZero() {
		return true, 0
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.keys == nil {
		w.keys = map[string]*events{}
	}
	w.sweep(now)
	since := l.Since(now)
	e := w.keys[key]
	if e == nil {
		e = &events{}
		w.keys[key] = e
	}
	e.period = l.Period
	ts := e.times
	i := 0
	for i < len(ts) && !ts[i].After(since) {
		i++
	}
	ts = ts[i:]
	// A limit lowered since the last event leaves more times than N;
	// only the newest N matter.
	if len(ts) > l.N {
		ts = ts[len(ts)-l.N:]
	}
	if len(ts) >= l.N {
		e.times = ts
		return false, ts[0].Sub(since)
	}
	e.times = append(ts, now)
	return true, 0
}

// sweep drops, every so many events, the keys whose newest event is
// older than its own period: subjects come and go (one per run), and
// their counts must not stay for the daemon's life.
func (w *Window) sweep(now time.Time) {
	w.seen++
	if w.seen < 1024 {
		return
	}
	w.seen = 0
	for k, e := range w.keys {
		if len(e.times) == 0 || !e.times[len(e.times)-1].After(now.Add(-e.period)) {
			delete(w.keys, k)
		}
	}
}
