package gate

import (
	"path/filepath"

	"github.com/impyard/impyard/lib/id"
	"github.com/impyard/impyard/lib/store"
	"github.com/impyard/impyard/lib/yard"
)

// Dir is the gates directory of y: pending/ and resolved/ below it.
func Dir(y *yard.Yard) string { return y.Path("gates") }

// ExecLock is gates/.exec/<id>.lock, creating gates/.exec/: the lock an
// executor holds on a gate while it executes it, so two executors never
// send the same gate at once. It is separate from the gates lock, which
// is held only for a transition.
func ExecLock(y *yard.Yard, gateID string) (string, error) {
	if err := id.Check(id.Gate, gateID); err != nil {
		return "", err
	}
	d, err := store.MkdirAll(y.Root, filepath.Join("gates", ".exec"))
	if err != nil {
		return "", err
	}
	return filepath.Join(d, gateID+".lock"), nil
}

// EarnDir is gates/.earn/, whose lock makes counting an imp's approvals
// and filing the trust-promote gate they earn one transaction (lib/earn).
func EarnDir(y *yard.Yard) (*store.Dir, error) { return y.Dir("gates", ".earn") }

// Resolve returns the gate id that s names, whole or by a unique prefix
// (see id.Resolve), among the gates pending and decided alike.
func Resolve(y *yard.Yard, s string) (string, error) {
	return id.Resolve(id.Gate, s, Dir(y), func() ([]string, error) { return IDs(y) })
}

// IDs lists the ids of the gates pending and decided alike, those a
// prefix may name (see id.Shortest).
func IDs(y *yard.Yard) ([]string, error) {
	p, err := y.IDs(id.Gate, ".json", "gates", pending)
	if err != nil {
		return nil, err
	}
	r, err := y.IDs(id.Gate, ".json", "gates", resolved)
	return append(p, r...), err
}
