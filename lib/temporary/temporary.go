// Package temporary marks the errors a retry can fix: a lock another
// process holds, a daemon that does not answer, a single-instance lock
// taken by a live process. The package that meets such a failure wraps one
// of its sentinels, made here, with %w; lib/cli maps any error that wraps
// one to exit status 111, so cron and scripts can tell "try again later"
// from a refusal.
//
// Only sentinels made by New count. The standard library's own
// Temporary() methods (syscall.Errno, net errors) are not consulted: they
// are deprecated for being ill-defined, and exit 111 is a promise.
package temporary

import "errors"

type sentinel struct{ text string }

func (e *sentinel) Error() string { return e.text }

func (e *sentinel) temporary() {}

// New returns a sentinel error that marks what wraps it as temporary.
// Compare it with errors.Is like any sentinel.
func New(text string) error { return &sentinel{text: text} }

// Is reports whether err, or any error it wraps, is a temporary sentinel.
func Is(err error) bool {
	var t interface{ temporary() }
	return errors.As(err, &t)
}
