package yard

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"

	"github.com/impyard/impyard/lib/store"
)

// ErrUnsafe is ReadAuthority's error for an authority file that a writer
// of the yard could have written: the file, or a directory above it up to
// the yard root, is owned by another account or writable by its group or
// by others.
var ErrUnsafe = errors.New("unsafe authority file")

// ReadAuthority reads an authority file: a file that grants trust,
// credential injection, reachability, mounts or execution (org.toml,
// policies/gateway.json, imps/<imp>/imp.toml). It is strict modes, as
// sshd treats authorized_keys: the file and every directory above it up
// to and including the yard root must be owned by root or by the owner of
// the yard root, and none may be writable by its group or by others; no
// symlink below the root is followed. Anything else is an error wrapping
// ErrUnsafe that names the path, its owner and mode, and what is wrong.
//
// Why that is enough: an account that can write the yard's work
// directories but not IMPYARD_HOME is by construction not the owner (a
// process with the owner's uid can always chmod and write IMPYARD_HOME),
// so it can neither own these files nor write where they live. Why those
// owners: the yard root's owner can already rename anything below the
// root, and root can do anything, so trusting their files grants no one
// anything new; the process's own uid is no criterion, since a program run
// by another account on the owner's yard must take the owner's files and
// no one else's. It does not protect against a process that runs as the
// owner or as root.
//
// path is below the root, or (a policy named on the command line)
// elsewhere: then its symlinks are resolved, as the operator named it, and
// the check runs from / down.
func (y *Yard) ReadAuthority(path string) ([]byte, error) {
	var owner uint32
	check := func(p string, st *unix.Stat_t) error {
		perm := st.Mode & 0o7777
		switch {
		case st.Uid != 0 && st.Uid != owner:
			return fmt.Errorf("%w: %s is owned by uid %d, mode %04o: only root or the yard's owner (uid %d) may own it (chown it, or remove it)", ErrUnsafe, p, st.Uid, perm, owner)
		case perm&0o022 != 0:
			return fmt.Errorf("%w: %s is writable by its group or others (owner uid %d, mode %04o) (chmod go-w %s)", ErrUnsafe, p, st.Uid, perm, p)
		}
		return nil
	}
	if rel, err := store.Below(y.Root, path); err == nil {
		// The root is the first descriptor visited: its owner is taken
		// from the very directory walked.
		first := true
		return store.ReadFileVisit(y.Root, rel, func(p string, st *unix.Stat_t) error {
			if first {
				owner, first = st.Uid, false
			}
			return check(p, st)
		})
	}
	var root unix.Stat_t
	if err := unix.Stat(y.Root, &root); err != nil {
		return nil, &os.PathError{Op: "stat", Path: y.Root, Err: err}
	}
	owner = root.Uid
	abs, err := filepath.Abs(path)
	if err != nil {
		return nil, err
	}
	real, err := filepath.EvalSymlinks(abs)
	if err != nil {
		return nil, err
	}
	rel, err := filepath.Rel("/", real)
	if err != nil {
		return nil, err
	}
	return store.ReadFileVisit("/", rel, check)
}

// CheckAuthority is ReadAuthority without the content: nil for a file
// that passes, an error wrapping ErrUnsafe for one that does not, and
// one wrapping os.ErrNotExist for a missing one (after its directories
// were checked).
func (y *Yard) CheckAuthority(path string) error {
	_, err := y.ReadAuthority(path)
	return err
}
