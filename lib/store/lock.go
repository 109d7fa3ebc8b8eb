package store

import (
	"errors"
	"os"
	"path/filepath"
	"time"

	"golang.org/x/sys/unix"
)

// tryLockAttempts bounds how often TryLock follows a lock file that keeps
// being replaced under it.
const tryLockAttempts = 8

// Lock takes the exclusive flock on path, creating it without following a
// symlink, and returns the function that releases it. It waits at most
// LockTimeout and then returns ErrBusy; still waiting after WaitNotice,
// it tells OnWait.
//
// A lock is only as good as the rendezvous: if the lock file is replaced
// (renamed over, or removed and created again) while this process waits on
// the old inode, the flock it then gets excludes no one who opened the new
// file. So after the flock it checks that path still names the inode it
// locked, and if not it lets go and locks the file the path names now,
// within the same LockTimeout.
func Lock(path string) (unlock func(), err error) {
	unlock, _, err = acquire(path, path, func() (*os.File, error) { return openLock(unix.AT_FDCWD, path, path, unix.O_CREAT) }, true)
	return unlock, err
}

// TryLock takes the exclusive flock on path only if no one holds it, with
// the same check as Lock that the path still names the locked inode.
func TryLock(path string) (unlock func(), ok bool, err error) {
	return acquire(path, path, func() (*os.File, error) { return openLock(unix.AT_FDCWD, path, path, unix.O_CREAT) }, false)
}

// lock takes the directory's lock and returns the directory it opened to
// take it. The lock file is opened relative to the directory as walked
// from the root, so a store directory replaced by a symlink is refused
// before any lock file is created through it; the transaction then works
// in the directory it locked.
//
// Without a lock file there, check (when set) runs before one is
// created, and its error is returned with nothing created.
func (d *Dir) lock(check func() error) (*os.File, func(), error) {
	p := filepath.Join(d.path, lockName)
	var dir *os.File
	unlock, _, err := acquire(p, filepath.Join(d.rel, lockName), func() (*os.File, error) {
		if dir != nil {
			dir.Close()
		}
		var err error
		if dir, err = openBelow(d.root, d.rel, false); err != nil {
			return nil, err
		}
		if check == nil {
			return openLock(int(dir.Fd()), lockName, p, unix.O_CREAT)
		}
		f, err := openLock(int(dir.Fd()), lockName, p, 0)
		if !errors.Is(err, os.ErrNotExist) {
			return f, err
		}
		if err := check(); err != nil {
			return nil, err
		}
		return openLock(int(dir.Fd()), lockName, p, unix.O_CREAT)
	}, true)
	if err != nil {
		if dir != nil {
			dir.Close()
		}
		return nil, nil, err
	}
	return dir, unlock, nil
}

// openLock opens the lock file name relative to dirfd without following
// a symlink, creating it with create (O_CREAT or 0); p is its path, for
// errors. It creates one 0640, or 0660 in a directory shared with its
// group (see shareBits). One it may read but not write, such as one a
// daemon made where the owner's authority files live, is opened for
// reading: flock(2) needs no more.
func openLock(dirfd int, name, p string, create int) (*os.File, error) {
	access := unix.O_RDWR
	for {
		fd, err := unix.Openat(dirfd, name, create|access|unix.O_NOFOLLOW|unix.O_CLOEXEC, FilePerm)
		switch {
		case err == nil && create != 0:
			if err := shareCreated(dirfd, filepath.Dir(p), fd); err != nil {
				unix.Close(fd)
				return nil, &os.PathError{Op: "lock", Path: p, Err: err}
			}
			return os.NewFile(uintptr(fd), p), nil
		case err == nil:
			return os.NewFile(uintptr(fd), p), nil
		case errors.Is(err, unix.EINTR):
			continue
		case errors.Is(err, unix.EACCES) && access == unix.O_RDWR:
			// O_NONBLOCK: a FIFO planted there must not block the
			// open for reading as it would not for O_RDWR.
			access = unix.O_RDONLY | unix.O_NONBLOCK
			continue
		case errors.Is(err, unix.ELOOP):
			return nil, &os.PathError{Op: "lock", Path: p, Err: errSymlink}
		}
		return nil, &os.PathError{Op: "lock", Path: p, Err: err}
	}
}

// acquire opens the lock file with open, flocks it (waiting until
// LockTimeout with wait, telling OnWait as name after WaitNotice) and
// keeps it only if path still names it.
func acquire(path, name string, open func() (*os.File, error), wait bool) (unlock func(), ok bool, err error) {
	start := time.Now()
	deadline := start.Add(LockTimeout)
	notice := start.Add(WaitNotice)
	for attempt := 1; ; attempt++ {
		f, err := open()
		if err != nil {
			return nil, false, err
		}
		got, err := flockUntil(f, deadline, wait, &notice, name)
		if err != nil || !got {
			return nil, false, err
		}
		same, err := names(path, f)
		if err != nil {
			release(f)
			return nil, false, &os.PathError{Op: "lock", Path: path, Err: err}
		}
		if same {
			return func() { release(f) }, true, nil
		}
		// The lock file was replaced while we waited: what we hold
		// excludes no one who opened the new one.
		release(f)
		if !wait && attempt >= tryLockAttempts {
			return nil, false, nil
		}
		if wait && time.Now().After(deadline) {
			return nil, false, &os.PathError{Op: "lock", Path: path, Err: ErrBusy}
		}
	}
}

// flockUntil takes the exclusive flock on f. Without wait it only tries;
// with wait it blocks until deadline. Blocking flock queues fairly in the
// kernel; the timer only decides when to stop waiting, and an abandoned
// waiter releases the lock as soon as it gets it. When it returns without
// the lock, f is closed (or will be, by the abandoned waiter). Still
// waiting at *notice, it tells OnWait, as name, and clears *notice so a
// retry does not tell again.
func flockUntil(f *os.File, deadline time.Time, wait bool, notice *time.Time, name string) (bool, error) {
	fd := int(f.Fd())
	for {
		err := unix.Flock(fd, unix.LOCK_EX|unix.LOCK_NB)
		if err == nil {
			return true, nil
		}
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if !errors.Is(err, unix.EWOULDBLOCK) {
			f.Close()
			return false, &os.PathError{Op: "lock", Path: f.Name(), Err: err}
		}
		break
	}
	if !wait {
		f.Close()
		return false, nil
	}
	done := make(chan error, 1)
	go func() {
		var err error
		for {
			if err = unix.Flock(fd, unix.LOCK_EX); !errors.Is(err, unix.EINTR) {
				break
			}
		}
		done <- err
	}()
	timer := time.NewTimer(time.Until(deadline))
	defer timer.Stop()
	var noticed <-chan time.Time
	if !notice.IsZero() && notice.Before(deadline) {
		t := time.NewTimer(time.Until(*notice))
		defer t.Stop()
		noticed = t.C
	}
	for {
		select {
		case <-noticed:
			*notice, noticed = time.Time{}, nil
			noticeWait(name, fd)
		case err := <-done:
			if err != nil {
				f.Close()
				return false, &os.PathError{Op: "lock", Path: f.Name(), Err: err}
			}
			return true, nil
		case <-timer.C:
			go func() {
				<-done
				f.Close()
			}()
			return false, &os.PathError{Op: "lock", Path: f.Name(), Err: ErrBusy}
		}
	}
}

// names reports whether path (not followed) is the file f has open.
func names(path string, f *os.File) (bool, error) {
	var held, now unix.Stat_t
	if err := unix.Fstat(int(f.Fd()), &held); err != nil {
		return false, err
	}
	err := unix.Lstat(path, &now)
	if errors.Is(err, unix.ENOENT) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	return held.Dev == now.Dev && held.Ino == now.Ino, nil
}

func release(f *os.File) {
	_ = unix.Flock(int(f.Fd()), unix.LOCK_UN)
	f.Close()
}

// Share takes a shared flock on path, creating it without following a
// symlink, and returns the function that releases it: any number of
// processes may share it, and Held sees it while one does. It waits at
// most LockTimeout for an exclusive holder (a Held probe holds it only
// for an instant), telling OnWait after WaitNotice.
func Share(path string) (unlock func(), err error) {
	f, err := openLock(unix.AT_FDCWD, path, path, unix.O_CREAT)
	if err != nil {
		return nil, err
	}
	deadline := time.Now().Add(LockTimeout)
	notice := time.Now().Add(WaitNotice)
	for {
		err := unix.Flock(int(f.Fd()), unix.LOCK_SH|unix.LOCK_NB)
		switch {
		case err == nil:
			// As Lock does: a lock file replaced while this waited is
			// not the one Held looks at, so take the one the path names.
			same, err := names(path, f)
			if err != nil {
				release(f)
				return nil, &os.PathError{Op: "lock", Path: path, Err: err}
			}
			if same {
				return func() { release(f) }, nil
			}
			release(f)
			if f, err = openLock(unix.AT_FDCWD, path, path, unix.O_CREAT); err != nil {
				return nil, err
			}
			continue
		case errors.Is(err, unix.EINTR):
			continue
		case !errors.Is(err, unix.EWOULDBLOCK):
			f.Close()
			return nil, &os.PathError{Op: "lock", Path: path, Err: err}
		case time.Now().After(deadline):
			f.Close()
			return nil, &os.PathError{Op: "lock", Path: path, Err: ErrBusy}
		case !notice.IsZero() && time.Now().After(notice):
			notice = time.Time{}
			noticeWait(path, int(f.Fd()))
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// Held reports whether some process holds a flock (shared or exclusive)
// on path, without creating it or following a symlink: a missing file is
// not held. It tries, and at once lets go of, an exclusive flock, so a
// process that tries the same lock in that instant without waiting finds
// it busy.
func Held(path string) (bool, error) {
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_CLOEXEC|unix.O_NONBLOCK, 0)
	switch {
	case errors.Is(err, unix.ENOENT):
		return false, nil
	case errors.Is(err, unix.ELOOP):
		return false, &os.PathError{Op: "lock", Path: path, Err: errSymlink}
	case err != nil:
		return false, &os.PathError{Op: "lock", Path: path, Err: err}
	}
	defer unix.Close(fd)
	for {
		err := unix.Flock(fd, unix.LOCK_EX|unix.LOCK_NB)
		switch {
		case err == nil:
			_ = unix.Flock(fd, unix.LOCK_UN)
			return false, nil
		case errors.Is(err, unix.EINTR):
			continue
		case errors.Is(err, unix.EWOULDBLOCK):
			return true, nil
		}
		return false, &os.PathError{Op: "lock", Path: path, Err: err}
	}
}
