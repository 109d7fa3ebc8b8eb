// Package store is the only code that writes or reads files in the yard.
//
// Guarantees, each relied on by every binary:
//
//   - A write replaces a file atomically: temp file in the store's .tmp
//     directory, write, fsync, close, rename over the target, fsync the
//     target's directory; a transaction does each step relative to the
//     directories it holds open (openat, renameat), WriteAtomic by path. A reader never needs a lock and
//     never sees a torn file. This requires rename(2) to be atomic, so the
//     yard must be on a local file system, not NFS.
//   - A directory made on the way to a file (by MkdirAll, OpenDir, a
//     transaction's write into a sub-directory, an append) is synced into
//     its parent before anything goes on, so a file acknowledged inside it
//     cannot vanish with it in a power cut.
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
//     lock, fdatasynced (a new file synced into its directory first) before
//     the append returns; readers skip and report a torn line and go on.
//   - Every create, write, append, truncate, rename, mkdir, unlink and
//     sync the store performs is reported, in order, to the trace hook
//     (SetTrace), through which tests see what was durable when.
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
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

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

// Existing returns the store directory rel below root without creating
// or opening it, for a caller that has just found a file in it: its
// transactions walk it from the root, refusing a symlink as OpenDir does,
// and fail, naming it, if it is no longer there.
func Existing(root, rel string) (*Dir, error) {
	rel = filepath.Clean(rel)
	for _, c := range strings.Split(filepath.ToSlash(rel), "/") {
		if err := checkComponent(c); err != nil {
			return nil, fmt.Errorf("%s: %w", filepath.Join(root, rel), err)
		}
	}
	return &Dir{root: root, rel: rel, path: filepath.Join(filepath.Clean(root), rel)}, nil
}

// Path is the directory's path.
func (d *Dir) Path() string { return d.path }

// MkdirAll creates rel below root one component at a time, never
// following a symlink below root (see openBelow), each new directory
// synced into its parent, and returns its path.
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

// Tx is one transaction on a Dir, valid only inside Update. It holds the
// directory open, as walked from the root when the lock was taken, and
// works relative to it with the *at system calls, so a transaction walks
// the path once, not once for each file it touches; what it opens for
// more than one step (.tmp, a scratch file) stays open until Update
// returns.
type Tx struct {
	d       *Dir
	dir     *os.File
	tmp     *os.File // .tmp, once opened
	scratch map[string]*os.File
	// syncing carries the outcome of a sync OverwriteAhead left running,
	// and synced what settle received from it.
	syncing chan error
	synced  error
}

// Update runs fn under the directory's lock. Everything fn reads it may
// rely on until it returns; everything it writes is atomic and durable when
// Write returns.
func (d *Dir) Update(fn func(tx *Tx) error) error {
	return d.UpdateChecked(nil, fn)
}

// UpdateChecked is Update for a transaction that may refuse what it
// finds without writing anything: when the directory has no lock file
// yet, check runs before one is created, and its error is returned with
// the directory as it was. With a lock file there, fn must refuse the
// same under the lock before it writes; checking before the lock every
// time would read what fn reads twice.
func (d *Dir) UpdateChecked(check func() error, fn func(tx *Tx) error) error {
	dir, unlock, err := d.lock(check)
	if err != nil {
		return err
	}
	defer unlock()
	tx := &Tx{d: d, dir: dir}
	defer tx.close()
	if err := tx.sweep(); err != nil {
		return err
	}
	err = fn(tx)
	if serr := tx.settle(); err == nil {
		err = serr
	}
	return err
}

// settle waits for the sync an OverwriteAhead left running, if any, and
// returns its error, then and at every later call.
func (tx *Tx) settle() error {
	if tx.syncing != nil {
		tx.synced = <-tx.syncing
		tx.syncing = nil
	}
	return tx.synced
}

func (tx *Tx) close() {
	// The sync still running uses a scratch file about to be closed.
	tx.settle()
	for _, f := range tx.scratch {
		f.Close()
	}
	if tx.tmp != nil {
		tx.tmp.Close()
	}
	tx.dir.Close()
}

// sweep removes temp files orphaned by a writer that died. It is only
// called under the lock, when no live writer can own a temp file. The
// .tmp it opens stays open for the transaction's writes.
func (tx *Tx) sweep() error {
	tmp := filepath.Join(tx.d.path, tmpName)
	fd, err := openDirAt(int(tx.dir.Fd()), tmpName, tmp, false)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("sweep %s: %w", tmp, err)
	}
	tx.tmp = os.NewFile(uintptr(fd), tmp)
	names, err := tx.tmp.Readdirnames(-1)
	if err != nil {
		return fmt.Errorf("sweep %s: %w", tmp, err)
	}
	for _, n := range names {
		err := unix.Unlinkat(fd, n, 0)
		if err != nil && !errors.Is(err, unix.ENOENT) {
			return fmt.Errorf("sweep orphaned temp file %s: %w", filepath.Join(tmp, n), err)
		}
		if err == nil {
			trace(Op{Kind: OpUnlink, Path: filepath.Join(tmp, n)})
		}
	}
	return nil
}

// Path returns the path of name inside the transaction's directory.
func (tx *Tx) Path(name string) string { return filepath.Join(tx.d.path, name) }

// Read reads name inside the directory with ReadFile's checks, refusing a
// symlinked sub-directory on the way.
func (tx *Tx) Read(name string) ([]byte, error) {
	dir, base := filepath.Split(name)
	if err := checkComponent(base); err != nil {
		return nil, fmt.Errorf("%s: %w", tx.Path(name), err)
	}
	fd, p, err := tx.sub(dir, false)
	if err != nil {
		return nil, err
	}
	if fd != int(tx.dir.Fd()) {
		defer unix.Close(fd)
	}
	p = filepath.Join(p, base)
	ffd, size, err := openAt(fd, base, p, unix.O_RDONLY)
	if err != nil {
		return nil, err
	}
	defer unix.Close(ffd)
	return readFd(ffd, p, size)
}

// Open opens the sub-directory rel of the transaction's directory, for
// listing and reading, without following a symlink.
func (tx *Tx) Open(rel string) (*Opened, error) {
	fd, p, err := tx.sub(rel, false)
	if err != nil {
		return nil, err
	}
	if fd == int(tx.dir.Fd()) {
		if fd, err = unix.Dup(fd); err != nil {
			return nil, &os.PathError{Op: "open", Path: p, Err: err}
		}
	}
	return &Opened{f: os.NewFile(uintptr(fd), p)}, nil
}

// sub opens the sub-directory rel (empty: the directory itself, which is
// returned as is and must not be closed) component by component without
// following a symlink, creating what is missing with create, and returns
// it with its path.
func (tx *Tx) sub(rel string, create bool) (int, string, error) {
	rel = strings.Trim(filepath.ToSlash(rel), "/")
	if rel == "" {
		return int(tx.dir.Fd()), tx.d.path, nil
	}
	return walk(int(tx.dir.Fd()), tx.d.path, rel, create)
}

// Check makes sure every name could be written, creating the
// sub-directories they need and refusing any that is a symlink, so a
// transaction can refuse before it changes anything rather than halfway.
func (tx *Tx) Check(names ...string) error {
	for _, n := range names {
		fd, _, _, err := tx.resolve(n)
		if err != nil {
			return err
		}
		if fd != int(tx.dir.Fd()) {
			unix.Close(fd)
		}
	}
	return nil
}

// Write atomically creates or replaces name with data: a temp file in
// .tmp, written and fsynced, renamed over name, and name's directory
// fsynced, each step relative to a directory the transaction holds open.
func (tx *Tx) Write(name string, data []byte) error {
	fd, base, p, err := tx.resolve(name)
	if err != nil {
		return err
	}
	if fd != int(tx.dir.Fd()) {
		defer unix.Close(fd)
	}
	if tx.tmp == nil {
		tmp := filepath.Join(tx.d.path, tmpName)
		t, err := openDirAt(int(tx.dir.Fd()), tmpName, tmp, true)
		if err != nil {
			return err
		}
		tx.tmp = os.NewFile(uintptr(t), tmp)
	}
	if err := writeAt(int(tx.tmp.Fd()), tx.tmp.Name(), fd, filepath.Dir(p), base, data, FilePerm, tx.settle); err != nil {
		return fmt.Errorf("write %s: %w", p, err)
	}
	crash.Point("after-rename")
	return fsyncDir(fd, filepath.Dir(p))
}

// writeAt writes data to a new temp file in tmpfd, at mode perm, fsyncs
// and closes it, and, once before (when not nil) returns nil, renames it
// over base in dirfd; a failure removes the temp file. tmpDir and dir are
// the two directories' paths, for the trace.
func writeAt(tmpfd int, tmpDir string, dirfd int, dir, base string, data []byte, perm os.FileMode, before func() error) error {
	if perm == FilePerm {
		// A yard file: its group's too in a shared directory.
		perm = os.FileMode(filePermIn(dirfd))
	}
	var fd int
	var tmp string
	for {
		tmp = "." + base + strconv.FormatUint(uint64(rand.Uint32()), 10)
		var err error
		fd, err = unix.Openat(tmpfd, tmp, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_CLOEXEC, uint32(perm))
		if err == nil {
			break
		}
		if !errors.Is(err, unix.EEXIST) && !errors.Is(err, unix.EINTR) {
			return err
		}
	}
	tmpPath := filepath.Join(tmpDir, tmp)
	trace(Op{Kind: OpCreate, Path: tmpPath})
	// The mode is set outright: the umask of whoever writes must not
	// narrow a yard file below what its other readers need.
	err := unix.Fchmod(fd, uint32(perm))
	if err == nil {
		err = writeSync(fd, tmpPath, data)
	}
	if cerr := unix.Close(fd); err == nil {
		err = cerr
	}
	if err == nil && before != nil {
		err = before()
	}
	if err == nil {
		err = unix.Renameat(tmpfd, tmp, dirfd, base)
		if err == nil {
			trace(Op{Kind: OpRename, Path: tmpPath, To: filepath.Join(dir, base)})
		}
	}
	if err != nil {
		if unix.Unlinkat(tmpfd, tmp, 0) == nil {
			trace(Op{Kind: OpUnlink, Path: tmpPath})
		}
	}
	return err
}

// writeAll writes all of data to fd.
func writeAll(fd int, data []byte) error {
	for len(data) > 0 {
		n, err := unix.Write(fd, data)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil {
			return err
		}
		if n == 0 {
			return io.ErrShortWrite
		}
		data = data[n:]
	}
	return nil
}

// writeSync writes all of data to fd, the new empty file path, and
// fsyncs it.
func writeSync(fd int, path string, data []byte) error {
	if err := writeAll(fd, data); err != nil {
		return err
	}
	trace(Op{Kind: OpWrite, Path: path, Data: data})
	crash.Point("after-temp-write")
	return syncFile(fd, path)
}

// The system calls that make data durable, through which every sync of
// the store goes: variables so that a test can see each is made, not only
// reported to the trace.
var (
	sysFsync     = unix.Fsync
	sysFdatasync = unix.Fdatasync
)

// syncFile makes the file fd, at path, durable: its data and metadata.
func syncFile(fd int, path string) error {
	for {
		err := sysFsync(fd)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil {
			return &os.PathError{Op: "fsync", Path: path, Err: err}
		}
		trace(Op{Kind: OpFsync, Path: path})
		return nil
	}
}

// syncData makes the data of the file fd, at path, durable, with the
// size a reader needs to find it, but not its times: for a file written
// in place or appended to, the cheaper half of fsync.
func syncData(fd int, path string) error {
	for {
		err := sysFdatasync(fd)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil {
			return &os.PathError{Op: "fdatasync", Path: path, Err: err}
		}
		trace(Op{Kind: OpFdatasync, Path: path})
		return nil
	}
}

// Scratch returns name in the transaction's directory open for reading
// and rewriting in place, created (mode 0600; 0660 in a directory shared
// with its group, see shareBits) when missing if create is set, else nil
// when missing; a file it creates is synced into the
// directory before it returns. It never follows a symlink and refuses
// anything but a regular file with one link. The descriptor is the
// transaction's, open until Update returns, so a file a transaction
// reads and rewrites several times is opened once. What is written
// through the descriptor itself is not synced; Overwrite writes durably.
func (tx *Tx) Scratch(name string, create bool) (*os.File, error) {
	if f := tx.scratch[name]; f != nil {
		return f, nil
	}
	p := tx.Path(name)
	if err := checkComponent(name); err != nil {
		return nil, fmt.Errorf("%s: %w", p, err)
	}
	// O_RDWR opens a FIFO without blocking, so no O_NONBLOCK, which would
	// have os.NewFile try the runtime's poller.
	flag := unix.O_RDWR | unix.O_NOFOLLOW | unix.O_CLOEXEC
	var fd int
	for {
		var err error
		fd, err = unix.Openat(int(tx.dir.Fd()), name, flag, 0o600)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if errors.Is(err, unix.ENOENT) && !create {
			return nil, nil
		}
		if errors.Is(err, unix.ENOENT) && flag&unix.O_CREAT == 0 {
			// Created exclusively, to know whether this transaction
			// made it and must sync its entry.
			flag |= unix.O_CREAT | unix.O_EXCL
			continue
		}
		if errors.Is(err, unix.ELOOP) {
			return nil, &os.PathError{Op: "open", Path: p, Err: errSymlink}
		}
		if err != nil {
			return nil, &os.PathError{Op: "open", Path: p, Err: err}
		}
		break
	}
	if flag&unix.O_CREAT != 0 {
		trace(Op{Kind: OpCreate, Path: p})
		if err := fsyncDir(int(tx.dir.Fd()), tx.d.path); err != nil {
			unix.Close(fd)
			return nil, err
		}
	}
	f := os.NewFile(uintptr(fd), p)
	if err := checkRegular(f); err != nil {
		f.Close()
		return nil, err
	}
	if create {
		if err := shareCreated(int(tx.dir.Fd()), "", fd); err != nil {
			f.Close()
			return nil, &os.PathError{Op: "chmod", Path: p, Err: err}
		}
	}
	if tx.scratch == nil {
		tx.scratch = map[string]*os.File{}
	}
	tx.scratch[name] = f
	return f, nil
}

// Overwrite makes data the whole content of the scratch file name (see
// Scratch; created when missing), written in place from its start and
// cut or grown to len(data); with durable, it is fdatasynced before
// Overwrite returns. Rewriting bytes of a file that keeps its size
// touches no directory, so a durable rewrite costs one sync: it is for a
// marker that must survive a power cut in the order of the writes around
// it (lib/event's .recording).
func (tx *Tx) Overwrite(name string, data []byte, durable bool) error {
	f, err := tx.overwrite(name, data)
	if err != nil || !durable {
		return err
	}
	return syncData(int(f.Fd()), f.Name())
}

// OverwriteAhead is Overwrite made durable while the transaction goes on:
// it returns once the bytes are written, and the transaction's next write,
// rename or removal, and its end, first wait for the sync and fail with
// its error. So a file written next overlaps its own write and sync with
// this one's sync, and still cannot be renamed into place, or outlive a
// power cut, before it.
func (tx *Tx) OverwriteAhead(name string, data []byte) error {
	f, err := tx.overwrite(name, data)
	if err != nil {
		return err
	}
	if err := tx.settle(); err != nil {
		return err
	}
	done := make(chan error, 1)
	tx.syncing = done
	go func() { done <- syncData(int(f.Fd()), f.Name()) }()
	return nil
}

// overwrite writes data over the scratch file name, after any sync still
// running, and returns the file.
func (tx *Tx) overwrite(name string, data []byte) (*os.File, error) {
	if err := tx.settle(); err != nil {
		return nil, err
	}
	f, err := tx.Scratch(name, true)
	if err != nil {
		return nil, err
	}
	fd, p := int(f.Fd()), f.Name()
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return nil, &os.PathError{Op: "stat", Path: p, Err: err}
	}
	if st.Size != int64(len(data)) {
		if err := unix.Ftruncate(fd, int64(len(data))); err != nil {
			return nil, &os.PathError{Op: "truncate", Path: p, Err: err}
		}
		trace(Op{Kind: OpTruncate, Path: p, Off: int64(len(data))})
	}
	n, err := unix.Pwrite(fd, data, 0)
	if err == nil && n < len(data) {
		err = io.ErrShortWrite
	}
	if err != nil {
		return nil, &os.PathError{Op: "write", Path: p, Err: err}
	}
	trace(Op{Kind: OpWrite, Path: p, Data: data})
	return f, nil
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
	if err := tx.settle(); err != nil {
		return err
	}
	fd, base, p, err := tx.resolve(name)
	if err != nil {
		return err
	}
	if fd != int(tx.dir.Fd()) {
		defer unix.Close(fd)
	}
	switch err := unix.Unlinkat(fd, base, 0); {
	case err == nil:
		trace(Op{Kind: OpUnlink, Path: p})
	case !errors.Is(err, unix.ENOENT):
		return &os.PathError{Op: "remove", Path: p, Err: err}
	}
	return fsyncDir(fd, filepath.Dir(p))
}

// resolve turns name, one or two plain components, into the directory
// that holds it (the transaction's own, or its sub-directory, created
// when missing, which the caller closes), its base name and its path.
func (tx *Tx) resolve(name string) (dirfd int, base, p string, err error) {
	dir, base := filepath.Split(name)
	p = filepath.Join(tx.d.path, name)
	if err := checkComponent(base); err != nil {
		return noFD, "", "", fmt.Errorf("%s: %w", p, err)
	}
	fd, _, err := tx.sub(dir, true)
	if err != nil {
		return noFD, "", "", err
	}
	return fd, base, p, nil
}

// WriteAtomic replaces path with data through a temp file in tmpDir, which
// must be on the same file system. Callers outside a Tx must hold a lock
// that covers tmpDir.
func WriteAtomic(path string, data []byte, tmpDir string) error {
	return writeAtomic(path, data, tmpDir, FilePerm)
}

// WriteMode replaces path with data at exactly mode perm, whatever the
// umask, through a temp file beside it: for keys and certificates, whose
// mode is part of their meaning.
func WriteMode(path string, data []byte, perm os.FileMode) error {
	return writeAtomic(path, data, filepath.Dir(path), perm)
}

// writeAtomic is Tx.Write by path: a temp file in tmpDir, written and
// fsynced, renamed over path, and path's directory fsynced.
func writeAtomic(path string, data []byte, tmpDir string, perm os.FileMode) error {
	dir := filepath.Dir(path)
	dirfd, err := openDir(dir)
	if err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	defer unix.Close(dirfd)
	tmpfd := dirfd
	if filepath.Clean(tmpDir) != dir {
		if tmpfd, err = openDir(tmpDir); err != nil {
			return fmt.Errorf("write %s: %w", path, err)
		}
		defer unix.Close(tmpfd)
	}
	if err := writeAt(tmpfd, filepath.Clean(tmpDir), dirfd, dir, filepath.Base(path), data, perm, nil); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	crash.Point("after-rename")
	return fsyncDir(dirfd, dir)
}

// SyncDir fsyncs dir, so a removal from it survives a power cut.
func SyncDir(dir string) error { return syncDir(dir) }

func syncDir(dir string) error {
	fd, err := openDir(dir)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	return fsyncDir(fd, dir)
}

// fsyncDir fsyncs the open directory fd; dir is its path, for errors.
func fsyncDir(fd int, dir string) error {
	for {
		err := sysFsync(fd)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil {
			return fmt.Errorf("fsync directory %s: %w", dir, err)
		}
		trace(Op{Kind: OpDirSync, Path: dir})
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
			return noFD, &os.PathError{Op: "open", Path: dir, Err: err}
		}
		return fd, nil
	}
}

// ReadFile reads a yard file. It refuses to follow a symlink, to open
// anything but a regular file with exactly one link, and files larger than
// MaxFile. O_NONBLOCK keeps a planted FIFO from blocking the reader.
func ReadFile(path string) ([]byte, error) {
	fd, size, err := openAt(unix.AT_FDCWD, path, path, unix.O_RDONLY)
	if err != nil {
		return nil, err
	}
	defer unix.Close(fd)
	return readFd(fd, path, size)
}

// readFd reads the regular file fd, of size bytes when it was opened;
// path names it in errors.
func readFd(fd int, path string, size int64) ([]byte, error) {
	return readFdInto(fd, path, size, nil)
}

// readFdInto is readFd reading into buf when it has room for size and
// the byte more that shows the end.
func readFdInto(fd int, path string, size int64, buf []byte) ([]byte, error) {
	if size > MaxFile {
		return nil, &os.PathError{Op: "read", Path: path, Err: fmt.Errorf("file is %d bytes, over the %d limit", size, MaxFile)}
	}
	if int64(cap(buf)) < size+1 {
		buf = make([]byte, 0, size+1)
	}
	buf = buf[:0]
	for {
		if len(buf) == cap(buf) {
			buf = append(buf, 0)[:len(buf)]
		}
		n, err := unix.Read(fd, buf[len(buf):cap(buf)])
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil {
			return nil, &os.PathError{Op: "read", Path: path, Err: err}
		}
		if n == 0 {
			return buf, nil
		}
		buf = buf[:len(buf)+n]
		// A regular file reads short only at its end: one read of a
		// file no longer than fstat said is the whole of it.
		if len(buf) < cap(buf) {
			return buf, nil
		}
		if len(buf) > MaxFile {
			return nil, &os.PathError{Op: "read", Path: path, Err: fmt.Errorf("file grew past the %d limit while read", MaxFile)}
		}
	}
}

// openAt opens name relative to dirfd (unix.AT_FDCWD with a path: by
// path) with flag, O_NOFOLLOW, O_NONBLOCK (a planted FIFO does not block
// the open) and O_CLOEXEC, and refuses anything but a regular file with
// one link. It returns the raw descriptor, sparing the two system calls
// an *os.File costs to try the runtime's poller, and the file's size; p
// is its path, for errors.
func openAt(dirfd int, name, p string, flag int) (int, int64, error) {
	var st unix.Stat_t
	fd, err := openStatAt(dirfd, name, p, flag, &st)
	return fd, st.Size, err
}

// openStatAt is openAt that fills in st, the fstat of what it opened.
func openStatAt(dirfd int, name, p string, flag int, st *unix.Stat_t) (int, error) {
	for {
		fd, err := unix.Openat(dirfd, name, flag|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_CLOEXEC, FilePerm)
		switch {
		case errors.Is(err, unix.EINTR):
			continue
		case errors.Is(err, unix.ELOOP):
			return noFD, &os.PathError{Op: "open", Path: p, Err: errSymlink}
		case err != nil:
			return noFD, &os.PathError{Op: "open", Path: p, Err: err}
		}
		if err := unix.Fstat(fd, st); err != nil {
			unix.Close(fd)
			return noFD, &os.PathError{Op: "stat", Path: p, Err: err}
		}
		if err := checkStat(p, st); err != nil {
			unix.Close(fd)
			return noFD, err
		}
		return fd, nil
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
	var st unix.Stat_t
	if err := unix.Fstat(int(f.Fd()), &st); err != nil {
		return &os.PathError{Op: "stat", Path: f.Name(), Err: err}
	}
	return checkStat(f.Name(), &st)
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

// Mkdir makes the directory path at mode perm, exactly, unless something
// is there already (created false), and syncs it into its parent before
// it returns: for directories outside the yard's stores (IMPYARD_HOME's),
// which no transaction walks to.
func Mkdir(path string, perm os.FileMode) (created bool, err error) {
	path = filepath.Clean(path)
	if err := unix.Mkdir(path, uint32(perm)); errors.Is(err, unix.EEXIST) {
		return false, nil
	} else if err != nil {
		return false, &os.PathError{Op: "mkdir", Path: path, Err: err}
	}
	trace(Op{Kind: OpMkdir, Path: path})
	if err := unix.Chmod(path, uint32(perm)); err != nil {
		return true, &os.PathError{Op: "chmod", Path: path, Err: err}
	}
	return true, syncDir(filepath.Dir(path))
}

// WriteNew writes path with data at mode perm unless something is there
// already (a symlink included, not followed; created false, nothing
// written), and makes it durable before it returns: the file written,
// fsynced, and synced into its directory. It is for a marker whose very
// existence is a promise (IMPYARD_HOME/executed/<gate>: this approval was
// used), which must not be replaced once made.
func WriteNew(path string, data []byte, perm os.FileMode) (created bool, err error) {
	fd, err := unix.Open(path, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, uint32(perm))
	if errors.Is(err, unix.EEXIST) {
		return false, nil
	}
	if err != nil {
		return false, &os.PathError{Op: "open", Path: path, Err: err}
	}
	trace(Op{Kind: OpCreate, Path: path})
	err = writeSync(fd, path, data)
	if cerr := unix.Close(fd); err == nil {
		err = cerr
	}
	if err == nil {
		err = syncDir(filepath.Dir(path))
	}
	if err != nil {
		return true, fmt.Errorf("write %s: %w", path, err)
	}
	return true, nil
}
