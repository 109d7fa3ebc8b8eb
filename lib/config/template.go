package config

import (
	_ "embed"
	"path/filepath"

	"github.com/impyard/impyard/lib/yard"
)

// Template is the org.toml a new yard starts with: every section this
// package reads, its settings commented out, showing each default.
// Loaded as it is, it is the default configuration.
//
//go:embed org-template.toml
var Template []byte

// CreateOrg writes Template as the yard's org.toml unless something is
// there, and reports whether it wrote it; an owner's file is never
// replaced.
func CreateOrg(y *yard.Yard) (bool, error) {
	d, err := y.Dir()
	if err != nil {
		return false, err
	}
	return d.Create(filepath.Base(OrgPath(y)), Template)
}

// MkImps creates imps/, where each imp's folder goes, and reports
// whether it made it.
func MkImps(y *yard.Yard) (string, bool, error) { return y.Mkdir("imps") }
