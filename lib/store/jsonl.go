package store

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"

	"github.com/impyard/impyard/lib/crash"
)

// MaxLine bounds one JSONL record; a longer line is reported as bad.
const MaxLine = 1 << 20

// AppendJSONL appends v as one line to the JSONL file at path.
func AppendJSONL(path string, v any) error {
	line, err := Line(v)
	if err != nil {
		return fmt.Errorf("append %s: %w", path, err)
	}
	return AppendLine(path, line)
}

// AppendLine appends line; see AppendLineAt.
func AppendLine(path string, line []byte) error { return AppendLineAt(path, line, "mid-append") }

// AppendLineAt appends one whole line (it must end in a newline and contain
// no other) with a single write(2) under the lock of the file's directory.
// If a crashed writer left a torn last line, a newline is written first in
// the same write, so the torn line stays one bad line and the new record is
// intact. The line is durable when AppendLineAt returns: the file is
// fdatasynced, and a file it created is synced into its directory first.
// point names the crash point between the two halves of a record in
// crash-enabled test builds, so a test can tear one log and not another.
func AppendLineAt(path string, line []byte, point string) error {
	if err := checkLine(path, line); err != nil {
		return err
	}
	dir := filepath.Dir(path)
	unlock, err := Lock(filepath.Join(dir, lockName))
	if err != nil {
		return err
	}
	defer unlock()
	dirfd, err := openDir(dir)
	if err != nil {
		return err
	}
	defer unix.Close(dirfd)
	fd, size, err := openAppend(dirfd, filepath.Base(path), path)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	return appendFd(fd, path, size, line, point)
}

// openAppend opens name in the directory dirfd for appending, creating it
// when missing; p is its path. A file it creates is synced into the
// directory before it returns, so an append acknowledged after is not
// lost with the file's entry.
func openAppend(dirfd int, name, p string) (int, int64, error) {
	for {
		fd, size, err := openAt(dirfd, name, p, unix.O_RDWR|unix.O_APPEND)
		if !errors.Is(err, os.ErrNotExist) {
			return fd, size, err
		}
		fd, size, err = openAt(dirfd, name, p, unix.O_RDWR|unix.O_APPEND|unix.O_CREAT|unix.O_EXCL)
		if errors.Is(err, os.ErrExist) {
			// Made a moment ago by a writer that does not take the lock.
			continue
		}
		if err != nil {
			return noFD, 0, err
		}
		trace(Op{Kind: OpCreate, Path: p})
		if err := shareCreated(dirfd, "", fd); err != nil {
			unix.Close(fd)
			return noFD, 0, &os.PathError{Op: "chmod", Path: p, Err: err}
		}
		if err := fsyncDir(dirfd, filepath.Dir(p)); err != nil {
			unix.Close(fd)
			return noFD, 0, err
		}
		return fd, size, nil
	}
}

// AppendLineIn is AppendLineAt for the file name in the directory rel
// below root, which is created when missing: the directory is walked from
// the root once, without following a symlink, and its lock file and the
// file are opened relative to it.
func AppendLineIn(root, rel, name string, line []byte, point string) error {
	var dir *os.File
	defer func() {
		if dir != nil {
			dir.Close()
		}
	}()
	lockPath := filepath.Join(root, rel, lockName)
	unlock, _, err := acquire(lockPath, filepath.Join(rel, lockName), func() (*os.File, error) {
		if dir != nil {
			dir.Close()
		}
		var err error
		if dir, err = openBelow(root, rel, true); err != nil {
			return nil, err
		}
		return openLock(int(dir.Fd()), lockName, lockPath, unix.O_CREAT)
	}, true)
	if err != nil {
		return err
	}
	defer unlock()
	p := filepath.Join(dir.Name(), name)
	if err := checkComponent(name); err != nil {
		return fmt.Errorf("%s: %w", p, err)
	}
	if err := checkLine(p, line); err != nil {
		return err
	}
	fd, size, err := openAppend(int(dir.Fd()), name, p)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	return appendFd(fd, p, size, line, point)
}

func checkLine(path string, line []byte) error {
	if len(line) == 0 || line[len(line)-1] != '\n' || bytes.IndexByte(line[:len(line)-1], '\n') >= 0 {
		return fmt.Errorf("append %s: a record must be exactly one line", path)
	}
	if len(line) > MaxLine {
		return fmt.Errorf("append %s: record of %d bytes is over the %d limit", path, len(line), MaxLine)
	}
	return nil
}

// appendFd appends line to fd, a file of size bytes opened for appending
// under its directory's lock, and fdatasyncs it; path names it in errors.
func appendFd(fd int, path string, size int64, line []byte, point string) error {
	if size > 0 {
		var last [1]byte
		if _, err := unix.Pread(fd, last[:], size-1); err != nil {
			return fmt.Errorf("append %s: %w", path, err)
		}
		if last[0] != '\n' {
			line = append([]byte{'\n'}, line...)
		}
	}
	rest := line
	if crash.Enabled {
		// A crash here leaves half a record: the torn line readers must skip.
		half := len(line) / 2
		if err := writeAll(fd, line[:half]); err != nil {
			return fmt.Errorf("append %s: %w", path, err)
		}
		crash.Point(point)
		rest = line[half:]
	}
	if err := writeAll(fd, rest); err != nil {
		// Leave no partial record behind: cut the file back to where it was.
		if unix.Ftruncate(fd, size) == nil {
			trace(Op{Kind: OpTruncate, Path: path, Off: size})
		}
		return fmt.Errorf("append %s: %w", path, err)
	}
	trace(Op{Kind: OpAppend, Path: path, Off: size, Data: line})
	// A record is written when it is on disk: without the sync a power
	// cut can lose a line its writer went on as if written, or leave it
	// torn, the transition it tells of durable and its story gone.
	if err := syncData(fd, path); err != nil {
		return fmt.Errorf("append %s: %w", path, err)
	}
	return nil
}

// BadLine is a JSONL line a reader skipped.
type BadLine struct {
	Path string
	Line int
	Err  error
}

func (b BadLine) Error() string { return fmt.Sprintf("%s:%d: skipped: %v", b.Path, b.Line, b.Err) }

// ReadJSONL calls fn with each well-formed JSON line of path in order. A
// line that is not valid JSON (a torn last line after a crash, or damage) is
// skipped and returned in bad; it never stops the read. An error from fn
// stops it. A missing file has no lines.
func ReadJSONL(path string, fn func(line []byte) error) (bad []BadLine, err error) {
	f, err := openRegular(path, os.O_RDONLY)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return scanJSONL(f, path, nil, fn)
}

// ReadJSONLContaining is ReadJSONL for the lines that contain every one
// of subs; the others are passed over unchecked, neither validated nor
// reported: a reader after a few lines of a large log pays for reading
// it, not for validating every line.
func ReadJSONLContaining(path string, subs [][]byte, fn func(line []byte) error) (bad []BadLine, err error) {
	f, err := openRegular(path, os.O_RDONLY)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return scanJSONL(f, path, func(line []byte) bool {
		for _, s := range subs {
			if !bytes.Contains(line, s) {
				return false
			}
		}
		return true
	}, fn)
}

// ScanJSONL is ReadJSONL over rd, a stream such as standard input; path is
// what bad lines and errors call it.
func ScanJSONL(rd io.Reader, path string, fn func(line []byte) error) (bad []BadLine, err error) {
	return scanJSONL(rd, path, nil, fn)
}

// scanJSONL is ScanJSONL for the lines keep keeps, all when it is nil.
func scanJSONL(rd io.Reader, path string, keep func(line []byte) bool, fn func(line []byte) error) (bad []BadLine, err error) {
	r := bufio.NewReaderSize(rd, 64<<10)
	for n := 1; ; n++ {
		line, err := readLine(r)
		if len(trimLine(line)) > 0 {
			switch {
			case keep != nil && !keep(line):
			case len(line) > MaxLine:
				bad = append(bad, BadLine{path, n, fmt.Errorf("line over the %d byte limit", MaxLine)})
			case !json.Valid(trimLine(line)):
				bad = append(bad, BadLine{path, n, errors.New("not a whole JSON record (torn or damaged)")})
			default:
				if err := fn(trimLine(line)); err != nil {
					return bad, err
				}
			}
		}
		if err == io.EOF {
			return bad, nil
		}
		if err != nil {
			return bad, fmt.Errorf("read %s: %w", path, err)
		}
	}
}

// readLine returns the next line, truncating (but consuming) one that is
// longer than MaxLine so a damaged file cannot exhaust memory.
func readLine(r *bufio.Reader) ([]byte, error) {
	var line []byte
	for {
		chunk, err := r.ReadSlice('\n')
		if len(line)+len(chunk) <= MaxLine+1 {
			line = append(line, chunk...)
		} else if len(line) <= MaxLine {
			line = append(line, make([]byte, MaxLine+1-len(line))...)
		}
		if err == bufio.ErrBufferFull {
			continue
		}
		return line, err
	}
}

// ScanBack calls fn with the lines of path from the last to the first,
// until fn returns true. It reads the file from its end in blocks, so
// finding something recent in a large log costs little. A missing file has
// no lines. The torn last line of a crashed writer is passed like any other;
// callers parse what they need.
func ScanBack(path string, fn func(line []byte) (stop bool)) error {
	f, err := openRegular(path, os.O_RDONLY)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return err
	}
	// Start small: what callers look for is usually near the end.
	block := int64(4 << 10)
	end := fi.Size()
	var carry []byte // the start of a line whose beginning is in an earlier block
	for end > 0 {
		start := max(end-block, 0)
		block = min(block*2, 256<<10)
		buf := make([]byte, end-start, end-start+int64(len(carry)))
		if _, err := f.ReadAt(buf, start); err != nil && !errors.Is(err, io.EOF) {
			return fmt.Errorf("read %s: %w", path, err)
		}
		buf = append(buf, carry...)
		for {
			i := bytes.LastIndexByte(bytes.TrimRight(buf, "\n"), '\n')
			if i < 0 {
				break
			}
			if line := trimLine(buf[i+1:]); len(line) > 0 && fn(line) {
				return nil
			}
			buf = buf[:i+1]
		}
		carry = buf
		if int64(len(carry)) > MaxLine+block {
			// A line longer than any record: skip it rather than grow.
			carry = nil
		}
		end = start
	}
	if line := trimLine(carry); len(line) > 0 {
		fn(line)
	}
	return nil
}

// Tail reads a JSONL file as it grows: each Next passes on the lines
// appended since the last, keeping a line not yet ended by its newline
// for the next. A file replaced by another, or shorter than what was
// read, is read again from its start, reset being called first so that
// the caller drops what it made of the old one. A missing file has no
// lines. Like ReadJSONL it opens only a regular file, never through a
// symbolic link.
type Tail struct {
	Path string

	fi      os.FileInfo // the file read last
	off     int64
	line    int
	partial []byte
}

// Next calls fn with each well-formed JSON line appended since the last
// call, and its number in the file; a line that is not valid JSON is
// skipped and returned in bad.
func (t *Tail) Next(reset func(), fn func(line []byte, n int)) (bad []BadLine, err error) {
	f, err := t.open(reset)
	if f == nil || err != nil {
		return nil, err
	}
	defer f.Close()
	buf := make([]byte, 64<<10)
	for {
		n, err := f.Read(buf)
		t.off += int64(n)
		bad = t.lines(append(t.partial, buf[:n]...), bad, fn)
		if err == io.EOF {
			return bad, nil
		}
		if err != nil {
			return bad, fmt.Errorf("read %s: %w", t.Path, err)
		}
	}
}

// Skip passes over the lines the file holds now, as Next would without
// calling fn and without checking them, so the next Next starts with the
// lines appended after it: what tail -f does first. A line not yet ended
// by its newline is kept, as Next keeps it. The lines are counted, not
// parsed, so line numbers stay those of the file.
func (t *Tail) Skip() error {
	f, err := t.open(nil)
	if f == nil || err != nil {
		return err
	}
	defer f.Close()
	buf := make([]byte, 256<<10)
	for {
		n, err := f.Read(buf)
		t.off += int64(n)
		data := buf[:n]
		if i := bytes.LastIndexByte(data, '\n'); i >= 0 {
			t.line += bytes.Count(data[:i+1], []byte{'\n'})
			t.partial = t.partial[:0]
			data = data[i+1:]
		}
		if len(t.partial)+len(data) > MaxLine {
			// No record is this long: Next would drop it too.
			t.partial, data = t.partial[:0], nil
		}
		t.partial = append(t.partial, data...)
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return fmt.Errorf("read %s: %w", t.Path, err)
		}
	}
}

// open opens the file at where the last read stopped, starting over
// (restart, with reset) when the file is gone, another file or shorter
// than that; a missing file is nil with no error.
func (t *Tail) open(reset func()) (*os.File, error) {
	f, err := openRegular(t.Path, os.O_RDONLY)
	if errors.Is(err, os.ErrNotExist) {
		if t.fi != nil || t.off > 0 {
			t.restart(reset)
		}
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	fi, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, err
	}
	if t.fi != nil && !os.SameFile(t.fi, fi) || fi.Size() < t.off {
		t.restart(reset)
	}
	t.fi = fi
	if _, err := f.Seek(t.off, io.SeekStart); err != nil {
		f.Close()
		return nil, err
	}
	return f, nil
}

func (t *Tail) restart(reset func()) {
	t.fi, t.off, t.line, t.partial = nil, 0, 0, nil
	if reset != nil {
		reset()
	}
}

// lines takes the whole lines of data, keeping the rest as partial.
func (t *Tail) lines(data []byte, bad []BadLine, fn func(line []byte, n int)) []BadLine {
	for {
		i := bytes.IndexByte(data, '\n')
		if i < 0 {
			if len(data) > MaxLine {
				// No record is this long: drop it rather than grow.
				bad = append(bad, BadLine{t.Path, t.line + 1, fmt.Errorf("line over the %d byte limit", MaxLine)})
				data = nil
			}
			t.partial = append([]byte(nil), data...)
			return bad
		}
		line := bytes.TrimSpace(data[:i])
		data = data[i+1:]
		t.line++
		switch {
		case len(line) == 0:
		case len(line) > MaxLine:
			bad = append(bad, BadLine{t.Path, t.line, fmt.Errorf("line over the %d byte limit", MaxLine)})
		case !json.Valid(line):
			bad = append(bad, BadLine{t.Path, t.line, errors.New("not a whole JSON record (torn or damaged)")})
		default:
			fn(line, t.line)
		}
	}
}

// Torn returns the line not yet ended by its newline, if any, as a bad
// line, and forgets it: what a reader that stops following says of a
// writer that died mid-line.
func (t *Tail) Torn() []BadLine {
	torn := len(bytes.TrimSpace(t.partial)) > 0
	t.partial = nil
	if !torn {
		return nil
	}
	return []BadLine{{t.Path, t.line + 1, errors.New("not a whole JSON record (torn or damaged)")}}
}
