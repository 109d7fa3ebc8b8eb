package cli

import (
	"fmt"
	"os"

	"golang.org/x/sys/unix"
)

// ptsName unlocks the pseudo-terminal master ptmx and names its terminal.
func ptsName(ptmx *os.File) (string, error) {
	fd := int(ptmx.Fd())
	if err := unix.IoctlSetPointerInt(fd, unix.TIOCSPTLCK, 0); err != nil {
		return "", err
	}
	n, err := unix.IoctlGetUint32(fd, unix.TIOCGPTN)
	if err != nil {
		return "", err
	}
	return fmt.Sprintf("/dev/pts/%d", n), nil
}
