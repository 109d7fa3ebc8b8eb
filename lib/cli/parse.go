package cli

import (
	"errors"
	"flag"
	"regexp"
	"strings"
	"sync"
)

// errDescribe ends a subcommand called to describe itself: Parse returns
// it before parsing anything, so the subcommand does no work.
var errDescribe = errors.New("describe")

// describeArg is the lone argument that asks a subcommand to describe
// itself. A NUL byte cannot occur in a command line, so no user can pass it.
const describeArg = "\x00describe"

// parseAnywhere parses args into fs with flags allowed before, between and
// after the positional arguments, as git and gh do: the flag package stops
// at the first positional, so it takes that one aside and parses the rest
// again, until "--" (after which everything is positional) or the end. It
// leaves the positionals in fs.Args().
func parseAnywhere(fs *flag.FlagSet, args []string) error {
	var pos []string
	for rest := args; len(rest) > 0; {
		if err := fs.Parse(rest); err != nil {
			return err
		}
		left := fs.Args()
		if endedByDashDash(fs, rest[:len(rest)-len(left)]) {
			pos = append(pos, left...)
			break
		}
		if len(left) == 0 {
			break
		}
		pos = append(pos, left[0])
		rest = left[1:]
	}
	// "--" first makes the flag package take every positional as it is,
	// one that looks like a flag included.
	return fs.Parse(append([]string{"--"}, pos...))
}

// endedByDashDash reports whether the flags fs.Parse consumed ended with
// a "--" that ended the flags, rather than one that was a flag's value
// (--reason --).
func endedByDashDash(fs *flag.FlagSet, consumed []string) bool {
	for i := 0; i < len(consumed); i++ {
		a := consumed[i]
		if a == "--" {
			return true
		}
		name := strings.TrimLeft(a, "-")
		if strings.Contains(name, "=") {
			continue
		}
		if f := fs.Lookup(name); f != nil && !isBool(f) {
			i++
		}
	}
	return false
}

func isBool(f *flag.Flag) bool {
	b, ok := f.Value.(interface{ IsBoolFlag() bool })
	return ok && b.IsBoolFlag()
}

// flagInMessage is a flag as the flag package names it in an error,
// compiled when a flag error needs it, not at every command's start.
var flagInMessage = sync.OnceValue(func() *regexp.Regexp {
	return regexp.MustCompile(`(^|[ :]|flag )-([A-Za-z0-9][A-Za-z0-9_-]+)\b`)
})

// flagError turns the flag package's error into the usage error the man
// pages' spelling: --name, not -name.
func flagError(fs *flag.FlagSet, err error) error {
	msg := flagInMessage().ReplaceAllString(err.Error(), "$1--$2")
	return &UsageError{Msg: msg, Cmd: fs.Name()}
}

// FlagName is a flag as the man pages write it: -H for one letter,
// --name otherwise.
func FlagName(name string) string {
	if len([]rune(name)) == 1 {
		return "-" + name
	}
	return "--" + name
}

// ParseNone parses args into fs for a command that takes flags only: a
// positional argument is a usage error naming it.
func ParseNone(fs *flag.FlagSet, args []string) error {
	if err := Parse(fs, args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		_, sub, _ := strings.Cut(fs.Name(), " ")
		return Usagef("%s: unexpected argument %q", sub, fs.Arg(0))
	}
	return nil
}

// JSONOnly parses the arguments of a subcommand whose one flag is
// --json (documented as doc) and that takes no positional argument.
func (e *Env) JSONOnly(sub, usage string, args []string, doc string) (bool, error) {
	fs := e.FlagSet(sub, usage)
	asJSON := fs.Bool("json", false, doc)
	err := ParseNone(fs, args)
	return *asJSON, err
}
