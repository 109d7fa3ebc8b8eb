// Package cli holds what every impyard command shares: exit codes, the
// diagnostic format ("impq: error: …", "impq: hint: …"), the --root flag
// and NDJSON output.
package cli

import (
	"bufio"
	"bytes"
	"errors"
	"flag"
	"fmt"
	"io"
	"maps"
	"os"
	"slices"
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

	// Names lists the names of a kind (Values.Kind) that begin with a
	// word, in the yard of a root directory ("" for the default), for
	// the completion scripts' "__complete"; nil lists none.
	Names func(root, kind, word string) []Name

	// desc, while the command describes itself for completion, is the
	// subcommand being described.
	desc *Command
}

// UsageError marks an error as a usage mistake (exit 2).
type UsageError struct {
	Msg string
	// Cmd is the command whose --help the error points to ("impq add");
	// Dispatch fills it in when the subcommand left it empty.
	Cmd string
}

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

// Report prints err in the house format and returns its exit code: one
// error line, Printable as errors quote what others wrote, ("error:" red on a terminal), the error's hint, and for a
// usage error a hint naming the --help to read.
func (e *Env) Report(err error) int {
	if err == nil || errors.Is(err, flag.ErrHelp) || errors.Is(err, errDescribe) {
		return OK
	}
	p := Painter(Colour(ColorAuto, e.Stderr))
	fmt.Fprintf(e.Stderr, "%s: %s %s\n", e.Name, p.Paint(Red, "error:"), Printable(err.Error()))
	var h *HintError
	if errors.As(err, &h) {
		fmt.Fprintf(e.Stderr, "%s: hint: %s\n", e.Name, h.Hint)
	}
	var u *UsageError
	switch {
	case errors.As(err, &u):
		cmd := u.Cmd
		if cmd == "" {
			cmd = e.Name
		}
		fmt.Fprintf(e.Stderr, "%s: hint: try '%s --help'\n", e.Name, cmd)
		return Usage
	case temporary.Is(err):
		return Temp
	}
	return Fail
}

// Warn prints a warning that does not stop the command, on one Printable
// line.
func (e *Env) Warn(err error) {
	fmt.Fprintf(e.Stderr, "%s: warning: %s\n", e.Name, Printable(err.Error()))
}

// Confirm asks question on standard error and reads one line of
// standard input: y or yes (any case) is yes.
func (e *Env) Confirm(question string) bool {
	fmt.Fprint(e.Stderr, question)
	line, _ := bufio.NewReader(e.Stdin).ReadString('\n')
	switch strings.ToLower(strings.TrimSpace(line)) {
	case "y", "yes":
		return true
	}
	return false
}

// FlagSet returns a flag set for a subcommand whose --help prints text
// and its flags on stdout and whose parse errors are usage errors; the
// flag package itself prints nothing.
func (e *Env) FlagSet(sub, text string) *flag.FlagSet {
	fs := flag.NewFlagSet(e.Name+" "+sub, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.Usage = func() { writeHelp(e.Stdout, fs, text) }
	if e.desc != nil {
		e.desc.flagSets = append(e.desc.flagSets, fs)
	}
	return fs
}

// Parse parses args into fs, flags anywhere among the positionals and
// "--" ending them, which it leaves in fs.Args(). A bad flag, or a number
// flag given a value below its least, is a usage error; -h or --help
// prints the help and returns flag.ErrHelp.
func Parse(fs *flag.FlagSet, args []string) error {
	if len(args) == 1 && args[0] == describeArg {
		return errDescribe
	}
	help := fs.Usage
	fs.Usage = func() {}
	defer func() { fs.Usage = help }()
	if err := parseAnywhere(fs, args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			help()
			return err
		}
		return flagError(fs, err)
	}
	return checkNumbers(fs)
}

// RootFlag adds --root to fs.
func RootFlag(fs *flag.FlagSet) *string {
	return fs.String("root", "", "the yard `DIR`, a directory 'impsup init' made (default $IMPYARD_ROOT, else the current directory)")
}

// JSONLine writes v as one NDJSON line, every control character in it
// escaped.
func JSONLine(w io.Writer, v any) error {
	b, err := store.Line(v)
	if err != nil {
		return err
	}
	_, err = w.Write(inertJSON(b))
	return err
}

// inertJSON escapes in b, one line of JSON from encoding/json, what that
// leaves as it is but a terminal may act on: DEL and the C1 controls
// (U+009B is CSI to a terminal that reads 8-bit controls). Outside its
// strings JSON is printable ASCII, and in UTF-8 0xC2 only ever leads a
// character, so the bytes are found without decoding.
func inertJSON(b []byte) []byte {
	if bytes.IndexByte(b, 0x7f) < 0 && bytes.IndexByte(b, 0xc2) < 0 {
		return b
	}
	out := make([]byte, 0, len(b)+16)
	for i := 0; i < len(b); i++ {
		switch {
		case b[i] == 0x7f:
			out = append(out, `\u007f`...)
		case b[i] == 0xc2 && i+1 < len(b) && b[i+1] >= 0x80 && b[i+1] <= 0x9f:
			out = fmt.Appendf(out, `\u%04x`, b[i+1])
			i++
		default:
			out = append(out, b[i])
		}
	}
	return out
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

// Dispatch runs the subcommand named by args[0] from cmds, global flags
// before it moved after it (Hoist), printing usage
// for --help or help, help on a subcommand for "help COMMAND" or
// "COMMAND help", the
// version for --version and a shell completion script for "completion
// SHELL"; no subcommand, or an unknown one, is one usage error line.
func (e *Env) Dispatch(args []string, usage string, cmds map[string]func(args []string) error) int {
	args, err := Hoist(args)
	if err != nil {
		return e.Report(err)
	}
	if len(args) > 0 {
		switch args[0] {
		case "-version", "--version":
			fmt.Fprintln(e.Stdout, Version(e.Name))
			return OK
		case "completion":
			return e.Report(withCmd(e.completion(args[1:], usage, cmds), e.Name+" completion"))
		case completeCmd:
			return e.names(args[1:])
		}
	}
	return e.Report(e.Group("", args, usage, cmds))
}

// Group runs the subcommand named by args[0] of the subcommand name
// (impgw token issue; "" for the command itself), with Dispatch's help
// and usage errors.
func (e *Env) Group(name string, args []string, usage string, cmds map[string]func(args []string) error) error {
	full := strings.TrimSpace(e.Name + " " + name)
	prefix := ""
	if name != "" {
		prefix = name + ": "
	}
	names := slices.Sorted(maps.Keys(cmds))
	if len(args) == 1 && args[0] == describeArg {
		e.describe(usage, cmds)
		return errDescribe
	}
	if len(args) == 0 {
		return &UsageError{Msg: fmt.Sprintf("%sno command; commands: %s", prefix, strings.Join(names, ", ")), Cmd: full}
	}
	switch args[0] {
	case "-h", "-help", "--help", "help":
		if args[0] == "help" && len(args) > 1 {
			if _, ok := cmds[args[1]]; ok {
				return e.Group(name, append(args[1:], "--help"), usage, cmds)
			}
			args = args[1:]
			break
		}
		fmt.Fprint(e.Stdout, strings.TrimLeft(usage, "\n"))
		return nil
	}
	run, ok := cmds[args[0]]
	if !ok {
		err := UnknownCommand(args[0], names)
		var u *UsageError
		if errors.As(err, &u) {
			u.Msg, u.Cmd = prefix+u.Msg, full
		}
		return err
	}
	rest := args[1:]
	if len(rest) == 1 && rest[0] == "help" {
		// "impq show help" asks for help, as "impq help show" does: an
		// id, a directory or a task's text named "help" is far rarer
		// than the question, and a task's text needs --imp beside it.
		rest = []string{"--help"}
	}
	return withCmd(run(rest), full+" "+args[0])
}

// withCmd points a usage error that names no command to cmd's --help.
func withCmd(err error, cmd string) error {
	var u *UsageError
	if errors.As(err, &u) && u.Cmd == "" {
		u.Cmd = cmd
	}
	return err
}
