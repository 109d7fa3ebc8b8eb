package transition

import (
	"fmt"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"

	"github.com/impyard/impyard/lib/id"
	"github.com/impyard/impyard/lib/store"
	"github.com/impyard/impyard/lib/yard"
)

// Source is one directory of record files for Each: rel below the yard
// root, which of its ids to read (nil: all), and how to parse one. Parse
// keeps nothing of b, which holds the next file read once it returns
// (store.Decode copies what it decodes).
//
// A daemon that lists the same directory pass after pass may give Known
// and Settled: a record Settled says the daemon is done with is remembered
// in Known by its file's identity, and later listings pass over that file,
// without reading it, for as long as it is the same file (see
// store.FileID). Settled runs on the reading goroutines.
type Source[R any] struct {
	Rel     string
	Want    func(id string) bool
	Parse   func(path string, b []byte) (R, error)
	Known   *Known
	Settled func(R) bool
}

// Known remembers record files a daemon is done with, by directory and
// name, with the identity each had when its record was read. Each keeps
// it: a name gone from its directory is forgotten at the next listing of
// that directory. One Known is used by one listing at a time.
type Known struct {
	dirs map[string]map[string]*knownFile
}

// knownFile is a file Known remembers, and the last listing that found it
// the same file (each listing has a token of its own).
type knownFile struct {
	id   store.FileID
	seen *int
}

// NewKnown returns an empty Known.
func NewKnown() *Known { return &Known{dirs: map[string]map[string]*knownFile{}} }

// batchSize is how many records one worker reads at a time: large enough
// that handing batches over costs nothing next to reading them, small
// enough that the batches in flight stay a few hundred KiB; readAhead is
// how many batches may be read ahead of the one the caller is on.
const (
	batchSize = 256
	readAhead = 4
)

// Each calls fn with the records of srcs, <id>.json files, in id order,
// which is creation order, reading and parsing them on as many goroutines
// as Go runs at once while fn works, so a listing of any size holds a few
// batches of records, never all of them.
//
// Each directory is opened once, refused if it or a directory on the way
// is a symlink, and every file is read relative to it; a missing directory
// holds nothing. Dot-files (the lock, .tmp, markers) are passed over; a
// file not named for an id of idKind is reported and not read, nor is one
// its source's Want declines (Want is called for every id, source by
// source in the order given, before any file is read). A file that cannot
// be read or parsed is reported in bad, by name, and the rest are still
// passed to fn. An error from fn stops Each and is returned.
func Each[R any](y *yard.Yard, kind, idKind string, srcs []Source[R], fn func(R) error) (bad []error, err error) {
	type entry struct {
		name  string // <id>.json
		src   int
		known *knownFile // what the source's Known has of it, if anything
	}
	// Known files this listing finds the same or settles are stamped with
	// its token; the others of a directory it listed are forgotten at its
	// end.
	listing := new(int)
	dirs := make([]*store.Opened, len(srcs))
	defer func() {
		for _, d := range dirs {
			if d != nil {
				d.Close()
			}
		}
	}()
	var entries []entry
	paths := make([]string, len(srcs)) // each directory's path and a slash
	for i, src := range srcs {
		paths[i] = filepath.Join(y.Root, src.Rel) + "/"
		d, err := store.OpenIn(y.Root, src.Rel)
		if store.IsNotExist(err) {
			continue
		}
		if err != nil {
			bad = append(bad, err)
			continue
		}
		dirs[i] = d
		if src.Known != nil && src.Known.dirs[src.Rel] == nil {
			src.Known.dirs[src.Rel] = map[string]*knownFile{}
		}
		names, err := d.Names()
		if err != nil {
			bad = append(bad, err)
			continue
		}
		for _, n := range names {
			if strings.HasPrefix(n, ".") || EditorLeftover(n) {
				continue
			}
			rid := strings.TrimSuffix(n, ".json")
			if !strings.HasSuffix(n, ".json") || id.Check(idKind, rid) != nil {
				bad = append(bad, fmt.Errorf("%s: not a %s file name; skipped", filepath.Join(y.Root, src.Rel, n), kind))
				continue
			}
			if src.Want != nil && !src.Want(rid) {
				continue
			}
			e := entry{name: n, src: i}
			if src.Known != nil {
				e.known = src.Known.dirs[src.Rel][rid]
			}
			entries = append(entries, e)
		}
	}
	// Sorted before any file is read, on one core: slices.SortFunc
	// compares the names directly where sort.Slice swaps through
	// reflection.
	slices.SortFunc(entries, func(a, b entry) int { return strings.Compare(a.name, b.name) })

	type item struct {
		rec     R
		err     error
		same    bool          // a file Known has, still the same file: not read
		settled *store.FileID // the identity of a record Settled took
	}
	type batch struct {
		entries []entry
		items   []item
		done    chan struct{}
	}
	// buf is the reader's, reused from file to file: Parse keeps nothing
	// of the bytes it is given.
	read := func(b *batch, buf []byte) []byte {
		defer close(b.done)
		b.items = make([]item, len(b.entries))
		for k, e := range b.entries {
			it := &b.items[k]
			src := srcs[e.src]
			if e.known != nil {
				if now, err := dirs[e.src].ID(e.name); err == nil && now == e.known.id {
					it.same = true
					continue
				}
			}
			data, fid, err := dirs[e.src].ReadFileInto(e.name, buf)
			if err == nil {
				buf = data
				it.rec, err = src.Parse(paths[e.src]+e.name, data)
			}
			it.err = err
			if err == nil && src.Known != nil && src.Settled != nil && src.Settled(it.rec) {
				it.settled = &fid
			}
		}
		return buf
	}
	work := make(chan *batch)
	order := make(chan *batch, readAhead)
	stop := make(chan struct{})
	var readers sync.WaitGroup
	// The directories close (deferred above) only after every reader is
	// done with them, however Each returns.
	defer readers.Wait()
	defer close(stop)
	for range runtime.GOMAXPROCS(0) {
		readers.Go(func() {
			var buf []byte
			for b := range work {
				buf = read(b, buf)
			}
		})
	}
	readers.Go(func() {
		defer close(order)
		defer close(work)
		for chunk := range slices.Chunk(entries, batchSize) {
			b := &batch{entries: chunk, done: make(chan struct{})}
			select {
			case order <- b:
			case <-stop:
				return
			}
			select {
			case work <- b:
			case <-stop:
				return
			}
		}
	})
	for b := range order {
		<-b.done
		for k, it := range b.items {
			e := b.entries[k]
			if it.same {
				e.known.seen = listing
				continue
			}
			if it.err != nil {
				bad = append(bad, it.err)
				continue
			}
			if err := fn(it.rec); err != nil {
				return bad, err
			}
			// Remembered only once fn has had the record: a listing fn
			// stopped reads the rest again next time.
			if it.settled != nil {
				src := srcs[e.src]
				src.Known.dirs[src.Rel][strings.TrimSuffix(e.name, ".json")] = &knownFile{id: *it.settled, seen: listing}
			}
		}
	}
	for i, src := range srcs {
		if dirs[i] == nil || src.Known == nil {
			continue
		}
		m := src.Known.dirs[src.Rel]
		for rid, kf := range m {
			if kf.seen != listing {
				delete(m, rid)
			}
		}
	}
	return bad, nil
}

// EditorLeftover reports whether name is a file an editor leaves beside
// the one it edits, a backup (name~) or an autosave (#name#); vim's
// swap files begin with a dot, as every hidden file passed over does.
// An owner who opened a gate in an editor has done nothing wrong, so a
// listing passes over them without a warning.
func EditorLeftover(name string) bool {
	return strings.HasSuffix(name, "~") || len(name) > 1 && strings.HasPrefix(name, "#") && strings.HasSuffix(name, "#")
}
