// Package yard is an opened yard: its root, reads that refuse symlinked
// directories below it, and the store directories and logs it opens for
// their owners (queue/<imp>/, gates/, journal/, runs/decisions.jsonl,
// policies/). Every other path into the yard is named by the package
// that owns the directory (see impyard(7) FILES), and every path into
// IMPYARD_HOME by lib/home. lib/store reads and writes them.
//
// A yard is a directory holding the marker .impyard-yard, which 'impsup
// init' writes last. Open refuses any other directory (ErrNotAYard)
// before anything is created in it, so a program pointed at the wrong
// place (a cron job without IMPYARD_ROOT, a typo) fails instead of
// building a second yard there. A yard made when the marker was called
// .impyard is still one: the first Open that may write it renames its
// marker.
package yard

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/impyard/impyard/lib/home"
	"github.com/impyard/impyard/lib/id"
	"github.com/impyard/impyard/lib/store"
)

// Yard is an opened yard root.
type Yard struct {
	Root string
}

// Marker is the file at the root that makes a directory a yard. Its name
// is not the default IMPYARD_HOME's (~/.impyard), so a home directory is
// never taken for a yard, nor its secrets for a marker.
const Marker = ".impyard-yard"

// OldMarker is what Marker was called before, when a home directory
// holding the default IMPYARD_HOME read as a yard with a broken marker.
// Only a regular file of this name is one.
const OldMarker = ".impyard"

// The marker's schema kind and major.
const (
	markerKind  = "yard"
	markerMajor = 1
)

// ErrNotAYard is Open's error for a directory without the marker, a
// missing directory, or a path that is not a directory.
var ErrNotAYard = errors.New("not a yard")

// Now is the clock the marker's created time comes from, replaceable in
// tests.
var Now = time.Now

// marker is the content of the marker file.
type marker struct {
	Schema  string `json:"schema"`
	Created string `json:"created"`
}

// Resolve names the yard root without looking at it: the flag value, else
// IMPYARD_ROOT, else the current directory, made absolute.
func Resolve(flagRoot string) (string, error) {
	root := flagRoot
	if root == "" {
		root = os.Getenv("IMPYARD_ROOT")
	}
	if root == "" {
		root = "."
	}
	return filepath.Abs(root)
}

// Open opens the yard named as Resolve names it. The root must be a
// directory holding the marker; anything else is an error wrapping
// ErrNotAYard, and nothing is created. A marker of another schema major
// is refused by name.
func Open(flagRoot string) (*Yard, error) {
	abs, err := Resolve(flagRoot)
	if err != nil {
		return nil, err
	}
	y := &Yard{Root: abs}
	marked, err := y.Marked()
	if err != nil {
		return nil, err
	}
	if !marked {
		return nil, fmt.Errorf("%w: %s (set IMPYARD_ROOT or run 'impsup init %s')", ErrNotAYard, abs, abs)
	}
	return y, nil
}

// Marked reports whether the root holds the marker, read as every yard
// file is read (no symlink followed, a regular file, a schema this
// impyard reads). A missing root, or one that is not a directory, has no
// marker. A regular file of the old name is the marker as well: it is
// renamed to the new name when the yard's lock can be taken, and taken
// as it is when not (a reader that may not write the yard).
func (y *Yard) Marked() (bool, error) {
	marked, err := y.read(Marker)
	if marked || err != nil {
		return marked, err
	}
	old, err := store.RegularIn(y.Root, OldMarker)
	if errors.Is(err, syscall.ENOTDIR) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	if !old {
		// Another program may have renamed the old marker between the
		// two looks: rename(2) leaves one of the names at every instant.
		return y.read(Marker)
	}
	marked, err = y.read(OldMarker)
	if err != nil {
		return false, err
	}
	if !marked {
		// Renamed since the look.
		return y.read(Marker)
	}
	y.rename()
	return true, nil
}

// read reports whether name at the root is a marker; missing, it is not.
func (y *Yard) read(name string) (bool, error) {
	data, err := store.ReadFileIn(y.Root, name)
	if errors.Is(err, fs.ErrNotExist) || errors.Is(err, syscall.ENOTDIR) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	if err := store.CheckSchema(y.Path(name), data, markerKind, markerMajor); err != nil {
		return false, err
	}
	return true, nil
}

// rename gives the old marker the new name, under the root's lock, so
// that of several programs opening the yard at once one renames it. A
// yard whose marker cannot be renamed (no right to its lock, a read-only
// file system) keeps the old marker, which every Open still reads, so
// its error changes nothing and is dropped.
func (y *Yard) rename() {
	d, err := y.Dir()
	if err != nil {
		return
	}
	_ = d.Update(func(tx *store.Tx) error {
		return tx.Rename(OldMarker, Marker)
	})
}

// Prepare makes root, a directory, for 'impsup init' to fill, creating it
// (and its parents) if needed; made says it did. The yard it returns has
// no marker until Mark: Open refuses it until then. A root that is not a
// directory is refused.
func Prepare(root string) (y *Yard, made bool, err error) {
	abs, err := filepath.Abs(root)
	if err != nil {
		return nil, false, err
	}
	fi, err := os.Stat(abs)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		// The root is synced into its parent, as every directory of the
		// yard is, so what init writes in it survives a power cut.
		if err := os.MkdirAll(filepath.Dir(abs), 0o750); err != nil {
			return nil, false, err
		}
		if _, err := store.Mkdir(abs, 0o750); err != nil {
			return nil, false, err
		}
		made = true
	case err != nil:
		return nil, false, err
	case !fi.IsDir():
		return nil, false, fmt.Errorf("%s: exists and is not a directory", abs)
	}
	return &Yard{Root: abs}, made, nil
}

// Mark writes the marker unless something is there, and reports whether
// it wrote it. Written last by 'impsup init', it is what makes every
// program accept the directory, so an init cut short leaves nothing they
// accept.
func (y *Yard) Mark() (bool, error) {
	b, err := store.Line(marker{
		Schema:  store.Schema(markerKind, markerMajor),
		Created: Now().UTC().Truncate(time.Second).Format(time.RFC3339),
	})
	if err != nil {
		return false, err
	}
	d, err := y.Dir()
	if err != nil {
		return false, err
	}
	return d.Create(Marker, b)
}

// Skeleton creates the directories the yard's programs work in from the
// start (queue/, gates/pending/, gates/resolved/, journal/, runs/,
// policies/) and returns those it made. imps/ is lib/config's; the other
// directories appear with their first file.
func (y *Yard) Skeleton() ([]string, error) {
	var made []string
	for _, rel := range [][]string{{"queue"}, {"gates", "pending"}, {"gates", "resolved"}, {"journal"}, {"runs"}, {"policies"}} {
		p, ok, err := y.Mkdir(rel...)
		if err != nil {
			return made, err
		}
		if ok {
			made = append(made, p)
		}
	}
	return made, nil
}

// CreatePolicy writes policies/gateway.json with data unless something is
// there; an owner's policy is never replaced.
func (y *Yard) CreatePolicy(data []byte) (bool, error) {
	d, err := y.Dir("policies")
	if err != nil {
		return false, err
	}
	return d.Create(filepath.Base(y.PolicyPath()), data)
}

// Mkdir creates the directory rel below the root as store.MkdirAll does,
// and reports whether it was not there before, for what 'impsup init'
// says it made.
func (y *Yard) Mkdir(rel ...string) (path string, made bool, err error) {
	r := filepath.Join(rel...)
	there, err := store.ExistsIn(y.Root, r)
	if err != nil {
		return "", false, err
	}
	path, err = store.MkdirAll(y.Root, r)
	return path, err == nil && !there, err
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
	dir, name, err := JournalIn(imp)
	if err != nil {
		return "", err
	}
	d, err := store.MkdirAll(y.Root, dir)
	if err != nil {
		return "", err
	}
	return filepath.Join(d, name), nil
}

// JournalIn is the imp's journal as its directory below the root and its
// name, for store.AppendLineIn.
func JournalIn(imp string) (dir, name string, err error) {
	if err := id.CheckName(imp); err != nil {
		return "", "", err
	}
	return filepath.Join("journal", imp), "events.jsonl", nil
}

// The audit log, runs/decisions.jsonl, as its directory below the root
// and its name.
const (
	DecisionsDir  = "runs"
	DecisionsName = "decisions.jsonl"
)

// Decisions is runs/decisions.jsonl, the audit log.
func (y *Yard) Decisions() string { return y.Path(DecisionsDir, DecisionsName) }

// DecisionsPath is Decisions, creating runs/.
func (y *Yard) DecisionsPath() (string, error) {
	if _, err := store.MkdirAll(y.Root, DecisionsDir); err != nil {
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
	d, err := store.OpenIn(y.Root, top)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, []error{err}
	}
	defer d.Close()
	return y.ImpsIn(d, top)
}

// ImpsIn is Imps over top, already opened as d: a caller that goes on to
// look inside the imps' directories does so through d, without walking
// from the root again.
func (y *Yard) ImpsIn(d *store.Opened, top string) (imps []string, bad []error) {
	entries, err := d.ReadDir()
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

// IDs lists the ids of the given kind that entries of the yard directory
// rel are named for, suffix (".json", or "" for a directory) taken off;
// anything else there is passed over. A missing directory has none.
func (y *Yard) IDs(kind, suffix string, rel ...string) ([]string, error) {
	// Names, not entries: a directory of 100,000 records costs an entry
	// each to describe and a sort through an interface to order, where
	// the names alone sort as strings, in the same order.
	d, err := store.OpenIn(y.Root, filepath.Join(rel...))
	if store.IsNotExist(err) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	defer d.Close()
	names, err := d.Names()
	if err != nil {
		return nil, err
	}
	slices.Sort(names)
	var ids []string
	for _, n := range names {
		if n, ok := strings.CutSuffix(n, suffix); ok && id.KindOf(n) == kind {
			ids = append(ids, n)
		}
	}
	return ids, nil
}
