package gateway

import (
	"cmp"
	"os"
	"path/filepath"
	"slices"
	"strings"
)

// A box must learn nothing of the host's layout from an error: not where
// the secrets are, not the owner's home, not the yard. Answers to clients
// name these places by role; the record and the log keep the paths.

type hiddenPath struct{ path, shown string }

// hiddenPaths lists the host paths an answer may not name, longest first
// so that a path inside another is replaced whole.
func hiddenPaths(cfg *Config) []hiddenPath {
	var hs []hiddenPath
	add := func(p, shown string) {
		if p == "" {
			return
		}
		p = filepath.Clean(p)
		if p == "/" || p == "." {
			return
		}
		hs = append(hs, hiddenPath{p, shown})
		if real, err := filepath.EvalSymlinks(p); err == nil && real != p {
			hs = append(hs, hiddenPath{real, shown})
		}
	}
	add(cfg.Root, "<yard>")
	add(cfg.Home, "<IMPYARD_HOME>")
	add(filepath.Dir(cfg.PolicyPath), "<policy directory>")
	add(filepath.Dir(cfg.DecisionsPath), "<yard>/runs")
	if home, err := os.UserHomeDir(); err == nil {
		add(home, "~")
	}
	slices.SortStableFunc(hs, func(a, b hiddenPath) int { return cmp.Compare(len(b.path), len(a.path)) })
	return hs
}

// conceal replaces every host path of hiddenPaths in s by its role.
func (g *Gateway) conceal(s string) string {
	for _, h := range g.hidden {
		s = strings.ReplaceAll(s, h.path, h.shown)
	}
	return s
}
