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
// intact. point names the crash point between the two halves of a record
// in crash-enabled test builds, so a test can tear one log and not another.
func AppendLineAt(path string, line []byte, point string) error {
	if err := checkLine(path, line); err != nil {
		return err
	}
	unlock, err := Lock(filepath.Join(filepath.Dir(path), lockName))
	if err != nil {
		return err
	}
	defer unlock()
	fd, size, err := openAt(unix.AT_FDCWD, path, path, unix.O_RDWR|unix.O_APPEND)
	if errors.Is(err, os.ErrNotExist) {
		fd, size, err = openAt(unix.AT_FDCWD, path, path, unix.O_RDWR|unix.O_APPEND|unix.O_CREAT)
	}
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	return appendFd(fd, path, size, line, point)
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
	fd, size, err := openAt(int(dir.Fd()), name, p, unix.O_RDWR|unix.O_APPEND|unix.O_CREAT)
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
// under its directory's lock; path names it in errors.
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
	if crash.Enabled {
		// A crash here leaves half a record: the torn line readers must skip.
		half := len(line) / 2
		if err := writeAll(fd, line[:half]); err != nil {
			return fmt.Errorf("append %s: %w", path, err)
		}
		crash.Point(point)
		line = line[half:]
	}
	if err := writeAll(fd, line); err != nil {
		// Leave no partial record behind: cut the file back to where it was.
		_ = unix.Ftruncate(fd, size)
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
	return ScanJSONL(f, path, fn)
}

// ScanJSONL is ReadJSONL over rd, a stream such as standard input; path is
// what bad lines and errors call it.
func ScanJSONL(rd io.Reader, path string, fn func(line []byte) error) (bad []BadLine, err error) {
	r := bufio.NewReaderSize(rd, 64<<10)
	for n := 1; ; n++ {
		line, err := readLine(r)
		if len(trimLine(line)) > 0 {
			switch {
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
