package store

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"
)

// Rename gives the file from the name to, both inside the transaction's
// directory, in one renameat2(2) that never replaces what is at to
// (RENAME_NOREPLACE: an error wrapping fs.ErrExist, naming to), then
// fsyncs the directories involved, so the new name survives a power
// cut. A reader sees the file under one name or the other, never
// neither. It is for a file whose name changes, not its content.
func (tx *Tx) Rename(from, to string) error {
	if err := tx.settle(); err != nil {
		return err
	}
	ffd, fbase, fp, err := tx.resolve(from)
	if err != nil {
		return err
	}
	if ffd != int(tx.dir.Fd()) {
		defer unix.Close(ffd)
	}
	tfd, tbase, tp, err := tx.resolve(to)
	if err != nil {
		return err
	}
	if tfd != int(tx.dir.Fd()) {
		defer unix.Close(tfd)
	}
	for {
		err = unix.Renameat2(ffd, fbase, tfd, tbase, unix.RENAME_NOREPLACE)
		if !errors.Is(err, unix.EINTR) {
			break
		}
	}
	switch {
	case errors.Is(err, unix.EEXIST):
		return &os.PathError{Op: "rename " + fp + " to", Path: tp, Err: err}
	case err != nil:
		return &os.PathError{Op: "rename", Path: fp, Err: err}
	}
	trace(Op{Kind: OpRename, Path: fp, To: tp})
	if err := fsyncDir(tfd, filepath.Dir(tp)); err != nil {
		return err
	}
	if filepath.Dir(fp) == filepath.Dir(tp) {
		return nil
	}
	return fsyncDir(ffd, filepath.Dir(fp))
}

// RegularIn reports whether rel below root names a regular file, without
// following a symlink: a directory, a symlink, anything else or nothing
// there is not one. A directory on the way that is a symlink is refused
// (see ReadFileIn); one that is missing means nothing is there.
func RegularIn(root, rel string) (bool, error) {
	dir, base := filepath.Split(filepath.Clean(rel))
	if err := checkComponent(base); err != nil {
		return false, fmt.Errorf("%s: %w", filepath.Join(root, rel), err)
	}
	d, err := OpenIn(root, dir)
	if errors.Is(err, fs.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	defer d.Close()
	var st unix.Stat_t
	err = unix.Fstatat(int(d.f.Fd()), base, &st, unix.AT_SYMLINK_NOFOLLOW)
	if errors.Is(err, unix.ENOENT) {
		return false, nil
	}
	if err != nil {
		return false, &os.PathError{Op: "stat", Path: filepath.Join(d.f.Name(), base), Err: err}
	}
	return st.Mode&unix.S_IFMT == unix.S_IFREG, nil
}
