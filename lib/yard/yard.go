// Package yard is an opened yard: its root, reads that refuse symlinked
// directories below it, and the store directories and logs it opens for
// their owners (queue/<imp>/, gates/, journal/, runs/decisions.jsonl,
// policies/). Every other path into the yard is named by the package
// that owns the directory (see impyard(7) FILES), and every path into
// IMPYARD_HOME by lib/home. lib/store reads and writes them.
package yard

import (
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/impyard/impyard/lib/home"
	"github.com/impyard/impyard/lib/id"
	"github.com/impyard/impyard/lib/store"
)

// Yard is an opened yard root.
type Yard struct {
	Root string
}

// Open resolves the yard root: the flag value, else IMPYARD_ROOT, else the
// current directory. The root must exist and be a directory.
func Open(flagRoot string) (*Yard, error) {
	root := flagRoot
	if root == "" {
		root = os.Getenv("IMPYARD_ROOT")
	}
	if root == "" {
		root = "."
	}
	abs, err := filepath.Abs(root)
	if err != nil {
		return nil, err
	}
	fi, err := os.Stat(abs)
	if err != nil {
		return nil, fmt.Errorf("yard %s: %w", abs, err)
	}
	if !fi.IsDir() {
		return nil, fmt.Errorf("yard %s: not a directory", abs)
	}
	return &Yard{Root: abs}, nil
}

// Home is home.Resolve as a plain string, for callers that keep one.
func Home() (string, error) {
	h, err := home.Resolve()
	return string(h), err
}

// Path joins rel onto the root without creating anything.
func (y *Yard) Path(rel ...string) string {
	return filepath.Join(append([]string{y.Root}, rel...)...)
}

// Dir opens (creating it if needed) the store directory rel.
func (y *Yard) Dir(rel ...string) (*store.Dir, error) {
	return store.OpenDir(y.Root, filepath.Join(rel...))
}

// QueueDir is queue/<imp>, one lock domain per imp.
func (y *Yard) QueueDir(imp string) (*store.Dir, error) {
	if err := id.CheckName(imp); err != nil {
		return nil, err
	}
	return y.Dir("queue", imp)
}

// GatesDir is gates/, one lock domain for pending/ and resolved/ so moving a
// gate between them is a single transaction.
func (y *Yard) GatesDir() (*store.Dir, error) { return y.Dir("gates") }

// JournalPath is journal/<imp>/events.jsonl, creating its directory.
func (y *Yard) JournalPath(imp string) (string, error) {
	if err := id.CheckName(imp); err != nil {
		return "", err
	}
	d, err := store.MkdirAll(y.Root, filepath.Join("journal", imp))
	if err != nil {
		return "", err
	}
	return filepath.Join(d, "events.jsonl"), nil
}

// Decisions is runs/decisions.jsonl, the audit log.
func (y *Yard) Decisions() string { return y.Path("runs", "decisions.jsonl") }

// DecisionsPath is Decisions, creating runs/.
func (y *Yard) DecisionsPath() (string, error) {
	if _, err := store.MkdirAll(y.Root, "runs"); err != nil {
		return "", err
	}
	return y.Decisions(), nil
}

// PolicyPath is policies/gateway.json.
func (y *Yard) PolicyPath() string { return y.Path("policies", "gateway.json") }

// ReadFile reads the yard file at path, which must lie below the root,
// refusing it when any directory on the way below the root is a symlink
// (see store.ReadFileIn).
func (y *Yard) ReadFile(path string) ([]byte, error) {
	rel, err := store.Below(y.Root, path)
	if err != nil {
		return nil, err
	}
	return store.ReadFileIn(y.Root, rel)
}

// ReadDir lists the yard directory rel, refusing it when it or a directory
// on the way is a symlink; a missing directory has no entries.
func (y *Yard) ReadDir(rel ...string) ([]fs.DirEntry, error) {
	return store.ReadDirIn(y.Root, filepath.Join(rel...))
}

// Exists reports whether path, below the root, names anything, refusing a
// symlinked directory on the way.
func (y *Yard) Exists(path string) (bool, error) {
	rel, err := store.Below(y.Root, path)
	if err != nil {
		return false, err
	}
	return store.ExistsIn(y.Root, rel)
}

// Imps lists the names of the directories under a top-level yard directory
// such as queue/ or journal/; a missing directory has none. Entries that are
// not valid imp names or not plain directories are returned in bad.
func (y *Yard) Imps(top string) (imps []string, bad []error) {
	entries, err := y.ReadDir(top)
	if err != nil {
		return nil, []error{err}
	}
	for _, e := range entries {
		if e.Name()[0] == '.' {
			continue
		}
		p := y.Path(top, e.Name())
		if err := id.CheckName(e.Name()); err != nil {
			bad = append(bad, fmt.Errorf("%s: %w", p, err))
			continue
		}
		if e.Type()&os.ModeSymlink != 0 || !e.IsDir() {
			bad = append(bad, fmt.Errorf("%s: not a plain directory; skipped", p))
			continue
		}
		imps = append(imps, e.Name())
	}
	return imps, bad
}
