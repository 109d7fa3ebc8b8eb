package run

import (
	"path/filepath"

	"github.com/impyard/impyard/lib/store"
	"github.com/impyard/impyard/lib/yard"
)

// Root is runs/, one directory per run below it.
func Root(y *yard.Yard) string { return y.Path("runs") }

// MkRoot creates runs/ if needed and returns it.
func MkRoot(y *yard.Yard) (string, error) { return store.MkdirAll(y.Root, "runs") }

// DaemonLock is runs/.<daemon>.lock, the lock a running impsup (alone,
// exclusive) or impexec (shared among executors) holds while it runs, so
// that impsup status can tell whether it is running. It creates nothing.
func DaemonLock(y *yard.Yard, daemon string) string {
	return filepath.Join(Root(y), "."+daemon+".lock")
}

// Present holds runs/.<daemon>.lock shared, creating runs/ and the file,
// until the returned release: the mark of a running daemon that may run
// beside others of its kind.
func Present(y *yard.Yard, daemon string) (release func(), err error) {
	if _, err := MkRoot(y); err != nil {
		return nil, err
	}
	return store.Share(DaemonLock(y, daemon))
}

// DaemonUp reports whether a daemon holds runs/.<daemon>.lock, without
// creating anything.
func DaemonUp(y *yard.Yard, daemon string) (bool, error) {
	return store.Held(DaemonLock(y, daemon))
}
