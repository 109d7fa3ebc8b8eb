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
type Source[R any] struct {
	Rel   string
	Want  func(id string) bool
	Parse func(path string, b []byte) (R, error)
}

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
		id  string
		src int
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
			if src.Want == nil || src.Want(rid) {
				entries = append(entries, entry{rid, i})
			}
		}
	}
	sort.Slice(entries, func(i, j int) bool { return entries[i].id < entries[j].id })

	type batch struct {
		from, to int
		recs     []R
		errs     []error
		done     chan struct{}
	}
	read := func(b *batch) {
		defer close(b.done)
		b.recs = make([]R, b.to-b.from)
		b.errs = make([]error, b.to-b.from)
		for k := range b.recs {
			e := entries[b.from+k]
			name := e.id + ".json"
			data, err := dirs[e.src].ReadFile(name)
			if err == nil {
				b.recs[k], err = srcs[e.src].Parse(paths[e.src]+name, data)
			}
			b.errs[k] = err
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
			if b.errs[k] != nil {
				bad = append(bad, b.errs[k])
				continue
			}
			if err := fn(r); err != nil {
				return bad, err
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
