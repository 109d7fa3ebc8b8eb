package desk

import (
	"time"

	"github.com/impyard/impyard/lib/cli"
	"github.com/impyard/impyard/lib/config"
	"github.com/impyard/impyard/lib/gate"
	"github.com/impyard/impyard/lib/state"
)

// Times is how long a gate has waited and, for one still undecided with
// a deadline (gate.Deadline), how long it has left: what impgate ls and
// show print and the web desk shows, from one computation.
type Times struct {
	// Age is from filing to now, in whole seconds.
	Age int64 `json:"age_seconds"`
	// Deadline is when the gate expires undecided; Left the seconds
	// until then, negative once past, for a filed gate only.
	Deadline *time.Time `json:"deadline,omitempty"`
	Left     *int64     `json:"left_seconds,omitempty"`
	// Old says that approving it asks again: it is older than its
	// executor's confirm_after.
	Old bool `json:"old,omitempty"`
}

// Timing is g's Times at now, its deadline and confirm_after as org says
// (nil: org.toml did not load, and only a deadline set at filing counts).
func Timing(g *gate.Gate, org *config.Org, now time.Time) Times {
	t := Times{Age: int64(now.Sub(g.Created) / time.Second)}
	if d := g.Deadline(org); !d.IsZero() {
		d = state.Second(d)
		t.Deadline = &d
		if g.State == state.Filed {
			left := int64(d.Sub(now) / time.Second)
			t.Left = &left
		}
	}
	if org != nil && g.State == state.Filed {
		if exe := org.Executors[g.Intent]; exe != nil && exe.ConfirmAfter.Duration > 0 {
			t.Old = now.Sub(g.Created) > exe.ConfirmAfter.Duration
		}
	}
	return t
}

// AgeText is the age in its largest whole unit ("5h").
func (t Times) AgeText() string { return cli.Span(time.Duration(t.Age) * time.Second) }

// LeftText is the time left in its largest whole unit ("3h"), "expired"
// once the deadline is past (impexec moves the gate at once), and "-"
// for a gate that has no deadline or is decided.
func (t Times) LeftText() string {
	switch {
	case t.Left == nil:
		return "-"
	case *t.Left <= 0:
		return "expired"
	}
	return cli.Span(time.Duration(*t.Left) * time.Second)
}
