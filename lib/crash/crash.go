//go:build !impyard_crash

// Package crash marks the named points where a process may die mid-write
// (after-temp-write, after-rename, mid-append, ...). In a normal build
// a point compiles to nothing. Built with the impyard_crash tag, the process
// SIGKILLs itself at the point named by IMPYARD_CRASH, so tests can prove that
// a crash at every such point leaves the yard readable and consistent.
package crash

// Enabled reports whether this binary was built with crash points.
const Enabled = false

// Point is where a process may die; it does nothing in this build.
func Point(name string) {}
