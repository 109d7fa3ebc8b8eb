//go:build impyard_crash

package state

import (
	"fmt"
	"os"
	"time"
)

// ClockEnv, in a binary built for tests (the impyard_crash tag), names
// the RFC 3339 instant the process's clock starts at; it then runs on at
// the system clock's pace. A test starts one program on Friday and the
// next on Monday without waiting for either, and no released binary can
// be told what time it is.
const ClockEnv = "IMPYARD_TEST_CLOCK"

func init() {
	s := os.Getenv(ClockEnv)
	if s == "" {
		return
	}
	start, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		fmt.Fprintf(os.Stderr, "%s=%q: %v\n", ClockEnv, s, err)
		os.Exit(2)
	}
	began := time.Now()
	Now = func() time.Time { return start.Add(time.Since(began)).UTC() }
}
