package executor

import (
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/impyard/impyard/lib/config"
	"github.com/impyard/impyard/lib/ledger"
	"github.com/impyard/impyard/lib/notify"
)

// Warn writes the budget-warning of every imp whose proactive spend on
// the UTC day of now has passed [budget.<imp>] warn of one of its caps,
// once per imp and day: the outbox entry's id carries the day
// (notify.Warning), so a restarted impexec, or a second one, asks again
// and writes nothing. What it has written it remembers, to spare the
// outbox's lock on every pass.
func (r *Runner) Warn(org *config.Org, now time.Time) {
	day := now.UTC().Format(time.DateOnly)
	for _, imp := range slices.Sorted(maps.Keys(org.Budget)) {
		b := org.Budget[imp]
		if b.Warn <= 0 || !b.Capped() {
			continue
		}
		r.warnedMu.Lock()
		done := r.warned[imp] == day
		r.warnedMu.Unlock()
		if done {
			continue
		}
		spent, err := ledger.Spent(r.Yard, imp, now)
		if err != nil {
			r.logf("budget of %s: %v", imp, err)
			continue
		}
		share, key, used := ledger.Share(b, spent[ledger.Proactive])
		if share < b.Warn {
			continue
		}
		why := fmt.Sprintf("%s on proactive work on %s: %.0f%% of %s, past its warn = %g", used, day, 100*share, key, b.Warn)
		there, err := notify.Warning(r.Yard, imp, why, now, config.Notifies)
		if err != nil {
			r.logf("budget of %s: its warning: %v", imp, err)
			continue
		}
		if there {
			r.warnedMu.Lock()
			if r.warned == nil {
				r.warned = map[string]string{}
			}
			r.warned[imp] = day
			r.warnedMu.Unlock()
		}
	}
}
