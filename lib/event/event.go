// Package event writes the yard's two timelines: the per-imp journal
// (journal/<imp>/events.jsonl, the imp's view of its own history, which every
// actor appends to) and the audit log (runs/decisions.jsonl, which the
// gateway's request decisions share). Neither is ever read to decide
// anything: the state files are the truth, these are the story.
package event

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"
	"unicode/utf8"

	"golang.org/x/sys/unix"

	"github.com/impyard/impyard/lib/store"
	"github.com/impyard/impyard/lib/yard"
)

// Kind and major of an event line.
const (
	Kind  = "event"
	Major = 1
)

// Event is one line of a journal or of the audit log.
type Event struct {
	Schema string    `json:"schema"`
	TS     time.Time `json:"ts"`               // whole seconds, UTC
	TSMS   int64     `json:"ts_ms,omitempty"`  // the same instant in unix milliseconds
	Event  string    `json:"event"`            // e.g. gate-filed, gate-approved, task-added, note
	Imp    string    `json:"imp"`              // whose timeline
	Actor  string    `json:"actor"`            // which program wrote it: impq, impgate, impgw, impexec, impsup, box
	By     string    `json:"by,omitempty"`     // the human or rule that caused it
	ID     string    `json:"id,omitempty"`     // the task or gate
	Seq    int       `json:"seq,omitempty"`    // which transition of ID (1 = the first)
	Task   string    `json:"task,omitempty"`   // the task a gate belongs to
	From   string    `json:"from,omitempty"`   // previous state
	To     string    `json:"to,omitempty"`     // new state
	Why    string    `json:"why,omitempty"`    // reason, note or rationale
	SHA256 string    `json:"sha256,omitempty"` // a gate's payload hash
	Intent string    `json:"intent,omitempty"`
}

// Record appends e to the audit log and to the imp's journal at once, and
// returns when both lines are synced (store.AppendLineIn). Callers hold
// the lock of the store that changed, so events of one entity are
// appended to each log in the order its transitions happened. The two
// appends overlap, one log's sync waiting on the disk while the other's
// line is written, because nothing orders them: Ensure looks for the
// event in each log on its own, so a crash or power cut that leaves it in
// either, or in neither, is repaired alike.
func Record(y *yard.Yard, e Event) error {
	line, err := prepare(&e)
	if err != nil {
		return err
	}
	jdir, jname, err := yard.JournalIn(e.Imp)
	if err != nil {
		return err
	}
	audit := make(chan error, 1)
	go func() {
		audit <- store.AppendLineIn(y.Root, yard.DecisionsDir, yard.DecisionsName, line, "mid-audit-append")
	}()
	jerr := store.AppendLineIn(y.Root, jdir, jname, line, "mid-append")
	return errors.Join(<-audit, jerr)
}

// prepare stamps e and renders it as its line.
func prepare(e *Event) ([]byte, error) {
	e.Schema = store.Schema(Kind, Major)
	if e.TS.IsZero() {
		now := time.Now()
		e.TS, e.TSMS = store.Second(now), store.Millis(now)
	} else if e.TSMS == 0 {
		e.TSMS = store.Millis(e.TS)
	}
	e.TS = store.Second(e.TS)
	return fit(e)
}

// fit renders e as one line, cutting its Why (free text from a human or a
// box) until the line fits in a JSONL record: a record too long to append
// would fail its transition after the state write and leave the store's
// marker for every later writer to trip over.
func fit(e *Event) ([]byte, error) {
	for {
		line, err := store.Line(e)
		if err != nil {
			return nil, err
		}
		over := len(line) - store.MaxLine
		if over <= 0 || e.Why == "" {
			return line, nil
		}
		// Escaping may make a byte of Why cost up to six in the line, so
		// cut in proportion too; for plain text, cutting what is over is
		// exact.
		cut := len(e.Why) * store.MaxLine / len(line)
		if exact := len(e.Why) - over; exact > 0 && exact < cut {
			cut = exact
		}
		cut = max(cut-len("…"), 0)
		for cut > 0 && !utf8.RuneStart(e.Why[cut]) {
			cut--
		}
		if cut == 0 {
			e.Why = ""
		} else {
			e.Why = e.Why[:cut] + "…"
		}
	}
}

// marker names the file a store keeps to say a transition is between its
// state write and its records: if it names an entity when the store's lock
// is next taken, the process that wrote it died in between (or the power
// went), and the transition it names must be checked with Ensure.
//
// It survives a power cut because of the order of syncs: BeginTx's
// fdatasync of the mark completes before the state file is renamed into
// place (the file itself synced before, its directory after; the mark's
// sync runs while the file is written and synced, see
// store.Tx.OverwriteAhead), and every record Record appends is
// fdatasynced before EndTx clears the mark. So whenever a transition's
// state file is durable, either its mark is too or its records are; a
// mark that outlives its records (EndTx is not synced, and need not be)
// only has Ensure find them there and add nothing.
//
// The file stays once made, markerWidth bytes long, and is rewritten in
// place: the entity's id padded with spaces while marked, spaces when
// not. Creating and removing it around every transition cost more than
// the transition's own durable write (the directory's fsync then had
// the marker's create and unlink to commit), while rewriting bytes of an
// existing file touches no directory. A marker of any other length (one
// an older impyard left) is read the same way.
const marker = ".recording"

// markerWidth is the marker's length: room for any id (lib/id's are 18
// bytes), so marking and unmarking never change the file's size.
const markerWidth = 32

var blank = bytes.Repeat([]byte{' '}, markerWidth)

// Begin marks, in the store directory dir, that entity id is about to
// change. Callers hold the store's lock; inside its transaction they call
// BeginTx.
func Begin(dir, id string) error {
	p := filepath.Join(dir, marker)
	fd, err := unix.Open(p, unix.O_RDWR|unix.O_CREAT|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o600)
	if err != nil {
		return &os.PathError{Op: "open", Path: p, Err: err}
	}
	f := os.NewFile(uintptr(fd), p)
	defer f.Close()
	return mark(f, id)
}

// BeginTx is Begin in the store directory of tx, through the marker the
// transaction holds open. The mark is durable before anything the
// transaction writes next is renamed into place, so a state file written
// after it cannot outlive it in a power cut; its sync overlaps that
// file's own write and sync.
func BeginTx(tx *store.Tx, id string) error {
	if len(id) > markerWidth {
		return fmt.Errorf("mark %s: id %q is over %d bytes", tx.Path(""), id, markerWidth)
	}
	return tx.OverwriteAhead(marker, append([]byte(id), blank[len(id):]...))
}

func mark(f *os.File, id string) error {
	p := f.Name()
	if len(id) > markerWidth {
		return fmt.Errorf("mark %s: id %q is over %d bytes", filepath.Dir(p), id, markerWidth)
	}
	var st unix.Stat_t
	if err := unix.Fstat(int(f.Fd()), &st); err != nil {
		return &os.PathError{Op: "stat", Path: p, Err: err}
	}
	if st.Mode&unix.S_IFMT != unix.S_IFREG {
		return &os.PathError{Op: "open", Path: p, Err: errors.New("not a regular file")}
	}
	if st.Size != markerWidth {
		if err := unix.Ftruncate(int(f.Fd()), markerWidth); err != nil {
			return &os.PathError{Op: "truncate", Path: p, Err: err}
		}
	}
	return pwriteAll(f, append([]byte(id), blank[len(id):]...))
}

// End clears the mark once the transition is recorded.
func End(dir string) error {
	p := filepath.Join(dir, marker)
	fd, err := unix.Open(p, unix.O_WRONLY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if errors.Is(err, unix.ENOENT) {
		return nil
	}
	if err != nil {
		return &os.PathError{Op: "open", Path: p, Err: err}
	}
	f := os.NewFile(uintptr(fd), p)
	defer f.Close()
	return pwriteAll(f, blank)
}

// EndTx is End in the store directory of tx. It is not synced: the
// records it follows are (see marker).
func EndTx(tx *store.Tx) error {
	f, err := tx.Scratch(marker, false)
	if err != nil || f == nil {
		return err
	}
	return tx.Overwrite(marker, blank, false)
}

func pwriteAll(f *os.File, b []byte) error {
	n, err := unix.Pwrite(int(f.Fd()), b, 0)
	if err == nil && n < len(b) {
		err = io.ErrShortWrite
	}
	if err != nil {
		return &os.PathError{Op: "write", Path: f.Name(), Err: err}
	}
	return nil
}

// Interrupted returns the entity whose transition a dead process left
// unrecorded in dir, if any. Callers hold the store's lock.
func Interrupted(dir string) (string, bool) {
	b, err := store.ReadFile(filepath.Join(dir, marker))
	if err != nil {
		return "", false
	}
	return markedIn(b)
}

// maxMarker bounds what is read of a marker: an id, padded.
const maxMarker = 4 * markerWidth

func markedIn(b []byte) (string, bool) {
	entity := string(bytes.TrimSpace(b))
	return entity, entity != ""
}

// interruptedTx is Interrupted in the store directory of tx, through the
// marker the transaction then holds open for BeginTx and EndTx.
func interruptedTx(tx *store.Tx) (string, bool, error) {
	f, err := tx.Scratch(marker, false)
	if err != nil || f == nil {
		return "", false, err
	}
	var buf [maxMarker]byte
	n, err := unix.Pread(int(f.Fd()), buf[:], 0)
	if err != nil {
		return "", false, &os.PathError{Op: "read", Path: f.Name(), Err: err}
	}
	id, ok := markedIn(buf[:n])
	return id, ok, nil
}

// Recover finishes what a writer that died left in the store of tx: when
// its mark names an entity, latest reads that entity's latest transition
// as an event (ok false: the entity is not there, nothing to record), and
// Ensure records it. Callers hold the store's lock.
func Recover(y *yard.Yard, tx *store.Tx, latest func(entity string) (e Event, ok bool, err error)) error {
	entity, marked, err := interruptedTx(tx)
	if err != nil || !marked {
		return err
	}
	e, ok, err := latest(entity)
	if err != nil {
		return err
	}
	if ok {
		if err := Ensure(y, e); err != nil {
			return err
		}
	}
	return EndTx(tx)
}

// window bounds how far back Ensure looks: a record is appended moments
// after its transition, so anything older than this before it cannot be it.
const window = 10 * time.Minute

// Ensure records e (an entity's latest transition, with its Seq) in each
// log that lacks it: the repair for a process that died between changing
// a state file and recording the change, or halfway through a record.
// Each log is looked through on its own, since Record appends to both at
// once and a crash can leave the line in the journal and not the audit
// log as well as the other way. Called under the entity's store lock
// before the next transition, it leaves exactly one whole record of every
// transition in the audit log and the journal.
func Ensure(y *yard.Yard, e Event) error {
	line, err := prepare(&e)
	if err != nil {
		return err
	}
	jp, err := y.JournalPath(e.Imp)
	if err != nil {
		return err
	}
	ap, err := y.DecisionsPath()
	if err != nil {
		return err
	}
	inJournal, err := holds(jp, &e)
	if err != nil {
		return err
	}
	inAudit, err := holds(ap, &e)
	if err != nil {
		return err
	}
	if !inAudit {
		if err := store.AppendLine(ap, line); err != nil {
			return err
		}
	}
	if inJournal {
		return nil
	}
	return store.AppendLine(jp, line)
}

// holds looks back through a log for e's (id, seq). Only lines that
// mention the id are decoded; the others are read for their time alone,
// to stop once the log is older than the window.
func holds(path string, e *Event) (bool, error) {
	found := false
	cutoff := e.TS.Add(-window)
	idField := []byte(`"id":"` + e.ID + `"`)
	err := store.ScanBack(path, func(line []byte) bool {
		if bytes.Contains(line, idField) {
			var r struct {
				ID  string `json:"id"`
				Seq int    `json:"seq"`
			}
			if json.Unmarshal(line, &r) == nil && r.ID == e.ID && r.Seq == e.Seq {
				found = true
				return true
			}
		}
		ts, ok := timeOf(line)
		return ok && ts.Before(cutoff)
	})
	return found, err
}

var tsField = []byte(`"ts":"`)

// timeOf reads the "ts" member of a record without decoding the rest.
func timeOf(line []byte) (time.Time, bool) {
	i := bytes.Index(line, tsField)
	if i < 0 {
		return time.Time{}, false
	}
	rest := line[i+len(tsField):]
	j := bytes.IndexByte(rest, '"')
	if j < 0 {
		return time.Time{}, false
	}
	ts, err := time.Parse(time.RFC3339Nano, string(rest[:j]))
	return ts, err == nil
}
