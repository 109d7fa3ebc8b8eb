package cli

import (
	"flag"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
)

// Command is a command as a shell completion script sees it: its
// subcommands and flags, gathered by asking each subcommand to describe
// itself (it builds its flag set and stops in Parse), so the scripts come
// from the same flag definitions the commands parse with.
type Command struct {
	Name    string
	Summary string
	Flags   []*flag.Flag
	Subs    []*Command

	flagSets []*flag.FlagSet
}

// describe fills e.desc with the subcommands of cmds and their flags,
// without running any of them: each is called with describeArg alone,
// which Parse and Group answer with errDescribe before any work, so a
// subcommand must parse (or group) before it does anything else, as
// every one does.
func (e *Env) describe(usage string, cmds map[string]func([]string) error) {
	parent := e.desc
	summary := summaries(usage)
	for _, name := range slices.Sorted(maps.Keys(cmds)) {
		c := &Command{Name: name, Summary: summary[name]}
		e.desc = c
		cmds[name]([]string{describeArg})
		seen := map[string]bool{}
		for _, fs := range c.flagSets {
			fs.VisitAll(func(f *flag.Flag) {
				if !seen[f.Name] {
					seen[f.Name] = true
					c.Flags = append(c.Flags, f)
				}
			})
		}
		c.flagSets = nil
		parent.Subs = append(parent.Subs, c)
	}
	e.desc = parent
}

// summaries reads the one-line summaries of a usage text's "Commands:"
// section: "  NAME  summary", with more-indented lines continuing it.
func summaries(usage string) map[string]string {
	m := map[string]string{}
	in, last := false, ""
	for _, line := range strings.Split(usage, "\n") {
		switch {
		case line == "Commands:":
			in = true
		case !in:
		case strings.TrimSpace(line) == "":
			in = false
		case strings.HasPrefix(line, "   ") && last != "":
			m[last] += " " + strings.TrimSpace(line)
		default:
			f := strings.Fields(line)
			last = f[0]
			m[last] = strings.Join(f[1:], " ")
		}
	}
	return m
}

// Tree describes the whole command: the subcommands of cmds, the
// built-in help and completion, and the top-level --help and --version.
func (e *Env) Tree(usage string, cmds map[string]func([]string) error) *Command {
	root := &Command{Name: e.Name}
	saved := e.desc
	e.desc = root
	e.describe(usage, cmds)
	e.desc = saved
	top := flag.NewFlagSet(e.Name, flag.ContinueOnError)
	top.Bool("help", false, "print the usage")
	top.Bool("version", false, "print the version")
	top.VisitAll(func(f *flag.Flag) { root.Flags = append(root.Flags, f) })
	shells := &Command{Name: "completion", Summary: "print a shell completion script"}
	for _, s := range []string{"bash", "fish", "zsh"} {
		shells.Subs = append(shells.Subs, &Command{Name: s, Summary: s + " completion script"})
	}
	root.Subs = append(root.Subs, shells, &Command{Name: "help", Summary: "print the usage, or a command's help"})
	return root
}

const completionUsage = `usage: %[1]s completion bash|zsh|fish

Print a completion script for the shell, generated from the commands'
own flag definitions.

Examples:
  source <(%[1]s completion bash)
  %[1]s completion zsh >~/.zfunc/_%[1]s
  %[1]s completion fish >~/.config/fish/completions/%[1]s.fish
`

// completion prints the completion script for the shell named in args.
func (e *Env) completion(args []string, usage string, cmds map[string]func([]string) error) error {
	fs := e.FlagSet("completion", fmt.Sprintf(completionUsage, e.Name))
	if err := Parse(fs, args); err != nil {
		return err
	}
	if fs.NArg() != 1 {
		return Usagef("completion: want one shell: bash, zsh or fish")
	}
	gen, ok := map[string]func(io.Writer, *Command) error{"bash": Bash, "zsh": Zsh, "fish": Fish}[fs.Arg(0)]
	if !ok {
		return Usagef("completion: unknown shell %q; want bash, zsh or fish", fs.Arg(0))
	}
	return gen(e.Stdout, e.Tree(usage, cmds))
}

// walk calls fn on c and every command below it, with its path of
// subcommand names below the root.
func (c *Command) walk(path []string, fn func(path []string, c *Command)) {
	fn(path, c)
	for _, s := range c.Subs {
		s.walk(append(slices.Clip(path), s.Name), fn)
	}
}

func (c *Command) subNames() []string {
	var n []string
	for _, s := range c.Subs {
		n = append(n, s.Name)
	}
	return n
}

// shellQuote quotes s for a POSIX, zsh or fish single-quoted word.
func shellQuote(s string) string {
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// fishQuote quotes s for fish, where '\” does not end a quote.
func fishQuote(s string) string {
	return "'" + strings.NewReplacer(`\`, `\\`, "'", `\'`).Replace(s) + "'"
}

func flagText(f *flag.Flag) string {
	_, doc := flag.UnquoteUsage(f)
	return strings.Join(strings.Fields(doc), " ")
}

// funcName is name as a shell function name's part.
func funcName(name string) string {
	return strings.Map(func(r rune) rune {
		if r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' {
			return r
		}
		return '_'
	}, name)
}

// Bash writes root's bash completion: subcommand names, then the flags of
// the subcommand so far; a flag's value completes as a file name.
func Bash(w io.Writer, root *Command) error {
	fn := "_" + funcName(root.Name)
	var b strings.Builder
	fmt.Fprintf(&b, "# bash completion for %s, generated by '%[1]s completion bash'\n", root.Name)
	fmt.Fprintf(&b, "%s_words() {\n\tcase $1 in\n", fn)
	root.walk(nil, func(path []string, c *Command) {
		key := strings.Join(path, " ")
		var flags, vals []string
		for _, f := range c.Flags {
			flags = append(flags, FlagName(f.Name))
			if !isBool(f) {
				vals = append(vals, FlagName(f.Name))
			}
		}
		for _, kv := range [][2]string{{"subs", strings.Join(c.subNames(), " ")}, {"flags", strings.Join(flags, " ")}, {"vals", strings.Join(vals, " ")}} {
			if kv[1] != "" {
				fmt.Fprintf(&b, "\t%s) echo %s ;;\n", shellQuote(kv[0]+":"+key), shellQuote(kv[1]))
			}
		}
	})
	fmt.Fprintf(&b, `	esac
}

%[1]s() {
	local cur=${COMP_WORDS[COMP_CWORD]} prev=${COMP_WORDS[COMP_CWORD-1]} path= i w
	for ((i = 1; i < COMP_CWORD; i++)); do
		w=${COMP_WORDS[i]}
		[[ $w == -- ]] && break
		if [[ " $(%[1]s_words "subs:$path") " == *" $w "* ]]; then
			path=${path:+$path }$w
		fi
	done
	if ((COMP_CWORD > 1)) && [[ " $(%[1]s_words "vals:$path") " == *" $prev "* ]]; then
		COMPREPLY=()
		return
	fi
	if [[ $cur == -* ]]; then
		COMPREPLY=($(compgen -W "$(%[1]s_words "flags:$path")" -- "$cur"))
	else
		COMPREPLY=($(compgen -W "$(%[1]s_words "subs:$path")" -- "$cur"))
	fi
}

complete -o default -F %[1]s %[2]s
`, fn, root.Name)
	_, err := io.WriteString(w, b.String())
	return err
}

// Zsh writes root's zsh completion, with each subcommand's and flag's
// summary.
func Zsh(w io.Writer, root *Command) error {
	fn := "_" + funcName(root.Name)
	var b strings.Builder
	fmt.Fprintf(&b, "#compdef %s\n# zsh completion for %[1]s, generated by '%[1]s completion zsh'\n\n", root.Name)
	fmt.Fprintf(&b, "%s_set() {\n\tsubs=() flags=() vals=()\n\tcase $1 in\n", fn)
	desc := func(name, text string) string {
		return shellQuote(strings.ReplaceAll(name, ":", `\:`) + ":" + text)
	}
	root.walk(nil, func(path []string, c *Command) {
		var subs, flags, vals []string
		for _, s := range c.Subs {
			subs = append(subs, desc(s.Name, s.Summary))
		}
		for _, f := range c.Flags {
			flags = append(flags, desc(FlagName(f.Name), flagText(f)))
			if !isBool(f) {
				vals = append(vals, shellQuote(FlagName(f.Name)))
			}
		}
		fmt.Fprintf(&b, "\t(%s)\n\t\tsubs=(%s)\n\t\tflags=(%s)\n\t\tvals=(%s)\n\t\t;;\n",
			shellQuote(strings.Join(path, " ")), strings.Join(subs, " "), strings.Join(flags, " "), strings.Join(vals, " "))
	})
	fmt.Fprintf(&b, `	esac
}

%[1]s() {
	local -a subs flags vals
	local p= w i
	for ((i = 2; i < CURRENT; i++)); do
		w=${words[i]}
		[[ $w == -- ]] && break
		%[1]s_set "$p"
		if (( ${subs[(I)${(b)w}:*]} )); then
			p=${p:+$p }$w
		fi
	done
	%[1]s_set "$p"
	if (( CURRENT > 2 && ${vals[(I)${(b)words[CURRENT-1]}]} )); then
		_files
	elif [[ ${words[CURRENT]} == -* ]]; then
		_describe -t flags flag flags
	elif (( ${#subs} )); then
		_describe -t commands command subs
	else
		_files
	fi
}

%[1]s "$@"
`, fn)
	_, err := io.WriteString(w, b.String())
	return err
}

// Fish writes root's fish completion, with each subcommand's and flag's
// summary.
func Fish(w io.Writer, root *Command) error {
	var b strings.Builder
	fmt.Fprintf(&b, "# fish completion for %s, generated by '%[1]s completion fish'\n", root.Name)
	root.walk(nil, func(path []string, c *Command) {
		var cond []string
		if len(path) == 0 {
			cond = append(cond, "__fish_use_subcommand")
		}
		for _, p := range path {
			cond = append(cond, "__fish_seen_subcommand_from "+p)
		}
		if len(c.Subs) > 0 && len(path) > 0 {
			cond = append(cond, "not __fish_seen_subcommand_from "+strings.Join(c.subNames(), " "))
		}
		n := fishQuote(strings.Join(cond, "; and "))
		if len(c.Subs) > 0 {
			// Where a subcommand is due, file names are not.
			fmt.Fprintf(&b, "complete -c %s -f -n %s\n", root.Name, n)
		}
		for _, s := range c.Subs {
			fmt.Fprintf(&b, "complete -c %s -f -n %s -a %s -d %s\n", root.Name, n, fishQuote(s.Name), fishQuote(s.Summary))
		}
		for _, f := range c.Flags {
			opt := "-l " + fishQuote(f.Name)
			if len([]rune(f.Name)) == 1 {
				opt = "-s " + fishQuote(f.Name)
			}
			if !isBool(f) {
				opt += " -r"
			}
			fmt.Fprintf(&b, "complete -c %s -n %s %s -d %s\n", root.Name, n, opt, fishQuote(flagText(f)))
		}
	})
	_, err := io.WriteString(w, b.String())
	return err
}
