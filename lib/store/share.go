package store

import (
	"os"

	"golang.org/x/sys/unix"
)

// A yard can be shared with a group: the daemons run as root and the
// owner's commands as a member of that group (impyard(7), "A yard shared
// with a group"). A directory is shared when it is setgid and writable by
// its group, as 'impsup init --group' makes the work directories. Both
// bits are wanted so that sharing is always someone's choice: setgid
// alone is inherited by every directory made below a setgid yard root,
// imps/ and policies/ included, and group write alone would hand files to
// whatever primary group their creator has.
//
// In a shared directory the store creates files readable and writable by
// the group (0660: the other side appends to a log, rewrites a marker in
// place or opens a lock file for writing), and directories writable and
// setgid as their parent (02770), each set outright after creation, since
// the creator's umask would narrow it. Everywhere else modes stay as they
// were: files and lock files 0640, directories 0750; so a directory
// that holds authority files, which must not be group-writable, never
// gives its group write on anything created in it.
const shareBits = unix.S_ISGID | 0o020

const (
	sharedFilePerm = 0o660
	sharedDirPerm  = unix.S_ISGID | 0o770
)

// sharedStat reports whether st is a directory shared with its group.
func sharedStat(st *unix.Stat_t) bool { return st.Mode&shareBits == shareBits }

// sharedIn reports whether the directory open as dirfd, or named dir when
// dirfd is unix.AT_FDCWD, is shared with its group; a directory that
// cannot be looked at is taken as not shared, the narrower choice.
func sharedIn(dirfd int, dir string) bool {
	var st unix.Stat_t
	var err error
	if dirfd == unix.AT_FDCWD {
		err = unix.Stat(dir, &st)
	} else {
		err = unix.Fstat(dirfd, &st)
	}
	return err == nil && sharedStat(&st)
}

// filePermIn is the mode of a file written into the directory dirfd.
func filePermIn(dirfd int) uint32 {
	if sharedIn(dirfd, "") {
		return sharedFilePerm
	}
	return FilePerm
}

// shareCreated gives fd, just opened with O_CREAT in the directory dirfd
// (or dir, by path), the group read and write a shared directory wants,
// when this process made it and its umask narrowed the mode. A file
// another account made keeps the mode that account gave it.
func shareCreated(dirfd int, dir string, fd int) error {
	if !sharedIn(dirfd, dir) {
		return nil
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return err
	}
	if st.Mode&0o777 == sharedFilePerm || int(st.Uid) != os.Geteuid() {
		return nil
	}
	return unix.Fchmod(fd, sharedFilePerm)
}
