package cli

import (
	"flag"
	"fmt"
	"time"

	"github.com/impyard/impyard/lib/store"
)

// TimeoutFlag adds --timeout to fs, for a command that takes yard locks:
// how long to wait for one another process holds before giving up with
// exit status 111 (default store.LockTimeout). It also has the store tell
// the user, on e.Stderr, when a lock has been waited for a while (see
// WaitLine), so a command that waits does not look hung.
func (e *Env) TimeoutFlag(fs *flag.FlagSet) {
	store.OnWait = func(w store.Wait) { fmt.Fprintln(e.Stderr, WaitLine(e.Name, w, store.LockTimeout)) }
	// Concatenated, not fmt.Sprintf: on the path of every add, that was
	// the process's only use of fmt's formatting, paid for in start-up.
	fs.Func("timeout", "wait at most `DURATION` for a lock another process holds, then exit 111 (default "+store.LockTimeout.String()+")", func(s string) error {
		d, err := time.ParseDuration(s)
		if err != nil || d <= 0 {
			return fmt.Errorf("want a positive duration such as 500ms, 10s or 2m")
		}
		store.LockTimeout = d
		return nil
	})
}

// WaitLine is the line that says prog is waiting for a lock:
// "impq: waiting for gates/.lock (held by pid 812, impexec); giving up after 30s".
func WaitLine(prog string, w store.Wait, timeout time.Duration) string {
	held := ""
	switch {
	case w.PID > 0 && w.Command != "":
		held = fmt.Sprintf(" (held by pid %d, %s)", w.PID, w.Command)
	case w.PID > 0:
		held = fmt.Sprintf(" (held by pid %d)", w.PID)
	}
	return fmt.Sprintf("%s: waiting for %s%s; giving up after %v", prog, w.Lock, held, timeout)
}
