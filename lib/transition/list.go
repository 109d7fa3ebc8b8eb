package transition

import (
	"fmt"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
	"sync"

	"github.com/impyard/impyard/lib/id"
	"github.com/impyard/impyard/lib/store"
	"github.com/impyard/impyard/lib/yard"
)

// Source is one directory of record files for Each: rel below the yard
// root, which of its ids to read (nil: all), and how to parse one.
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
	gen  uint64 // the listing under way
}

// knownFile is a file Known remembers, and the last listing that found it
// the same file.
type knownFile struct {
	id  store.FileID
	gen uint64
}

// NewKnown returns an empty Known.
func NewKnown() *Known { return &Known{dirs: map[string]map[string]*knownFile{}} }

// batchSize is how many records one worker reads at a time: large enough
// that handing batches over costs nothing next to reading them, small
// enough that the batches in flight stay a few hundred KiB.
const batchSize = 256

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
	idOf := func(e entry) string { return e.name[:len(e.name)-len(".json")] }
	// Known entries this listing finds the same or settles get its
	// generation; those it does not, when it lists their whole directory,
	// are forgotten at its end.
	gens := make([]uint64, len(srcs))
	seen := make([]int, len(srcs)) // how many entries of each Known directory got its gen
	begun := map[*Known]bool{}
	for i, src := range srcs {
		if src.Known != nil {
			if !begun[src.Known] {
				begun[src.Known] = true
				src.Known.gen++
			}
			gens[i] = src.Known.gen
		}
	}
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
			if strings.HasPrefix(n, ".") {
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
	sort.Slice(entries, func(i, j int) bool { return entries[i].name < entries[j].name })

	type batch struct {
		from, to int
		recs     []R
		errs     []error
		settled  []*store.FileID // the identity of each record Settled took
		same     []bool          // files Known has that are still the same file: not read
		done     chan struct{}
	}
	read := func(b *batch) {
		defer close(b.done)
		b.recs = make([]R, b.to-b.from)
		b.errs = make([]error, b.to-b.from)
		b.settled = make([]*store.FileID, b.to-b.from)
		b.same = make([]bool, b.to-b.from)
		for k := range b.recs {
			e := entries[b.from+k]
			src := srcs[e.src]
			if e.known != nil {
				if now, err := dirs[e.src].ID(e.name); err == nil && now == e.known.id {
					b.same[k] = true
					continue
				}
			}
			data, fid, err := dirs[e.src].ReadFileID(e.name)
			if err == nil {
				b.recs[k], err = src.Parse(paths[e.src]+e.name, data)
			}
			b.errs[k] = err
			if err == nil && src.Known != nil && src.Settled != nil && src.Settled(b.recs[k]) {
				b.settled[k] = &fid
			}
		}
	}
	work := make(chan *batch)
	order := make(chan *batch, 2*runtime.GOMAXPROCS(0))
	stop := make(chan struct{})
	var readers sync.WaitGroup
	// The directories close (deferred above) only after every reader is
	// done with them, however Each returns.
	defer readers.Wait()
	defer close(stop)
	for range runtime.GOMAXPROCS(0) {
		readers.Go(func() {
			for b := range work {
				read(b)
			}
		})
	}
	readers.Go(func() {
		defer close(order)
		defer close(work)
		for from := 0; from < len(entries); from += batchSize {
			b := &batch{from: from, to: min(from+batchSize, len(entries)), done: make(chan struct{})}
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
		for k, r := range b.recs {
			e := entries[b.from+k]
			if b.same[k] {
				e.known.gen = gens[e.src]
				seen[e.src]++
				continue
			}
			if b.errs[k] != nil {
				bad = append(bad, b.errs[k])
				continue
			}
			if err := fn(r); err != nil {
				return bad, err
			}
			// Remembered only once fn has had the record: a listing fn
			// stopped reads the rest again next time.
			if fid := b.settled[k]; fid != nil {
				src := srcs[e.src]
				src.Known.dirs[src.Rel][idOf(e)] = &knownFile{id: *fid, gen: gens[e.src]}
				seen[e.src]++
			}
		}
	}
	for i, src := range srcs {
		if dirs[i] == nil || src.Known == nil {
			continue
		}
		if m := src.Known.dirs[src.Rel]; len(m) != seen[i] {
			for rid, kf := range m {
				if kf.gen != gens[i] {
					delete(m, rid)
				}
			}
		}
	}
	return bad, nil
}

// Sort orders records by id, which is creation order.
func Sort[R Record](recs []R) {
	sort.Slice(recs, func(i, j int) bool {
		return recs[i].Timeline().ID < recs[j].Timeline().ID
	})
}
