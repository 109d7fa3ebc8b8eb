package inbound

import "time"

// SetClock replaces the relay's clock, for tests of its window and its
// pruning.
func SetClock(r *Relay, now func() time.Time) { r.now = now }

// SetBodyTimeout shortens how long a body may take once it holds a slot.
func SetBodyTimeout(r *Relay, d time.Duration) { r.bodyTimeout = d }

// SlotsHeld is how many deliveries hold a slot now.
func SlotsHeld(r *Relay) int { return len(r.slots) }
