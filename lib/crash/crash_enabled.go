//go:build impyard_crash

package crash

import (
	"os"
	"strconv"
	"strings"
	"sync"
	"syscall"
)

// Enabled reports whether this binary was built with crash points.
const Enabled = true

var (
	mu     sync.Mutex
	target string
	left   = -1
)

func init() {
	spec := os.Getenv("IMPYARD_CRASH")
	if spec == "" {
		return
	}
	// NAME or NAME:N, dying at the Nth time the point is reached, so a test
	// can crash in the middle of a long run and not only at its start.
	target, left = spec, 1
	if name, n, ok := strings.Cut(spec, ":"); ok {
		if v, err := strconv.Atoi(n); err == nil && v > 0 {
			target, left = name, v
		}
	}
}

// Point SIGKILLs the process when it is the point named by IMPYARD_CRASH.
func Point(name string) {
	mu.Lock()
	defer mu.Unlock()
	if name != target || left <= 0 {
		return
	}
	left--
	if left == 0 {
		_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
		select {}
	}
}
