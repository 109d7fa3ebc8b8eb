package cli

import (
	"flag"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
)

// writeHelp writes a subcommand's help: its usage text, then its flags as
// the man pages write them (--as NAME), with their defaults.
func writeHelp(w io.Writer, fs *flag.FlagSet, text string) {
	fmt.Fprint(w, strings.TrimLeft(text, "\n"))
	if !strings.HasSuffix(text, "\n") {
		fmt.Fprintln(w)
	}
	n := 0
	fs.VisitAll(func(*flag.Flag) { n++ })
	if n == 0 {
		return
	}
	fmt.Fprintln(w, "\nFlags:")
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fs.VisitAll(func(f *flag.Flag) {
		fmt.Fprintf(tw, "  %s\t%s\n", flagSynopsis(f), flagDoc(f))
	})
	tw.Flush()
}

// flagSynopsis is "--name ARG", or "--name" for a flag that takes no
// value. ARG is the usage text's `quoted` word, else the value's type.
func flagSynopsis(f *flag.Flag) string {
	if isBool(f) {
		return FlagName(f.Name)
	}
	return FlagName(f.Name) + " " + argName(f)
}

// argName is the flag's argument as the usage text names it in
// backquotes, else its type in capitals (STRING, DURATION).
func argName(f *flag.Flag) string {
	arg, _ := flag.UnquoteUsage(f)
	if strings.Contains(f.Usage, "`") {
		return arg
	}
	if arg == "" {
		arg = "value"
	}
	return strings.ToUpper(arg)
}

// flagDoc is a flag's usage text with its default, when it has one.
func flagDoc(f *flag.Flag) string {
	_, doc := flag.UnquoteUsage(f)
	switch f.DefValue {
	case "", "false", "0", "0s", "[]":
		return doc
	}
	if isBool(f) {
		return doc + " (default true)"
	}
	return fmt.Sprintf("%s (default %s)", doc, f.DefValue)
}
