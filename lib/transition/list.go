package transition

import (
	"fmt"
	"path/filepath"
	"sort"
	"strings"

	"github.com/impyard/impyard/lib/id"
	"github.com/impyard/impyard/lib/store"
	"github.com/impyard/impyard/lib/yard"
)

// Scan reads the record files, <id>.json, of the directory rel below the
// yard root. The directory is opened once, refused if it or a directory on
// the way is a symlink, and every file is read relative to it; a missing
// directory holds nothing. Dot-files (the lock, .tmp, markers) are passed
// over; a file not named for an id of idKind, or one want declines, is not
// read. A file that cannot be read or parsed is returned in bad, by name,
// and the rest are still returned.
func Scan[R any](y *yard.Yard, rel, kind, idKind string, want func(id string) bool, parse func(path string, b []byte) (R, error)) (recs []R, bad []error) {
	dir, err := store.OpenIn(y.Root, rel)
	if store.IsNotExist(err) {
		return nil, nil
	}
	if err != nil {
		return nil, []error{err}
	}
	defer dir.Close()
	entries, err := dir.ReadDir()
	if err != nil {
		return nil, []error{err}
	}
	for _, e := range entries {
		n := e.Name()
		if strings.HasPrefix(n, ".") {
			continue
		}
		p := filepath.Join(y.Root, rel, n)
		rid := strings.TrimSuffix(n, ".json")
		if !strings.HasSuffix(n, ".json") || id.Check(idKind, rid) != nil {
			bad = append(bad, fmt.Errorf("%s: not a %s file name; skipped", p, kind))
			continue
		}
		if want != nil && !want(rid) {
			continue
		}
		b, err := dir.ReadFile(n)
		if err != nil {
			bad = append(bad, err)
			continue
		}
		r, err := parse(p, b)
		if err != nil {
			bad = append(bad, err)
			continue
		}
		recs = append(recs, r)
	}
	return recs, bad
}

// Sort orders records by id, which is creation order.
func Sort[R Record](recs []R) {
	sort.Slice(recs, func(i, j int) bool {
		return recs[i].Timeline().ID < recs[j].Timeline().ID
	})
}
