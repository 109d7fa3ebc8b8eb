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
		for _, c := range strings.Split(filepath.ToSlash(filepath.Clean(rel)), "/") {
			if err := checkComponent(c); err != nil {
				unix.Close(fd)
				return nil, fmt.Errorf("%s: %w", filepath.Join(p, c), err)
			}
			p = filepath.Join(p, c)
			next, err := openDirAt(fd, c, p, create)
			unix.Close(fd)
			if err != nil {
				return nil, err
			}
			fd = next
		}
	}
	return os.NewFile(uintptr(fd), p), nil
}

// openDirAt opens the directory name inside dirfd without following a
// symlink, creating it first with create; p is its path, for errors.
func openDirAt(dirfd int, name, p string, create bool) (int, error) {
	for {
		fd, err := unix.Openat(dirfd, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		switch {
		case err == nil:
			return fd, nil
		case errors.Is(err, unix.EINTR):
			continue
		case errors.Is(err, unix.ENOENT) && create:
			if err := unix.Mkdirat(dirfd, name, dirPerm); err != nil && !errors.Is(err, unix.EEXIST) {
				return -1, &os.PathError{Op: "mkdir", Path: p, Err: err}
			}
			create = false
			continue
		case errors.Is(err, unix.ELOOP), errors.Is(err, unix.ENOTDIR):
			return -1, &os.PathError{Op: "open", Path: p, Err: whyNotDir(dirfd, name)}
		}
		return -1, &os.PathError{Op: "open", Path: p, Err: err}
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
	f, err := openFileIn(root, rel)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return readOpen(f)
}

func openFileIn(root, rel string) (*os.File, error) {
	dir, base := filepath.Split(filepath.Clean(rel))
	if err := checkComponent(base); err != nil {
		return nil, fmt.Errorf("%s: %w", filepath.Join(root, rel), err)
	}
	d, err := openBelow(root, dir, false)
	if err != nil {
		return nil, err
	}
	defer d.Close()
	p := filepath.Join(d.Name(), base)
	for {
		fd, err := unix.Openat(int(d.Fd()), base, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if errors.Is(err, unix.ELOOP) {
			return nil, &os.PathError{Op: "open", Path: p, Err: errSymlink}
		}
		if err != nil {
			return nil, &os.PathError{Op: "open", Path: p, Err: err}
		}
		f := os.NewFile(uintptr(fd), p)
		if err := checkRegular(f); err != nil {
			f.Close()
			return nil, err
		}
		return f, nil
	}
}

// ReadDirIn lists the directory rel below root, refusing it when it or
// any directory on the way is a symlink. A missing directory has no
// entries.
func ReadDirIn(root, rel string) ([]fs.DirEntry, error) {
	d, err := openBelow(root, rel, false)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	defer d.Close()
	entries, err := d.ReadDir(-1)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", d.Name(), err)
	}
	return entries, nil
}

// ExistsIn reports whether rel below root names anything (a symlink
// included, which is not followed), refusing a symlinked directory on the
// way.
func ExistsIn(root, rel string) (bool, error) {
	dir, base := filepath.Split(filepath.Clean(rel))
	if err := checkComponent(base); err != nil {
		return false, fmt.Errorf("%s: %w", filepath.Join(root, rel), err)
	}
	d, err := openBelow(root, dir, false)
	if errors.Is(err, os.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	defer d.Close()
	var st unix.Stat_t
	err = unix.Fstatat(int(d.Fd()), base, &st, unix.AT_SYMLINK_NOFOLLOW)
	if errors.Is(err, unix.ENOENT) {
		return false, nil
	}
	if err != nil {
		return false, &os.PathError{Op: "stat", Path: filepath.Join(d.Name(), base), Err: err}
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
