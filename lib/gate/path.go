package gate

import "github.com/impyard/impyard/lib/yard"

// Dir is the gates directory of y: pending/ and resolved/ below it.
func Dir(y *yard.Yard) string { return y.Path("gates") }
