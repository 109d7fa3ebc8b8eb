package box

import (
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"
	"strings"
)

// ErrHome is CheckHome's error for a host path that would put
// IMPYARD_HOME, or part of it, inside a box.
var ErrHome = errors.New("would show IMPYARD_HOME to the box")

// CheckHome refuses a host path that a box would see, with every symlink
// resolved, when it is IMPYARD_HOME, lies below it, or holds it (a mount
// of a parent shows IMPYARD_HOME as well); key names the path in the
// error (repo, rootfs, a mount's target). Whatever uid the box runs as,
// nothing of IMPYARD_HOME (secrets, the owner's key, tokens) reaches it:
// the one exception, the gateway's CA certificate mounted read-only, is
// the caller's, and never passes through here. A path that cannot be
// resolved is refused as well: what it names could not be checked.
// It returns the resolved path, which is what the caller mounts, so a
// symlink changed after the check does not change what is mounted.
func CheckHome(home, key, path string) (string, error) {
	h, err := filepath.EvalSymlinks(home)
	if errors.Is(err, fs.ErrNotExist) {
		// Nothing is there to show yet; a parent of where it will be
		// is still refused.
		h, err = filepath.Abs(home)
	}
	if err != nil {
		return "", fmt.Errorf("%s: IMPYARD_HOME %s: %w", key, home, err)
	}
	p, err := filepath.EvalSymlinks(path)
	if err != nil {
		return "", fmt.Errorf("%s: %w", key, err)
	}
	if within(p, h) || within(h, p) {
		return "", fmt.Errorf("%s %s %w (IMPYARD_HOME is %s): nothing under it is ever mounted into a box", key, path, ErrHome, home)
	}
	return p, nil
}

// within reports whether p is dir or lies below it; both are clean and
// absolute.
func within(p, dir string) bool {
	return p == dir || dir == "/" || strings.HasPrefix(p, dir+"/")
}
