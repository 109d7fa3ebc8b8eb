// Package store is the only code that writes or reads files in the yard.
//
// Guarantees, each relied on by every binary:
//
//   - A write replaces a file atomically: temp file in the store's .tmp
//     directory, write, fsync, close, rename over the target, fsync the
//     target's directory (google/renameio plus the directory fsync it leaves
//     to callers). A reader never needs a lock and never sees a torn file.
//     This requires rename(2) to be atomic, so the yard must be on a local
//     file system, not NFS.
//   - Writes happen only inside Dir.Update, a whole read-modify-write
//     transaction under flock(2) on <dir>/.lock, a file whose inode never
//     changes. Because every writer holds that lock, anything left in .tmp
//     when the lock is taken was orphaned by a crash and is swept then.
//     After the flock, the locker checks that the path still names the
//     inode it locked and retries if not, so a waiter on a lock file that
//     was replaced never gets in beside whoever locked the new one.
//   - Reads open with O_NOFOLLOW and accept only regular files with a single
//     link: a symlink, FIFO, device, directory or hard link planted in a store
//     is reported, never followed, opened for long or run.
//   - Directories are opened component by component below the yard root
//     with openat(2) and O_NOFOLLOW|O_DIRECTORY, by readers (ReadFileIn,
//     ReadDirIn, Tx.Read) as by writers, so no symlink below the root is
//     ever followed: a directory replaced by a symlink is refused, naming
//     it. The root itself is opened by path (the operator's choice).
//   - Every JSON file carries "schema": "impyard.<kind>/<major>"; Decode
//     refuses an unknown major before the caller can write anything.
//   - JSONL appends are one write(2) of one whole line under the directory's
//     lock; readers skip and report a torn line and go on.
//   - A lock is waited for at most LockTimeout (then ErrBusy, naming it);
//     after WaitNotice the OnWait hook is told which lock and who holds it.
//     The store itself never prints.
package store

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/google/renameio/v2"
	"golang.org/x/sys/unix"

	"github.com/impyard/impyard/lib/crash"
	"github.com/impyard/impyard/lib/temporary"
)

const (
	lockName = ".lock"
	tmpName  = ".tmp"
	// MaxFile bounds what a reader will load, so a planted or runaway file
	// cannot exhaust memory.
	MaxFile = 64 << 20
	dirPerm = 0o750
	// FilePerm is the mode of every yard file.
	FilePerm = 0o640
)

// LockTimeout bounds how long Update waits for a busy lock before giving
// up with ErrBusy.
var LockTimeout = 30 * time.Second

// ErrBusy means another process held a store's lock for longer than
// LockTimeout; the operation is worth retrying.
var ErrBusy = temporary.New("lock busy")

// Dir is a store directory: one lock domain with its own .lock and .tmp.
type Dir struct {
	root, rel, path string
}

// OpenDir returns the store directory rel below root, creating it and
// refusing any component that is a symlink or not a directory.
func OpenDir(root, rel string) (*Dir, error) {
	p, err := MkdirAll(root, rel)
	if err != nil {
		return nil, err
	}
	return &Dir{root: root, rel: rel, path: p}, nil
}

// Path is the directory's path.
func (d *Dir) Path() string { return d.path }

// MkdirAll creates rel below root one component at a time, never
// following a symlink below root (see openBelow), and returns its path.
func MkdirAll(root, rel string) (string, error) {
	d, err := openBelow(root, rel, true)
	if err != nil {
		return "", err
	}
	defer d.Close()
	return d.Name(), nil
}

func checkComponent(c string) error {
	if c == "" || c == "." || c == ".." || strings.ContainsAny(c, "/\\\x00") {
		return errors.New("path component is not a plain name")
	}
	return nil
}

// Create writes name with data unless something is there already (a
// symlink included, which is not followed), and leaves what is there
// exactly as it was; created says whether it wrote. The check and the
// write are one transaction under the directory's lock. It is for the
// defaults a yard starts with: a default never replaces a file its owner
// may have edited since.
func (d *Dir) Create(name string, data []byte) (created bool, err error) {
	err = d.Update(func(tx *Tx) error {
		there, err := ExistsIn(d.root, filepath.Join(d.rel, name))
		if err != nil || there {
			return err
		}
		if err := tx.Write(name, data); err != nil {
			return err
		}
		created = true
		return nil
	})
	return created, err
}

// Tx is one transaction on a Dir, valid only inside Update.
type Tx struct {
	d *Dir
}

// Update runs fn under the directory's lock. Everything fn reads it may
// rely on until it returns; everything it writes is atomic and durable when
// Write returns.
func (d *Dir) Update(fn func(tx *Tx) error) error {
	unlock, err := d.lock()
	if err != nil {
		return err
	}
	defer unlock()
	if err := d.sweep(); err != nil {
		return err
	}
	return fn(&Tx{d: d})
}

// sweep removes temp files orphaned by a writer that died. It is only
// called under the lock, when no live writer can own a temp file.
func (d *Dir) sweep() error {
	tmp := filepath.Join(d.path, tmpName)
	fd, err := openDir(tmp)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("sweep %s: %w", tmp, err)
	}
	f := os.NewFile(uintptr(fd), tmp)
	names, err := f.Readdirnames(-1)
	f.Close()
	if err != nil {
		return fmt.Errorf("sweep %s: %w", tmp, err)
	}
	for _, n := range names {
		if err := os.Remove(filepath.Join(tmp, n)); err != nil && !errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("sweep orphaned temp file: %w", err)
		}
	}
	return nil
}

// Path returns the path of name inside the transaction's directory.
func (tx *Tx) Path(name string) string { return filepath.Join(tx.d.path, name) }

// Read reads name inside the directory (see ReadFileIn).
func (tx *Tx) Read(name string) ([]byte, error) {
	return ReadFileIn(tx.d.root, filepath.Join(tx.d.rel, name))
}

// Check makes sure every name could be written, creating the
// sub-directories they need and refusing any that is a symlink, so a
// transaction can refuse before it changes anything rather than halfway.
func (tx *Tx) Check(names ...string) error {
	for _, n := range names {
		if _, err := tx.resolve(n); err != nil {
			return err
		}
	}
	return nil
}

// Write atomically creates or replaces name with data.
func (tx *Tx) Write(name string, data []byte) error {
	p, err := tx.resolve(name)
	if err != nil {
		return err
	}
	tmp, err := MkdirAll(tx.d.path, tmpName)
	if err != nil {
		return err
	}
	if err := WriteAtomic(p, data, tmp); err != nil {
		return err
	}
	return nil
}

// Backup writes data, the content name had before this transaction
// replaces it, as name.N, the first N from 1 not taken, and returns that
// path: an owner's file a program rewrites keeps every earlier version.
func (tx *Tx) Backup(name string, data []byte) (string, error) {
	for n := 1; n < 100000; n++ {
		b := name + "." + strconv.Itoa(n)
		if _, err := os.Lstat(tx.Path(b)); errors.Is(err, os.ErrNotExist) {
			return tx.Path(b), tx.Write(b, data)
		}
	}
	return "", fmt.Errorf("%s: too many backups", tx.Path(name))
}

// Remove deletes name; a missing file is not an error.
func (tx *Tx) Remove(name string) error {
	p, err := tx.resolve(name)
	if err != nil {
		return err
	}
	if err := os.Remove(p); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	return syncDir(filepath.Dir(p))
}

// resolve turns name, one or two plain components, into a path inside the
// directory, creating the sub-directory when there is one.
func (tx *Tx) resolve(name string) (string, error) {
	dir, base := filepath.Split(name)
	if err := checkComponent(base); err != nil {
		return "", fmt.Errorf("%s: %w", filepath.Join(tx.d.path, name), err)
	}
	if dir == "" {
		return filepath.Join(tx.d.path, base), nil
	}
	d, err := MkdirAll(tx.d.path, dir)
	if err != nil {
		return "", err
	}
	return filepath.Join(d, base), nil
}

// WriteAtomic replaces path with data through a temp file in tmpDir, which
// must be on the same file system. Callers outside a Tx must hold a lock
// that covers tmpDir.
func WriteAtomic(path string, data []byte, tmpDir string) error {
	return writeAtomic(path, data, renameio.WithTempDir(tmpDir), renameio.WithPermissions(FilePerm))
}

// WriteMode replaces path with data at exactly mode perm, whatever the
// umask, through a temp file beside it: for keys and certificates, whose
// mode is part of their meaning.
func WriteMode(path string, data []byte, perm os.FileMode) error {
	return writeAtomic(path, data, renameio.WithStaticPermissions(perm))
}

func writeAtomic(path string, data []byte, opts ...renameio.Option) error {
	pf, err := renameio.NewPendingFile(path, opts...)
	if err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	defer pf.Cleanup()
	if _, err := pf.Write(data); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	crash.Point("after-temp-write")
	if err := pf.CloseAtomicallyReplace(); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	crash.Point("after-rename")
	return syncDir(filepath.Dir(path))
}

func syncDir(dir string) error {
	fd, err := openDir(dir)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	for {
		err := unix.Fsync(fd)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil {
			return fmt.Errorf("fsync directory %s: %w", dir, err)
		}
		return nil
	}
}

// openDir opens a directory for reading or fsync. Not os.Open: on every
// file it opens, os tries to register the descriptor with the runtime's
// poller and undoes it, four more system calls a directory never needs,
// and a transition opens several.
func openDir(dir string) (int, error) {
	for {
		fd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil {
			return -1, &os.PathError{Op: "open", Path: dir, Err: err}
		}
		return fd, nil
	}
}

// ReadFile reads a yard file. It refuses to follow a symlink, to open
// anything but a regular file with exactly one link, and files larger than
// MaxFile. O_NONBLOCK keeps a planted FIFO from blocking the reader.
func ReadFile(path string) ([]byte, error) {
	f, err := openRegular(path, os.O_RDONLY)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return readOpen(f)
}

func readOpen(f *os.File) ([]byte, error) {
	path := f.Name()
	fi, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if fi.Size() > MaxFile {
		return nil, &os.PathError{Op: "read", Path: path, Err: fmt.Errorf("file is %d bytes, over the %d limit", fi.Size(), MaxFile)}
	}
	buf := make([]byte, 0, fi.Size()+1)
	buf, err = readAll(f, buf)
	if err != nil {
		return nil, &os.PathError{Op: "read", Path: path, Err: err}
	}
	return buf, nil
}

func readAll(r io.Reader, buf []byte) ([]byte, error) {
	for {
		if len(buf) == cap(buf) {
			buf = append(buf, 0)[:len(buf)]
		}
		n, err := r.Read(buf[len(buf):cap(buf)])
		buf = buf[:len(buf)+n]
		if err == io.EOF {
			return buf, nil
		}
		if err != nil {
			return buf, err
		}
		if len(buf) > MaxFile {
			return nil, fmt.Errorf("file grew over the %d limit", MaxFile)
		}
	}
}

func openRegular(path string, flag int) (*os.File, error) {
	f, err := os.OpenFile(path, flag|syscall.O_NOFOLLOW|syscall.O_NONBLOCK|syscall.O_CLOEXEC, FilePerm)
	if err != nil {
		if errors.Is(err, syscall.ELOOP) {
			return nil, &os.PathError{Op: "open", Path: path, Err: errSymlink}
		}
		return nil, err
	}
	if err := checkRegular(f); err != nil {
		f.Close()
		return nil, err
	}
	// Writers append through this descriptor, so undo O_NONBLOCK for them.
	if flag&(os.O_WRONLY|os.O_RDWR) != 0 {
		if err := syscall.SetNonblock(int(f.Fd()), false); err != nil {
			f.Close()
			return nil, err
		}
	}
	return f, nil
}

// checkRegular refuses an open file that is not a regular file with one
// link.
func checkRegular(f *os.File) error {
	fi, err := f.Stat()
	if err != nil {
		return err
	}
	var nlink uint64 = 1
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		nlink = uint64(st.Nlink)
	}
	return checkKind(f.Name(), fi.Mode().Type(), nlink)
}

// checkStat is checkRegular for a file known by its stat(2) result.
func checkStat(path string, st *unix.Stat_t) error {
	var t fs.FileMode
	switch st.Mode & unix.S_IFMT {
	case unix.S_IFDIR:
		t = fs.ModeDir
	case unix.S_IFLNK:
		t = fs.ModeSymlink
	case unix.S_IFIFO:
		t = fs.ModeNamedPipe
	case unix.S_IFSOCK:
		t = fs.ModeSocket
	case unix.S_IFCHR:
		t = fs.ModeDevice | fs.ModeCharDevice
	case unix.S_IFBLK:
		t = fs.ModeDevice
	}
	return checkKind(path, t, uint64(st.Nlink))
}

func checkKind(path string, t fs.FileMode, nlink uint64) error {
	if t != 0 {
		return &os.PathError{Op: "open", Path: path, Err: fmt.Errorf("is not a regular file (%s)", t)}
	}
	if nlink != 1 {
		return &os.PathError{Op: "open", Path: path, Err: fmt.Errorf("has %d hard links; refusing a file that may be shared with another place", nlink)}
	}
	return nil
}

// IsNotExist reports whether err means the file is not there.
func IsNotExist(err error) bool { return errors.Is(err, os.ErrNotExist) }

// trimLine drops a trailing newline and carriage return.
func trimLine(b []byte) []byte { return bytes.TrimRight(b, "\r\n") }
