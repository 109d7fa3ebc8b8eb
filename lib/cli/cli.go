// Package cli holds what every impyard command shares: exit codes, the
// diagnostic format ("impq: error: …", "impq: hint: …"), the --root flag
// and NDJSON output.
package cli

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"sync"

	"github.com/impyard/impyard/lib/store"
	"github.com/impyard/impyard/lib/temporary"
)

// Exit codes, the same for every command and man page.
const (
	OK    = 0
	Fail  = 1
	Usage = 2
	// Temp is a temporary failure worth retrying: any error that wraps a
	// sentinel of lib/temporary (a lock held too long, a daemon not
	// answering, another supervisor running).
	Temp = 111
)

// Env is one command invocation's surroundings.
type Env struct {
	Name   string
	Stdin  io.Reader
	Stdout io.Writer
	Stderr io.Writer

	// journal is whether Stderr goes to journald, decided once.
	journalOnce sync.Once
	journal     bool
}

// UsageError marks an error as a usage mistake (exit 2).
type UsageError struct{ Msg string }

func (e *UsageError) Error() string { return e.Msg }

// Usagef returns a UsageError.
func Usagef(format string, a ...any) error { return &UsageError{Msg: fmt.Sprintf(format, a...)} }

// HintError carries a hint line printed after the error.
type HintError struct {
	Err  error
	Hint string
}

func (e *HintError) Error() string { return e.Err.Error() }
func (e *HintError) Unwrap() error { return e.Err }

// WithHint attaches a hint to err.
func WithHint(err error, hint string) error { return &HintError{Err: err, Hint: hint} }

// Report prints err in the house format and returns its exit code.
func (e *Env) Report(err error) int {
	if err == nil {
		return OK
	}
	if errors.Is(err, flag.ErrHelp) {
		return OK
	}
	fmt.Fprintf(e.Stderr, "%s: error: %s\n", e.Name, err)
	var h *HintError
	if errors.As(err, &h) {
		fmt.Fprintf(e.Stderr, "%s: hint: %s\n", e.Name, h.Hint)
	}
	var u *UsageError
	switch {
	case errors.As(err, &u):
		return Usage
	case temporary.Is(err):
		return Temp
	}
	return Fail
}

// Warn prints a warning that does not stop the command.
func (e *Env) Warn(err error) {
	fmt.Fprintf(e.Stderr, "%s: warning: %s\n", e.Name, err)
}

// FlagSet returns a flag set for a subcommand whose usage prints text and
// whose parse errors are usage errors.
func (e *Env) FlagSet(sub, text string) *flag.FlagSet {
	fs := flag.NewFlagSet(e.Name+" "+sub, flag.ContinueOnError)
	fs.SetOutput(e.Stderr)
	fs.Usage = func() {
		fmt.Fprint(e.Stderr, strings.TrimLeft(text, "\n"))
		fmt.Fprintln(e.Stderr, "\nFlags:")
		fs.PrintDefaults()
	}
	return fs
}

// Parse parses args into fs, turning a bad flag, or a number flag given a
// value below its least, into a usage error.
func Parse(fs *flag.FlagSet, args []string) error {
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return err
		}
		return &UsageError{Msg: err.Error()}
	}
	return checkNumbers(fs)
}

// RootFlag adds --root to fs.
func RootFlag(fs *flag.FlagSet) *string {
	return fs.String("root", "", "the yard `DIR`, a directory 'impsup init' made (default $IMPYARD_ROOT, else the current directory)")
}

// JSONLine writes v as one NDJSON line.
func JSONLine(w io.Writer, v any) error {
	b, err := store.Line(v)
	if err != nil {
		return err
	}
	_, err = w.Write(b)
	return err
}

// User is the default decider and actor name: $USER, else "unknown".
func User() string {
	if u := os.Getenv("USER"); u != "" {
		return u
	}
	if u := os.Getenv("LOGNAME"); u != "" {
		return u
	}
	return "unknown"
}

// Dispatch runs the subcommand named by args[0] from cmds, printing usage
// for -h or no subcommand and the version for --version; an unknown
// subcommand is one line naming the nearest command.
func (e *Env) Dispatch(args []string, usage string, cmds map[string]func(args []string) error) int {
	if len(args) == 0 {
		fmt.Fprint(e.Stderr, strings.TrimLeft(usage, "\n"))
		return Usage
	}
	switch args[0] {
	case "-h", "-help", "--help", "help":
		fmt.Fprint(e.Stdout, strings.TrimLeft(usage, "\n"))
		return OK
	case "-version", "--version":
		fmt.Fprintln(e.Stdout, Version(e.Name))
		return OK
	}
	run, ok := cmds[args[0]]
	if !ok {
		names := make([]string, 0, len(cmds))
		for n := range cmds {
			names = append(names, n)
		}
		return e.Report(UnknownCommand(args[0], names))
	}
	return e.Report(run(args[1:]))
}
