package yard

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
)

// WorkDirs are the directories both sides write in a yard shared with a
// group: the daemons, as root, and the owner's commands (impq, impgate),
// as a member of the group. Every other directory at the top (imps/,
// policies/) holds authority files and is never group-writable.
var WorkDirs = [][]string{
	{"queue"}, {"gates"}, {"gates", "pending"}, {"gates", "resolved"},
	{"journal"}, {"mailbox"}, {"runs"}, {"blobs"}, {"ledger"},
	{"outbox"}, {"inbound"}, {"signers"}, {"pause"},
}

// authority are the paths below the root, besides the root itself, that
// Share gives to the owner, readable by the group and writable by no one
// else: where the authority files live, and those files.
var authority = [][]string{{"imps"}, {"policies"}, {"org.toml"}, {"policies", "gateway.json"}}

// Share shares the yard with the group gid, as 'impsup init --group'
// does; uid, when not -1, becomes the owner of the yard root and of its
// authority files, so that account may edit org.toml and its imps'
// files, and the daemons accept them (ReadAuthority takes files of root
// and of the root's owner). It must run as root.
//
// Everything in the yard becomes group gid, every directory setgid, so
// that what is made there later is the group's too; everything outside
// the work directories becomes uid's, when not -1. The root, imps/ and
// policies/ become 02750: the
// group may read, never write, so strict modes still hold. Each of
// WorkDirs is created if missing and it and everything already in it
// becomes group gid: directories 02770, so that lib/store shares what
// either side creates there with the group (files 0660, directories
// 02770), and files gain group read and write. A symlink is neither
// followed nor changed. It returns the directories it created.
func (y *Yard) Share(uid, gid int) (made []string, err error) {
	for _, rel := range WorkDirs {
		p, ok, err := y.Mkdir(rel...)
		if err != nil {
			return made, err
		}
		if ok {
			made = append(made, p)
		}
	}
	work := map[string]bool{}
	for _, rel := range WorkDirs {
		work[y.Path(rel[0])] = true
	}
	// Everything becomes the group's, .tmp and .lock directories and
	// files included: a temp file takes the group of the .tmp it is made
	// in, and keeps it when renamed into place. Outside the work
	// directories everything becomes the owner's too: the lock and temp
	// files an edit of org.toml takes, the marker, memory files.
	err = filepath.WalkDir(y.Root, func(p string, d fs.DirEntry, err error) error {
		switch {
		case err != nil:
			return err
		case d.Type()&fs.ModeSymlink != 0:
			return nil
		}
		if work[p] && d.IsDir() {
			return filepath.SkipDir
		}
		if err := os.Lchown(p, uid, gid); err != nil {
			return err
		}
		if !d.IsDir() {
			return nil
		}
		// chown cleared setgid; every directory of a shared yard has it.
		fi, err := d.Info()
		if err != nil {
			return err
		}
		return os.Chmod(p, fi.Mode().Perm()|os.ModeSetgid)
	})
	if err != nil {
		return made, err
	}
	if err := chownMode(y.Root, uid, gid, os.ModeSetgid|0o750); err != nil {
		return made, err
	}
	for _, rel := range authority {
		p := y.Path(rel...)
		fi, err := os.Lstat(p)
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return made, err
		}
		mode := os.ModeSetgid | 0o750
		if !fi.IsDir() {
			mode = 0o640
		}
		if err := chownMode(p, uid, gid, mode); err != nil {
			return made, err
		}
	}
	// The work directories keep their files' owners.
	for _, rel := range WorkDirs {
		err := filepath.WalkDir(y.Path(rel...), func(p string, d fs.DirEntry, err error) error {
			switch {
			case err != nil:
				return err
			case d.IsDir():
				return chownMode(p, -1, gid, os.ModeSetgid|0o770)
			case d.Type().IsRegular():
				fi, err := d.Info()
				if err != nil {
					return err
				}
				return chownMode(p, -1, gid, fi.Mode().Perm()|0o660)
			}
			return nil
		})
		if err != nil {
			return made, err
		}
	}
	return made, nil
}

// chownMode gives path (never followed if a symlink) the owner uid (-1:
// unchanged), the group gid and mode.
func chownMode(path string, uid, gid int, mode os.FileMode) error {
	if err := os.Lchown(path, uid, gid); err != nil {
		return err
	}
	// Chmod follows a symlink: look again, after the chown, at what is
	// there.
	fi, err := os.Lstat(path)
	if err != nil {
		return err
	}
	if fi.Mode()&os.ModeSymlink != 0 {
		return fmt.Errorf("%s: is a symlink; refusing to follow it", path)
	}
	return os.Chmod(path, mode)
}
