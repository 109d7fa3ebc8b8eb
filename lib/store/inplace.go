package store

import (
	"errors"
	"io"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"
)

// WriteIn writes b at off of f, a file Scratch opened, in place: for the
// small markers a transaction rewrites rather than replaces. Like Scratch
// it syncs nothing. It is here, not with its callers, so that every
// change to the yard goes through the store and its trace.
func WriteIn(f *os.File, b []byte, off int64) error {
	n, err := unix.Pwrite(int(f.Fd()), b, off)
	if err == nil && n < len(b) {
		err = io.ErrShortWrite
	}
	if err != nil {
		return &os.PathError{Op: "write", Path: f.Name(), Err: err}
	}
	trace(Op{Kind: OpWrite, Path: f.Name(), Off: off, Data: b})
	return nil
}

// TruncateIn cuts (or grows) f, a file Scratch opened, to size bytes.
func TruncateIn(f *os.File, size int64) error {
	if err := unix.Ftruncate(int(f.Fd()), size); err != nil {
		return &os.PathError{Op: "truncate", Path: f.Name(), Err: err}
	}
	trace(Op{Kind: OpTruncate, Path: f.Name(), Off: size})
	return nil
}

// tracing reports whether a trace hook is set, so that what only the
// trace needs (whether an O_CREAT open created) is found out only then.
func tracing() bool { return traceHook.Load() != nil }

// existsAt reports whether name in dirfd names anything, not following a
// symlink.
func existsAt(dirfd int, name string) bool {
	var st unix.Stat_t
	return unix.Fstatat(dirfd, name, &st, unix.AT_SYMLINK_NOFOLLOW) == nil
}

// Mkdir makes the directory path at mode perm (narrowed by the umask, as
// mkdir(2) does) when it is missing, and syncs its parent so that the new
// entry, and what is later made durable inside it, survives a power cut.
// A directory already there is left as it is, and not an error.
func Mkdir(path string, perm os.FileMode) error {
	err := unix.Mkdir(path, uint32(perm.Perm()))
	if errors.Is(err, unix.EEXIST) {
		return nil
	}
	if err != nil {
		return &os.PathError{Op: "mkdir", Path: path, Err: err}
	}
	trace(Op{Kind: OpMkdir, Path: path})
	return syncDir(filepath.Dir(path))
}
