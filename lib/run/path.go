package run

import (
	"github.com/impyard/impyard/lib/store"
	"github.com/impyard/impyard/lib/yard"
)

// Root is runs/, one directory per run below it.
func Root(y *yard.Yard) string { return y.Path("runs") }

// MkRoot creates runs/ if needed and returns it.
func MkRoot(y *yard.Yard) (string, error) { return store.MkdirAll(y.Root, "runs") }
