package cli

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// Logf prints one line of a daemon's log on standard error, Printable:
// "NAME: TIME MESSAGE", TIME in RFC 3339 UTC. When standard error is
// systemd's stream to journald, which stamps every line itself, the line
// is "NAME: MESSAGE".
func (e *Env) Logf(format string, a ...any) {
	// One line each, whatever a box or an upstream put into the values.
	msg := Printable(fmt.Sprintf(format, a...))
	if e.Journal() {
		fmt.Fprintf(e.Stderr, "%s: %s\n", e.Name, msg)
		return
	}
	fmt.Fprintf(e.Stderr, "%s: %s %s\n", e.Name, time.Now().UTC().Format(time.RFC3339), msg)
}

// Journal reports whether Stderr is the stream systemd connected to
// journald, decided on the first call by systemd's documented rule:
// $JOURNAL_STREAM holds "DEVICE:INODE" and they are Stderr's (a daemon
// whose stderr was redirected elsewhere inherits the variable, but not
// the match).
func (e *Env) Journal() bool {
	e.journalOnce.Do(func() { e.journal = journalStream(e.Stderr, os.Getenv("JOURNAL_STREAM")) })
	return e.journal
}

// journalStream reports whether w is a file whose device and inode are
// those named by v, $JOURNAL_STREAM's "DEVICE:INODE" in decimal.
func journalStream(w io.Writer, v string) bool {
	f, ok := w.(*os.File)
	if !ok || v == "" {
		return false
	}
	ds, is, ok := strings.Cut(v, ":")
	if !ok {
		return false
	}
	dev, err1 := strconv.ParseUint(ds, 10, 64)
	ino, err2 := strconv.ParseUint(is, 10, 64)
	if err1 != nil || err2 != nil {
		return false
	}
	fi, err := f.Stat()
	if err != nil {
		return false
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	return ok && uint64(st.Dev) == dev && uint64(st.Ino) == ino
}

// LogWriter is a writer for a library that logs whole lines of its own
// ("NAME: MESSAGE\n", as the gateway does): each line becomes one Logf
// line, so it is stamped, or not, as every other.
func (e *Env) LogWriter() io.Writer { return &logWriter{e: e} }

type logWriter struct {
	e   *Env
	mu  sync.Mutex
	buf []byte
}

func (w *logWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.buf = append(w.buf, p...)
	for {
		i := bytes.IndexByte(w.buf, '\n')
		if i < 0 {
			return len(p), nil
		}
		line := string(w.buf[:i])
		w.buf = w.buf[i+1:]
		w.e.Logf("%s", strings.TrimPrefix(line, w.e.Name+": "))
	}
}
