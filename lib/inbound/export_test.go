package inbound

import (
	"net"
	"time"
)

// SetClock replaces the relay's clock, for tests of its window and its
// pruning.
func SetClock(r *Relay, now func() time.Time) { r.now = now }

// SetBodyTimeout shortens how long a body may take once it holds a slot.
func SetBodyTimeout(r *Relay, d time.Duration) { r.bodyTimeout = d }

// SlotsHeld is how many deliveries hold a slot now.
func SlotsHeld(r *Relay) int { return len(r.slots) }

// SetBodyGrace shortens how long a body may take to start before the
// minimum rate applies.
func SetBodyGrace(r *Relay, d time.Duration) { r.bodyGrace = d }

// ClientConns is how many connections of the client at addr (an IP) the
// listener Serve runs on holds, and how many it has closed for their
// client's bound; 0, 0 before Serve.
func ClientConns(r *Relay, addr string) (held int, refused int64) {
	cl := r.clients.Load()
	if cl == nil {
		return 0, 0
	}
	key, _ := clientKey(&net.TCPAddr{IP: net.ParseIP(addr)})
	return cl.held(key), cl.refused.Load()
}
