// Package testclock is the clock tests read instead of time.Now, so a
// test that counts days can be run at any time of day on purpose.
//
// Unset, IMPYARD_TEST_NOW leaves the system clock in charge; set to an
// RFC 3339 time, it is the instant every test reading this clock
// starts from. make test sets it to just before midnight UTC for the
// packages whose tests import this one, so a test that reads the clock
// twice, or adds to it, and crosses a date line fails there rather than
// on one evening in a fresh clone. Only tests import this package; the
// system clock is never touched.
package testclock

import (
	"os"
	"testing"
	"time"
)

// Env names the variable that sets the clock.
const Env = "IMPYARD_TEST_NOW"

// Now is the one instant a test reads: IMPYARD_TEST_NOW when set, the
// system clock's now otherwise. A test calls it once and hands the value
// to everything it checks, so its idea of "today" cannot change halfway.
func Now(t testing.TB) time.Time {
	t.Helper()
	s := os.Getenv(Env)
	if s == "" {
		return time.Now()
	}
	at, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		t.Fatalf("%s=%q: %v", Env, s, err)
	}
	return at
}

// Freeze reads Now once, sets each clock variable named (a package's
// replaceable Now, such as ledger.Now) to return it, and puts them back
// when the test ends. It returns the instant, for the test's own checks.
func Freeze(t testing.TB, clocks ...*func() time.Time) time.Time {
	t.Helper()
	now := Now(t)
	for _, c := range clocks {
		was := *c
		*c = func() time.Time { return now }
		t.Cleanup(func() { *c = was })
	}
	return now
}
