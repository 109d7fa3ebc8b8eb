package store

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"
)

// noFD is the descriptor returned beside an error: never one that could
// be open.
const noFD = -1

// errSymlink and errNotDir say why a path below the root was refused.
var (
	errSymlink = errors.New("is a symlink; refusing to follow it")
	errNotDir  = errors.New("is not a directory")
)

// openBelow opens rel below root one component at a time, each with
// openat(2) and O_NOFOLLOW|O_DIRECTORY relative to the one before, so no
// symlink below root is followed, not even one swapped in during the walk.
// With create, missing components are made. root itself is opened by path:
// where the yard lives is the operator's choice, and a symlink there is
// theirs. Every reader and writer of the yard walks this way; it is the
// one place that decides what below the root may be followed (nothing).
func openBelow(root, rel string, create bool) (*os.File, error) {
	p := filepath.Clean(root)
	fd, err := unix.Open(p, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, &os.PathError{Op: "open", Path: p, Err: err}
	}
	if rel != "" && rel != "." {
		next, np, err := walk(fd, p, rel, create)
		unix.Close(fd)
		if err != nil {
			return nil, err
		}
		fd, p = next, np
	}
	return os.NewFile(uintptr(fd), p), nil
}

// walk opens rel below the open directory fd (whose path is p) as
// openBelow does, leaving fd open, and returns the new descriptor with
// its path.
func walk(fd int, p, rel string, create bool) (int, string, error) {
	cur := fd
	for _, c := range strings.Split(filepath.ToSlash(filepath.Clean(rel)), "/") {
		if err := checkComponent(c); err != nil {
			if cur != fd {
				unix.Close(cur)
			}
			return noFD, "", fmt.Errorf("%s: %w", filepath.Join(p, c), err)
		}
		p = filepath.Join(p, c)
		next, err := openDirAt(cur, c, p, create)
		if cur != fd {
			unix.Close(cur)
		}
		if err != nil {
			return noFD, "", err
		}
		cur = next
	}
	return cur, p, nil
}

// openDirAt opens the directory name inside dirfd without following a
// symlink, creating it first with create; p is its path, for errors.
func openDirAt(dirfd int, name, p string, create bool) (int, error) {
	made := false
	for {
		fd, err := unix.Openat(dirfd, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		switch {
		case err == nil && made && sharedIn(dirfd, ""):
			// Set through the descriptor, never by name: what was
			// made could have been swapped for a symlink since.
			if err := unix.Fchmod(fd, sharedDirPerm); err != nil {
				unix.Close(fd)
				return noFD, &os.PathError{Op: "chmod", Path: p, Err: err}
			}
			return fd, nil
		case err == nil:
			return fd, nil
		case errors.Is(err, unix.EINTR):
			continue
		case errors.Is(err, unix.ENOENT) && create:
			err := unix.Mkdirat(dirfd, name, dirPerm)
			if err != nil && !errors.Is(err, unix.EEXIST) {
				return noFD, &os.PathError{Op: "mkdir", Path: p, Err: err}
			}
			if err == nil {
				trace(Op{Kind: OpMkdir, Path: p})
			}
			// A new directory is only an entry in its parent until the
			// parent is synced: a file acknowledged inside it could vanish
			// with it in a power cut. Synced also when another process
			// made it a moment ago (EEXIST), since that one may not have
			// synced it yet.
			if err := fsyncDir(dirfd, filepath.Dir(p)); err != nil {
				return noFD, err
			}
			made, create = err == nil, false
			continue
		case errors.Is(err, unix.ELOOP), errors.Is(err, unix.ENOTDIR):
			return noFD, &os.PathError{Op: "open", Path: p, Err: whyNotDir(dirfd, name)}
		}
		return noFD, &os.PathError{Op: "open", Path: p, Err: err}
	}
}

// whyNotDir tells a symlink from another kind of file where a directory
// was wanted.
func whyNotDir(dirfd int, name string) error {
	var st unix.Stat_t
	if unix.Fstatat(dirfd, name, &st, unix.AT_SYMLINK_NOFOLLOW) == nil && st.Mode&unix.S_IFMT == unix.S_IFLNK {
		return errSymlink
	}
	return errNotDir
}

// ReadFileIn reads the yard file rel below root like ReadFile, and also
// refuses it when any directory on the way below root is a symlink.
func ReadFileIn(root, rel string) ([]byte, error) {
	dir, base := filepath.Split(filepath.Clean(rel))
	if err := checkComponent(base); err != nil {
		return nil, fmt.Errorf("%s: %w", filepath.Join(root, rel), err)
	}
	d, err := OpenIn(root, dir)
	if err != nil {
		return nil, err
	}
	defer d.Close()
	return d.ReadFile(base)
}

// Opened is a directory opened by walking from the root without following
// a symlink; what is read through it stays inside it, so a listing reads
// each of many files with one openat(2) instead of a walk each.
type Opened struct {
	f *os.File
}

// OpenIn opens the directory rel below root (see ReadDirIn).
func OpenIn(root, rel string) (*Opened, error) {
	f, err := openBelow(root, rel, false)
	if err != nil {
		return nil, err
	}
	return &Opened{f: f}, nil
}

// Close releases the directory.
func (o *Opened) Close() error { return o.f.Close() }

// ReadDir lists the directory.
func (o *Opened) ReadDir() ([]fs.DirEntry, error) {
	entries, err := o.f.ReadDir(-1)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", o.f.Name(), err)
	}
	return entries, nil
}

// Names lists the names in the directory, unsorted, without reading
// anything about them.
func (o *Opened) Names() ([]string, error) {
	names, err := o.f.Readdirnames(-1)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", o.f.Name(), err)
	}
	return names, nil
}

// FileID is what tells one version of a yard file from another: files
// are replaced, never written in place, so a new version is a new inode,
// and a change in place by hand changes the change time, which nothing
// can set back (to the kernel's clock tick, a few milliseconds: a second
// change in place within the tick of the first may go unseen).
type FileID struct {
	dev, ino     uint64
	size         int64
	mtime, ctime unix.Timespec
}

func fileID(st *unix.Stat_t) FileID {
	return FileID{dev: st.Dev, ino: st.Ino, size: st.Size, mtime: st.Mtim, ctime: st.Ctim}
}

// PathID returns the identity of what path names now, following a
// symlink there only with follow. A missing file is an error wrapping
// os.ErrNotExist.
func PathID(path string, follow bool) (FileID, error) {
	var st unix.Stat_t
	stat := unix.Lstat
	if follow {
		stat = unix.Stat
	}
	if err := stat(path, &st); err != nil {
		return FileID{}, &os.PathError{Op: "stat", Path: path, Err: err}
	}
	return fileID(&st), nil
}

// ID returns the identity of what name in the directory is now, without
// following a symlink.
func (o *Opened) ID(name string) (FileID, error) {
	if err := checkComponent(name); err != nil {
		return FileID{}, fmt.Errorf("%s: %w", filepath.Join(o.f.Name(), name), err)
	}
	var st unix.Stat_t
	if err := unix.Fstatat(int(o.f.Fd()), name, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return FileID{}, &os.PathError{Op: "stat", Path: filepath.Join(o.f.Name(), name), Err: err}
	}
	return fileID(&st), nil
}

// ReadFile reads the file name in the directory with ReadFile's checks.
// It is safe to call from several goroutines at once. It works on the
// bare descriptor, not an os.File: a listing reads thousands of files
// this way, and an os.File costs each of them two fcntl calls, a failed
// registration with the poller and a second fstat.
func (o *Opened) ReadFile(name string) ([]byte, error) {
	b, _, err := o.readFile(name, nil)
	return b, err
}

// ReadFileID is ReadFile that also returns the identity of the file it
// read.
func (o *Opened) ReadFileID(name string) ([]byte, FileID, error) {
	b, st, err := o.readFile(name, nil)
	return b, fileID(&st), err
}

// ReadFileInto is ReadFileID reading into buf when the file fits in its
// capacity, and into a new slice when not: a listing reads 100,000 files
// each of which it decodes and drops, and one buffer a reader spares the
// collector as many allocations of the file's size.
func (o *Opened) ReadFileInto(name string, buf []byte) ([]byte, FileID, error) {
	b, st, err := o.readFile(name, buf)
	return b, fileID(&st), err
}

func (o *Opened) readFile(name string, buf []byte) ([]byte, unix.Stat_t, error) {
	var st unix.Stat_t
	if err := checkComponent(name); err != nil {
		return nil, st, fmt.Errorf("%s: %w", filepath.Join(o.f.Name(), name), err)
	}
	// Made only for errors: most reads have none.
	p := o.f.Name() + "/" + name
	fd, err := openStatAt(int(o.f.Fd()), name, p, unix.O_RDONLY, &st)
	if err != nil {
		return nil, st, err
	}
	defer unix.Close(fd)
	b, err := readFdInto(fd, p, st.Size, buf)
	return b, st, err
}

// ReadDirIn lists the directory rel below root, refusing it when it or
// any directory on the way is a symlink. A missing directory has no
// entries.
func ReadDirIn(root, rel string) ([]fs.DirEntry, error) {
	d, err := OpenIn(root, rel)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	defer d.Close()
	return d.ReadDir()
}

// ExistsIn reports whether rel below root names anything (a symlink
// included, which is not followed), refusing a symlinked directory on the
// way.
func ExistsIn(root, rel string) (bool, error) {
	dir, base := filepath.Split(filepath.Clean(rel))
	if err := checkComponent(base); err != nil {
		return false, fmt.Errorf("%s: %w", filepath.Join(root, rel), err)
	}
	d, err := OpenIn(root, dir)
	if errors.Is(err, os.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	defer d.Close()
	return d.Exists(base)
}

// Exists reports whether rel, one or more plain components, names
// anything inside the directory (a symlink included, which is not
// followed), refusing a symlinked directory on the way; a missing
// directory on the way is a missing file.
func (o *Opened) Exists(rel string) (bool, error) {
	dir, base := filepath.Split(filepath.Clean(rel))
	if err := checkComponent(base); err != nil {
		return false, fmt.Errorf("%s: %w", filepath.Join(o.f.Name(), rel), err)
	}
	fd, p := int(o.f.Fd()), o.f.Name()
	if dir != "" {
		sub, sp, err := walk(fd, p, dir, false)
		if errors.Is(err, os.ErrNotExist) {
			return false, nil
		}
		if err != nil {
			return false, err
		}
		defer unix.Close(sub)
		fd, p = sub, sp
	}
	var st unix.Stat_t
	err := unix.Fstatat(fd, base, &st, unix.AT_SYMLINK_NOFOLLOW)
	if errors.Is(err, unix.ENOENT) {
		return false, nil
	}
	if err != nil {
		return false, &os.PathError{Op: "stat", Path: filepath.Join(p, base), Err: err}
	}
	return true, nil
}

// Below returns path relative to root, or an error when path is not inside
// root.
func Below(root, path string) (string, error) {
	rel, err := filepath.Rel(filepath.Clean(root), filepath.Clean(path))
	if err != nil || rel == ".." || strings.HasPrefix(rel, "../") || filepath.IsAbs(rel) {
		return "", fmt.Errorf("%s: not inside %s", path, root)
	}
	return rel, nil
}

// ReadFileVisit reads the yard file rel below root like ReadFileIn, and
// passes visit the fstat of every descriptor on the way, in order: root,
// each directory below it, then the file; the file is read from the very
// descriptor visited, so what visit accepted is what is read. An error
// from visit stops the walk and is returned as it is. A missing file is an
// error wrapping os.ErrNotExist after its directories were visited; a
// missing directory stops the walk there.
func ReadFileVisit(root, rel string, visit func(path string, st *unix.Stat_t) error) ([]byte, error) {
	rel = filepath.Clean(rel)
	dir, base := filepath.Split(rel)
	if err := checkComponent(base); err != nil {
		return nil, fmt.Errorf("%s: %w", filepath.Join(root, rel), err)
	}
	p := filepath.Clean(root)
	fd, err := unix.Open(p, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, &os.PathError{Op: "open", Path: p, Err: err}
	}
	defer func() { unix.Close(fd) }()
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return nil, &os.PathError{Op: "stat", Path: p, Err: err}
	}
	if err := visit(p, &st); err != nil {
		return nil, err
	}
	if dir = filepath.Clean(dir); dir != "." {
		for _, c := range strings.Split(filepath.ToSlash(dir), "/") {
			if err := checkComponent(c); err != nil {
				return nil, fmt.Errorf("%s: %w", filepath.Join(p, c), err)
			}
			p = filepath.Join(p, c)
			next, err := openDirAt(fd, c, p, false)
			if err != nil {
				return nil, err
			}
			unix.Close(fd)
			fd = next
			if err := unix.Fstat(fd, &st); err != nil {
				return nil, &os.PathError{Op: "stat", Path: p, Err: err}
			}
			if err := visit(p, &st); err != nil {
				return nil, err
			}
		}
	}
	p = filepath.Join(p, base)
	ffd, err := openStatAt(fd, base, p, unix.O_RDONLY, &st)
	if err != nil {
		return nil, err
	}
	defer unix.Close(ffd)
	if err := visit(p, &st); err != nil {
		return nil, err
	}
	return readFd(ffd, p, st.Size)
}
