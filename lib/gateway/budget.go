package gateway

import (
	"runtime/debug"
	"sync"
	"time"
)

// bodyBudget bounds the request body bytes the gateway holds in memory at
// once, over all connections: a body is read whole before it is judged,
// so without a bound a hundred clients declaring large bodies would make
// the gateway hold all of them. A body that does not fit is refused
// (503) before any of it is read, rather than spooled to disk, so a body
// is never written anywhere.
type bodyBudget struct {
	mu   sync.Mutex
	used int64
	max  int64
	// high is the most held since the memory was last given back.
	high int64
	// lastFree is when memory was last given back to the system.
	lastFree time.Time
}

// take reserves n bytes; false when they would not fit.
func (b *bodyBudget) take(n int64) bool {
	if n <= 0 {
		return true
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.used+n > b.max {
		return false
	}
	b.used += n
	b.high = max(b.high, b.used)
	return true
}

// freeAfter is how much must have been held before the budget's emptying
// gives memory back to the system, and how often at most.
const (
	freeAfter = 16 << 20
	freeEvery = 2 * time.Second
)

// give returns n reserved bytes. When the budget empties after holding a
// lot, the memory those bodies took is handed back to the system: the
// garbage collector would keep it for a while otherwise, and the gateway
// would stay at its peak long after the burst.
func (b *bodyBudget) give(n int64) {
	if n <= 0 {
		return
	}
	b.mu.Lock()
	b.used -= n
	free := b.used == 0 && b.high >= freeAfter && time.Since(b.lastFree) >= freeEvery
	if free {
		b.high, b.lastFree = 0, time.Now()
	}
	b.mu.Unlock()
	if free {
		go debug.FreeOSMemory()
	}
}
