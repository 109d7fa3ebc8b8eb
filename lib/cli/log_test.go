package cli

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
)

// stamped matches a Logf line with its own time.
var stamped = regexp.MustCompile(`^impgw: \d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ `)

// fileEnv is an Env whose Stderr is a file, with $JOURNAL_STREAM set by
// stream from the file's device and inode.
func fileEnv(t *testing.T, stream func(dev, ino uint64) string) (*Env, func() string) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "stderr")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	var st syscall.Stat_t
	if err := syscall.Fstat(int(f.Fd()), &st); err != nil {
		t.Fatal(err)
	}
	t.Setenv("JOURNAL_STREAM", stream(uint64(st.Dev), uint64(st.Ino)))
	return &Env{Name: "impgw", Stderr: f}, func() string {
		b, _ := os.ReadFile(path)
		return string(b)
	}
}

func TestLogfUnderJournald(t *testing.T) {
	e, read := fileEnv(t, func(dev, ino uint64) string { return fmt.Sprintf("%d:%d", dev, ino) })
	if !e.Journal() {
		t.Fatal("Journal() false with JOURNAL_STREAM naming stderr")
	}
	e.Logf("serving on %s", "127.0.0.1:7300")
	if got := read(); got != "impgw: serving on 127.0.0.1:7300\n" {
		t.Errorf("under journald Logf wrote %q, want no time of its own", got)
	}
}

func TestLogfStamped(t *testing.T) {
	for name, stream := range map[string]func(dev, ino uint64) string{
		"unset":         func(uint64, uint64) string { return "" },
		"other inode":   func(dev, ino uint64) string { return fmt.Sprintf("%d:%d", dev, ino+1) },
		"other device":  func(dev, ino uint64) string { return fmt.Sprintf("%d:%d", dev+1, ino) },
		"malformed":     func(dev, ino uint64) string { return fmt.Sprintf("%d-%d", dev, ino) },
		"not a number":  func(dev, ino uint64) string { return fmt.Sprintf("%d:x", dev) },
		"missing inode": func(dev, ino uint64) string { return fmt.Sprintf("%d:", dev) },
	} {
		t.Run(name, func(t *testing.T) {
			e, read := fileEnv(t, stream)
			e.Logf("stopped")
			if got := read(); !stamped.MatchString(got) || !strings.HasSuffix(got, " stopped\n") {
				t.Errorf("Logf wrote %q, want it stamped", got)
			}
		})
	}
	// Not a file at all: no device and inode to match.
	t.Setenv("JOURNAL_STREAM", "1:2")
	var b bytes.Buffer
	e := &Env{Name: "impgw", Stderr: &b}
	e.Logf("stopped")
	if !stamped.MatchString(b.String()) {
		t.Errorf("Logf to a buffer wrote %q, want it stamped", b.String())
	}
}

// TestLogfDecidesOnce: the choice is made at the first line; a change of
// the environment later does not split the log into two styles.
func TestLogfDecidesOnce(t *testing.T) {
	e, read := fileEnv(t, func(dev, ino uint64) string { return fmt.Sprintf("%d:%d", dev, ino) })
	e.Logf("one")
	os.Unsetenv("JOURNAL_STREAM")
	e.Logf("two")
	if got := read(); got != "impgw: one\nimpgw: two\n" {
		t.Errorf("got %q", got)
	}
}

func TestLogWriter(t *testing.T) {
	e, read := fileEnv(t, func(dev, ino uint64) string { return fmt.Sprintf("%d:%d", dev, ino) })
	w := e.LogWriter()
	fmt.Fprintf(w, "impgw: serving on %s\nimpgw: policy ", "127.0.0.1:7300")
	fmt.Fprintf(w, "loaded\nno prefix\n")
	want := "impgw: serving on 127.0.0.1:7300\nimpgw: policy loaded\nimpgw: no prefix\n"
	if got := read(); got != want {
		t.Errorf("LogWriter under journald wrote %q, want %q", got, want)
	}

	t.Setenv("JOURNAL_STREAM", "")
	var b bytes.Buffer
	e = &Env{Name: "impgw", Stderr: &b}
	fmt.Fprint(e.LogWriter(), "impgw: error: policy broken\n")
	if got := b.String(); !stamped.MatchString(got) || !strings.HasSuffix(got, " error: policy broken\n") {
		t.Errorf("LogWriter wrote %q, want one stamped line", got)
	}
}

// TestStderrEscaped: a daemon's log line, an error and a warning often
// quote what a box, a sender or an upstream wrote; shown escaped, that
// text cannot forge a line of its own or move the cursor.
func TestStderrEscaped(t *testing.T) {
	t.Setenv("JOURNAL_STREAM", "")
	hostile := "ok\r\x1b[2Kimpexec: executed g-1\nimpgate: note: approved"
	var b bytes.Buffer
	e := &Env{Name: "impgw", Stderr: &b}
	e.Logf("upstream said %s", hostile)
	e.Warn(errors.New(hostile))
	e.Report(fmt.Errorf("gate g-1: %w", errors.New(hostile)))
	got := b.String()
	if strings.ContainsAny(got, "\r\x1b") || strings.Count(got, "\n") != 3 {
		t.Fatalf("stderr %q: want three lines and no CR or ESC", got)
	}
	for _, want := range []string{
		`upstream said ok\r\x1b[2Kimpexec: executed g-1\nimpgate: note: approved` + "\n",
		`impgw: warning: ok\r\x1b[2Kimpexec: executed g-1\nimpgate: note: approved` + "\n",
		`impgw: error: gate g-1: ok\r\x1b[2Kimpexec: executed g-1\nimpgate: note: approved` + "\n",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("stderr %q lacks %q", got, want)
		}
	}
}
