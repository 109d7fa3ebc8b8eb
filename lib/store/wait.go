package store

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// WaitNotice is how long a lock is waited for before OnWait is told.
const WaitNotice = time.Second

// Wait describes a lock being waited for, for OnWait.
type Wait struct {
	// Lock names the lock file: its path below the yard root for a store
	// directory's lock, else its path.
	Lock string
	// PID and Command are the holder's, when /proc/locks names it (0 and
	// "" when it does not, or the holder's pid is not visible here).
	PID     int
	Command string
}

// OnWait, when set, is called once for each lock this process has waited
// for WaitNotice without getting, from the waiting goroutine. A command
// sets it to tell its user why it seems to hang; the store prints nothing
// itself.
var OnWait func(Wait)

// noticeWait calls OnWait for the lock file open as fd, held by someone
// else.
func noticeWait(name string, fd int) {
	hook := OnWait
	if hook == nil {
		return
	}
	w := Wait{Lock: name}
	var st unix.Stat_t
	if unix.Fstat(fd, &st) == nil {
		w.PID = lockHolder(procLocks(), uint64(st.Dev), st.Ino)
	}
	if w.PID > 0 {
		if comm, err := os.ReadFile(fmt.Sprintf("/proc/%d/comm", w.PID)); err == nil {
			w.Command = strings.TrimSpace(string(comm))
		}
	}
	hook(w)
}

func procLocks() []byte {
	b, _ := os.ReadFile("/proc/locks")
	return b
}

// lockHolder returns the pid that holds (not waits for) a flock on the
// file dev/ino according to locks, the text of /proc/locks, or 0. Its
// lines read "1: FLOCK  ADVISORY  WRITE 7782 fe:00:9986455 0 EOF", the
// device's major and minor in hex; a waiter's has "->" after the number.
func lockHolder(locks []byte, dev, ino uint64) int {
	want := fmt.Sprintf("%02x:%02x:%d", unix.Major(dev), unix.Minor(dev), ino)
	sc := bufio.NewScanner(bytes.NewReader(locks))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) < 6 || f[1] != "FLOCK" || f[5] != want {
			continue
		}
		if pid, err := strconv.Atoi(f[4]); err == nil && pid > 0 {
			return pid
		}
	}
	return 0
}
