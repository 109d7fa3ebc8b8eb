// Package memory owns what an imp knows beyond its journal: its charter
// (imps/<imp>/charter.md, the owner's standing instructions) and its core
// memory (imps/<imp>/memory.md, what the imp learned and the owner kept).
// Both are plain markdown the owner edits in any editor, and both go
// whole into every brief; neither is ever mounted into a box.
//
// Core memory grows only through approved memory-promote gates: Apply, run
// by the trusted-side executor of kind "memory", appends the entry (or
// replaces the entry it names) between marker lines that carry its id, its
// gate and its time:
//
//	<!-- impyard:entry e-… gate g-… 2026-12-01T02:30:00Z -->
//	the entry's text
//	<!-- impyard:end e-… -->
//
// Text outside the markers is the owner's and is kept as it is. A
// proposed text may hold no marker line, so an imp cannot forge an entry,
// end its own early or pass its words off as the owner's.
//
// A brief carries each file whole or not at all: a file over MaxBytes
// stops the run with a reason naming it (ErrTooLarge), and an append that
// would take memory.md over it fails its gate, writing nothing.
package memory

import (
	"errors"
	"fmt"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"time"
	"unicode"

	"github.com/impyard/impyard/lib/config"
	"github.com/impyard/impyard/lib/id"
	"github.com/impyard/impyard/lib/intent"
	"github.com/impyard/impyard/lib/store"
	"github.com/impyard/impyard/lib/strictjson"
	"github.com/impyard/impyard/lib/yard"
)

// MaxBytes caps charter.md and memory.md each: a brief includes both
// whole, never cut.
const MaxBytes = 64 << 10

// Owner is the provenance of text the owner wrote outside any marker.
const Owner = "owner"

var (
	// ErrTooLarge is a charter or memory over MaxBytes, or an entry that
	// would take memory.md over it.
	ErrTooLarge = errors.New("over the size cap")
	// ErrMalformed is a memory.md whose markers do not pair up.
	ErrMalformed = errors.New("malformed memory marker")
	// ErrNoEntry is a replaces that names no entry of memory.md.
	ErrNoEntry = errors.New("names no entry")
	// ErrRefused is a proposed entry that cannot be kept as proposed.
	ErrRefused = errors.New("memory-promote refused")
)

// Entry is one entry of memory.md: a promoted one with its id, gate and
// time, or a block of the owner's own text (By is Owner, no id).
type Entry struct {
	ID   string     `json:"id,omitempty"`
	Gate string     `json:"gate,omitempty"`
	At   *time.Time `json:"at,omitempty"`
	By   string     `json:"by"` // "gate" or Owner
	Text string     `json:"text"`
	Line int        `json:"line"` // first line of the entry, from 1

	// start and end are the entry's lines, markers included: [start, end).
	start, end int
}

// Provenance is the By of a promoted entry.
const Provenance = "gate"

const prefix = "<!-- impyard:"

// The entry lines' patterns, compiled when first used rather than at
// package init, which every impq command paid for at start.
var (
	beginLine = sync.OnceValue(func() *regexp.Regexp {
		return regexp.MustCompile(`^<!-- impyard:entry (\S+) gate (\S+) (\S+) -->$`)
	})
	endLine = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^<!-- impyard:end (\S+) -->$`) })
)

// marker reports a line that is, or pretends to be, one of ours.
func marker(line string) bool { return strings.HasPrefix(strings.TrimSpace(line), prefix) }

// forged reports a proposed line that could pass for a marker to a
// reader of the brief: the prefix anywhere in it once invisible format
// characters (a zero-width space, a byte-order mark) are taken out, so
// that what the model sees as an entry's end cannot be smuggled in.
func forged(line string) bool {
	return strings.Contains(strings.Map(func(r rune) rune {
		if unicode.Is(unicode.Cf, r) {
			return -1
		}
		return r
	}, line), prefix)
}

// Parse splits memory.md's content b into its entries, in file order. A
// marker that does not parse, an entry inside another, an end without its
// entry, an entry never ended or an id used twice is an error naming
// path and line, wrapping ErrMalformed.
func Parse(path string, b []byte) ([]Entry, error) {
	lines := split(string(b))
	var out []Entry
	var open *Entry
	ownerFrom := 0
	seen := map[string]bool{}
	bad := func(n int, format string, a ...any) error {
		return fmt.Errorf("%s:%d: %w: %s", path, n+1, ErrMalformed, fmt.Sprintf(format, a...))
	}
	flushOwner := func(to int) {
		text := strings.Trim(strings.Join(lines[ownerFrom:to], "\n"), "\n")
		if strings.TrimSpace(text) == "" {
			return
		}
		first := ownerFrom
		for strings.TrimSpace(lines[first]) == "" {
			first++
		}
		out = append(out, Entry{By: Owner, Text: text, Line: first + 1, start: ownerFrom, end: to})
	}
	for n, line := range lines {
		if !marker(line) {
			continue
		}
		t := strings.TrimSpace(line)
		if m := beginLine().FindStringSubmatch(t); m != nil {
			if open != nil {
				return nil, bad(n, "entry %s begins inside entry %s (line %d)", m[1], open.ID, open.Line)
			}
			if err := id.Check(id.Entry, m[1]); err != nil {
				return nil, bad(n, "%v", err)
			}
			if err := id.Check(id.Gate, m[2]); err != nil {
				return nil, bad(n, "%v", err)
			}
			at, err := time.Parse(time.RFC3339, m[3])
			if err != nil {
				return nil, bad(n, "time %q is not RFC 3339", m[3])
			}
			if seen[m[1]] {
				return nil, bad(n, "entry %s appears twice", m[1])
			}
			seen[m[1]] = true
			flushOwner(n)
			at = at.UTC()
			open = &Entry{ID: m[1], Gate: m[2], At: &at, By: Provenance, Line: n + 1, start: n}
			continue
		}
		if m := endLine().FindStringSubmatch(t); m != nil {
			if open == nil || open.ID != m[1] {
				return nil, bad(n, "end of entry %s, which is not the one open here", m[1])
			}
			open.Text = strings.Join(lines[open.start+1:n], "\n")
			open.end = n + 1
			out = append(out, *open)
			open, ownerFrom = nil, n+1
			continue
		}
		return nil, bad(n, "a line beginning %q that is neither an entry nor an end marker", prefix)
	}
	if open != nil {
		return nil, bad(open.Line-1, "entry %s is never ended (<!-- impyard:end %s -->)", open.ID, open.ID)
	}
	flushOwner(len(lines))
	return out, nil
}

// split cuts s into lines without their newlines; a final newline ends the
// last line rather than starting an empty one.
func split(s string) []string {
	if s == "" {
		return nil
	}
	return strings.Split(strings.TrimSuffix(s, "\n"), "\n")
}

// Entries reads the imp's memory.md and parses it; a missing file has no
// entries.
func Entries(y *yard.Yard, imp string) ([]Entry, error) {
	if err := id.CheckName(imp); err != nil {
		return nil, err
	}
	p := config.MemoryPath(y, imp)
	b, err := y.ReadFile(p)
	if store.IsNotExist(err) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	return Parse(p, b)
}

// Brief is what a brief carries of an imp beyond its journal: its charter
// and its memory, each the whole file ("" when there is none).
type Brief struct {
	Charter string
	Memory  string
}

// Load reads the imp's charter.md and memory.md whole for its brief. A
// file over MaxBytes is an error wrapping ErrTooLarge that names it and its
// size: the run does not start rather than brief the imp with half of
// what its owner wrote.
func Load(y *yard.Yard, imp string) (Brief, error) {
	var b Brief
	if err := id.CheckName(imp); err != nil {
		return b, err
	}
	for _, f := range []struct {
		path string
		to   *string
	}{{config.CharterPath(y, imp), &b.Charter}, {config.MemoryPath(y, imp), &b.Memory}} {
		data, err := y.ReadFile(f.path)
		if store.IsNotExist(err) {
			continue
		}
		if err != nil {
			return Brief{}, err
		}
		if err := CheckSize(f.path, len(data)); err != nil {
			return Brief{}, err
		}
		*f.to = string(data)
	}
	return b, nil
}

// CheckSize says, for a file of size bytes at path, whether it fits a
// brief.
func CheckSize(path string, size int) error {
	if size > MaxBytes {
		return fmt.Errorf("%s is %d bytes, %w of %d bytes a brief carries whole: trim it", path, size, ErrTooLarge, MaxBytes)
	}
	return nil
}

// Check is the door's check of a proposed entry for imp, after its fields
// were typed: it must have text, hold no marker line, a replaces must name
// an entry there now, and memory.md with it kept must stay within
// MaxBytes. The error wraps ErrRefused (and ErrNoEntry for a replaces that
// names none, ErrTooLarge for an entry memory.md has no room for) and
// names memory.md below the yard, since the box is told it.
func Check(y *yard.Yard, imp string, payload []byte) error {
	m, err := decode(payload)
	if err != nil {
		return err
	}
	if err := id.CheckName(imp); err != nil {
		return err
	}
	p := config.MemoryPath(y, imp)
	rel, err := filepath.Rel(y.Root, p)
	if err != nil {
		return err
	}
	b, err := y.ReadFile(p)
	if err != nil && !store.IsNotExist(err) {
		return fmt.Errorf("%w: %s cannot be read", ErrRefused, rel)
	}
	entries, err := Parse(rel, b)
	if err != nil {
		return fmt.Errorf("%w: %v", ErrRefused, err)
	}
	if _, ok := find(entries, m.Replaces); m.Replaces != "" && !ok {
		return fmt.Errorf("%w: replaces %s, which %w in %s", ErrRefused, m.Replaces, ErrNoEntry, rel)
	}
	// As the entry would be kept now, under ids and a time of the same
	// length as its own: what memory.md holds may still change before
	// approval, and Apply checks again.
	if _, err := compose(b, entries, m, id.New(id.Entry), id.New(id.Gate), time.Now()); err != nil {
		return fmt.Errorf("%w: %s: %w", ErrRefused, rel, err)
	}
	return nil
}

func decode(payload []byte) (intent.Memory, error) {
	var m intent.Memory
	if err := strictjson.Unmarshal(payload, &m); err != nil {
		return m, fmt.Errorf("%w: payload: %v", ErrRefused, err)
	}
	switch {
	case strings.TrimSpace(m.Text) == "":
		return m, fmt.Errorf("%w: text is empty", ErrRefused)
	case len(m.Text) > MaxBytes:
		return m, fmt.Errorf("%w: text is %d bytes, %w of %d bytes for memory.md", ErrRefused, len(m.Text), ErrTooLarge, MaxBytes)
	}
	for n, line := range split(m.Text) {
		if forged(line) {
			return m, fmt.Errorf("%w: text line %d begins %q, which only impyard writes", ErrRefused, n+1, prefix)
		}
	}
	if m.Replaces != "" {
		if err := id.Check(id.Entry, m.Replaces); err != nil {
			return m, fmt.Errorf("%w: replaces: %v", ErrRefused, err)
		}
	}
	return m, nil
}

func find(entries []Entry, entryID string) (Entry, bool) {
	for _, e := range entries {
		if e.ID == entryID {
			return e, true
		}
	}
	return Entry{}, false
}

// Apply keeps the approved entry of gate gateID in imp's memory.md, under
// the imp directory's lock, in one atomic write: appended at the end, or
// in the place of the entry its replaces names. It returns the new entry's
// id and what it did. An entry of the same gate already there means it was
// applied before (a resumed execution) and changes nothing. A replaces
// that names no entry, a memory.md that does not parse, or a result over
// MaxBytes is an error and nothing is written.
func Apply(y *yard.Yard, imp, gateID string, payload []byte, now time.Time) (entryID, detail string, err error) {
	if err := id.Check(id.Gate, gateID); err != nil {
		return "", "", err
	}
	m, err := decode(payload)
	if err != nil {
		return "", "", err
	}
	d, err := config.ImpDir(y, imp)
	if err != nil {
		return "", "", err
	}
	p := config.MemoryPath(y, imp)
	err = d.Update(func(tx *store.Tx) error {
		old, err := tx.Read("memory.md")
		if err != nil && !store.IsNotExist(err) {
			return err
		}
		entries, err := Parse(p, old)
		if err != nil {
			return fmt.Errorf("%w; nothing written", err)
		}
		for _, e := range entries {
			if e.Gate == gateID {
				entryID, detail = e.ID, fmt.Sprintf("entry %s of gate %s already in %s", e.ID, gateID, p)
				return nil
			}
		}
		entryID = id.New(id.Entry)
		next, err := compose(old, entries, m, entryID, gateID, now)
		if err != nil {
			return fmt.Errorf("%s: %w; nothing written", p, err)
		}
		if m.Replaces != "" {
			detail = fmt.Sprintf("entry %s replaced %s in %s", entryID, m.Replaces, p)
		} else {
			detail = fmt.Sprintf("entry %s appended to %s", entryID, p)
		}
		return tx.Write("memory.md", next)
	})
	if err != nil {
		return "", "", err
	}
	return entryID, detail, nil
}

// compose returns memory.md as it is with the entry entryID of gate
// gateID, text m's, appended or in the place of the entry m replaces: an
// error wrapping ErrNoEntry for a replaces that names none, ErrTooLarge
// for a result over MaxBytes.
func compose(old []byte, entries []Entry, m intent.Memory, entryID, gateID string, now time.Time) ([]byte, error) {
	block := []string{
		fmt.Sprintf("%sentry %s gate %s %s -->", prefix, entryID, gateID, store.Second(now).Format(time.RFC3339)),
	}
	block = append(block, split(m.Text)...)
	block = append(block, fmt.Sprintf("%send %s -->", prefix, entryID))
	lines := split(string(old))
	if m.Replaces != "" {
		e, ok := find(entries, m.Replaces)
		if !ok {
			return nil, fmt.Errorf("replaces %s, which %w", m.Replaces, ErrNoEntry)
		}
		lines = append(lines[:e.start:e.start], append(block, lines[e.end:]...)...)
	} else {
		if len(lines) > 0 && strings.TrimSpace(lines[len(lines)-1]) != "" {
			lines = append(lines, "")
		}
		lines = append(lines, block...)
	}
	next := []byte(strings.Join(lines, "\n") + "\n")
	if len(next) > MaxBytes {
		return nil, fmt.Errorf("it would be %d bytes, %w of %d bytes", len(next), ErrTooLarge, MaxBytes)
	}
	return next, nil
}
