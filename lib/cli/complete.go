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
	// Values is what completes each flag's value, by flag name, and the
	// positional arguments', under "".
	Values map[string]Values

	flagSets []*flag.FlagSet
}

// Values is what a shell completes for a flag's value or a command's
// positional arguments: fixed Words, or the names of a Kind (a task's or
// a gate's id, an imp's name) that the command lists when the script
// asks it, with its hidden subcommand "__complete KIND WORD [ROOT]"
// (Env.Names), so they are those of the yard at the time.
type Values struct {
	Words []string
	Kind  string
}

// Words is Values of fixed words.
func Words(w ...string) Values { return Values{Words: w} }

// Names is Values of the names of kind, listed by Env.Names.
func Names(kind string) Values { return Values{Kind: kind} }

// Name is one completion Env.Names lists: the word, and what it is for a
// shell that shows it (zsh, fish), on one printable line.
type Name struct {
	Word, About string
}

// wordser is a flag value that knows the words it takes (--color).
type wordser interface{ Words() []string }

// Complete says what a shell completes for fs's flag name, or with name
// "" for fs's positional arguments. It matters only while the command
// describes itself for its completion script; otherwise it does nothing.
func (e *Env) Complete(fs *flag.FlagSet, name string, v Values) {
	if e.desc == nil || !slices.Contains(e.desc.flagSets, fs) {
		return
	}
	if name != "" && fs.Lookup(name) == nil {
		// A command's own definitions are wrong: every completion
		// script test fails on it, before any release.
		panic(fmt.Sprintf("%s: completion of flag --%s, which it does not define", fs.Name(), name))
	}
	if e.desc.Values == nil {
		e.desc.Values = map[string]Values{}
	}
	e.desc.Values[name] = v
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
				if w, ok := f.Value.(wordser); ok && c.Values[f.Name].Kind == "" && c.Values[f.Name].Words == nil {
					if c.Values == nil {
						c.Values = map[string]Values{}
					}
					c.Values[f.Name] = Words(w.Words()...)
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

// completeCmd is the hidden subcommand the completion scripts run for
// the names of a kind; no usage lists it, as no person types it.
const completeCmd = "__complete"

// names answers a completion script's "__complete KIND WORD [ROOT]": the
// names of KIND that begin with WORD, one a line, a tab and what it is
// after it. It never fails in a way the shell would show: an absent or
// unreadable yard has no names, and nothing goes to standard error.
// A name that is not one plain word (a quote, a space, a control
// character: something a yard's writer made to fool the shell) is
// left out.
func (e *Env) names(args []string) int {
	if len(args) < 2 || len(args) > 3 || e.Names == nil {
		return OK
	}
	root := ""
	if len(args) == 3 {
		root = args[2]
	}
	var b strings.Builder
	for _, n := range e.Names(root, args[0], args[1]) {
		if n.Word == "" || !strings.HasPrefix(n.Word, args[1]) || strings.IndexFunc(n.Word, notPlain) >= 0 {
			continue
		}
		b.WriteString(n.Word)
		if about := OneLine(n.About, 60); about != "" {
			b.WriteString("\t" + strings.ReplaceAll(about, "\t", " "))
		}
		b.WriteByte('\n')
	}
	io.WriteString(e.Stdout, b.String())
	return OK
}

// notPlain is a rune a completed name may not hold: outside printable
// ASCII, or one a shell reads as more than itself.
func notPlain(r rune) bool {
	return r <= ' ' || r >= 0x7f || strings.ContainsRune("\"'`$\\;&|<>()[]{}*?!~#=:,", r)
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

// spec is v as the bash and zsh scripts read it: "w WORD..." for fixed
// words, "n KIND" for names the command lists; "" for none.
func (v Values) spec() string {
	switch {
	case v.Kind != "":
		return "n " + v.Kind
	case len(v.Words) > 0:
		return "w " + strings.Join(v.Words, " ")
	}
	return ""
}

// Bash writes root's bash completion: subcommand names, then the flags of
// the subcommand so far; a flag's value, and a positional argument,
// complete as the command's Values say (names it lists when asked), else
// as a file name.
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
		kvs := [][2]string{{"subs:" + key, strings.Join(c.subNames(), " ")}, {"flags:" + key, strings.Join(flags, " ")}, {"vals:" + key, strings.Join(vals, " ")}}
		for _, name := range slices.Sorted(maps.Keys(c.Values)) {
			k := "arg:" + key
			if name != "" {
				k = "val:" + strings.TrimSpace(key+" "+FlagName(name))
			}
			kvs = append(kvs, [2]string{k, c.Values[name].spec()})
		}
		for _, kv := range kvs {
			if kv[1] != "" {
				fmt.Fprintf(&b, "\t%s) echo %s ;;\n", shellQuote(kv[0]), shellQuote(kv[1]))
			}
		}
	})
	fmt.Fprintf(&b, `	esac
}

# %[1]s_values SPEC: complete $cur with SPEC's words, or with the names
# '%[2]s __complete' lists in the yard of $root; no SPEC, file names.
%[1]s_values() {
	local w _
	COMPREPLY=()
	case $1 in
	'') return ;;
	w\ *) COMPREPLY=($(compgen -W "${1#w }" -- "$cur")) ;;
	n\ *)
		while IFS=$'\t' read -r w _; do
			COMPREPLY+=("$w")
		done < <(%[2]s __complete "${1#n }" "$cur" "$root" 2>/dev/null)
		;;
	esac
	compopt +o default 2>/dev/null
}

%[1]s() {
	local cur=${COMP_WORDS[COMP_CWORD]} prev=${COMP_WORDS[COMP_CWORD-1]} path= root= i w
	for ((i = 1; i < COMP_CWORD; i++)); do
		w=${COMP_WORDS[i]}
		[[ $w == -- ]] && break
		if [[ $w == --root || $w == -root ]]; then
			# --root=DIR is three words: --root, = and DIR.
			root=${COMP_WORDS[i+1]}
			[[ $root == = ]] && root=${COMP_WORDS[i+2]}
		fi
		if [[ " $(%[1]s_words "subs:$path") " == *" $w "* ]]; then
			path=${path:+$path }$w
		fi
	done
	[[ $root == '~/'* ]] && root=$HOME/${root#'~/'}
	[[ $prev == = ]] && ((COMP_CWORD > 2)) && prev=${COMP_WORDS[COMP_CWORD-2]}
	if ((COMP_CWORD > 1)) && [[ " $(%[1]s_words "vals:$path") " == *" $prev "* ]]; then
		%[1]s_values "$(%[1]s_words "val:${path:+$path }$prev")"
	elif [[ $cur == -* ]]; then
		COMPREPLY=($(compgen -W "$(%[1]s_words "flags:$path")" -- "$cur"))
	elif [[ -z $(%[1]s_words "subs:$path") ]]; then
		%[1]s_values "$(%[1]s_words "arg:$path")"
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
// summary, and each listed name's.
func Zsh(w io.Writer, root *Command) error {
	fn := "_" + funcName(root.Name)
	var b strings.Builder
	fmt.Fprintf(&b, "#compdef %s\n# zsh completion for %[1]s, generated by '%[1]s completion zsh'\n\n", root.Name)
	fmt.Fprintf(&b, "%s_set() {\n\tsubs=() flags=() vals=() values=() arg=\n\tcase $1 in\n", fn)
	desc := func(name, text string) string {
		return shellQuote(strings.ReplaceAll(name, ":", `\:`) + ":" + text)
	}
	root.walk(nil, func(path []string, c *Command) {
		var subs, flags, vals, values []string
		for _, s := range c.Subs {
			subs = append(subs, desc(s.Name, s.Summary))
		}
		for _, f := range c.Flags {
			flags = append(flags, desc(FlagName(f.Name), flagText(f)))
			if !isBool(f) {
				vals = append(vals, shellQuote(FlagName(f.Name)))
			}
		}
		for _, name := range slices.Sorted(maps.Keys(c.Values)) {
			if name != "" {
				values = append(values, shellQuote(FlagName(name)), shellQuote(c.Values[name].spec()))
			}
		}
		fmt.Fprintf(&b, "\t(%s)\n\t\tsubs=(%s)\n\t\tflags=(%s)\n\t\tvals=(%s)\n\t\tvalues=(%s)\n\t\targ=%s\n\t\t;;\n",
			shellQuote(strings.Join(path, " ")), strings.Join(subs, " "), strings.Join(flags, " "), strings.Join(vals, " "), strings.Join(values, " "), shellQuote(c.Values[""].spec()))
	})
	fmt.Fprintf(&b, `	esac
}

# %[1]s_values SPEC: complete with SPEC's words, or with the names
# '%[2]s __complete' lists in the yard of $root; no SPEC, file names.
%[1]s_values() {
	local -a names
	case $1 in
	('') _files ;;
	('w '*)
		names=(${=1#w })
		_describe -t values value names
		;;
	('n '*)
		names=(${(f)"$(%[2]s __complete ${1#n } "$PREFIX" "$root" 2>/dev/null)"})
		names=("${(@)names//$'\t'/:}")
		_describe -t names name names
		;;
	esac
}

%[1]s() {
	local -a subs flags vals
	local -A values
	local p= w i root= arg
	for ((i = 2; i < CURRENT; i++)); do
		w=${words[i]}
		[[ $w == -- ]] && break
		case $w in
		(--root|-root) root=${words[i+1]} ;;
		(--root=*|-root=*) root=${w#*=} ;;
		esac
		%[1]s_set "$p"
		if (( ${subs[(I)${(b)w}:*]} )); then
			p=${p:+$p }$w
		fi
	done
	root=${root/#\~/$HOME}
	%[1]s_set "$p"
	w=${words[CURRENT-1]}
	if (( CURRENT > 2 && ${vals[(I)${(b)w}]} )); then
		%[1]s_values "${values[$w]}"
	elif [[ ${words[CURRENT]} == -* ]]; then
		_describe -t flags flag flags
	elif (( ${#subs} )); then
		_describe -t commands command subs
	else
		%[1]s_values "$arg"
	fi
}

%[1]s "$@"
`, fn, root.Name)
	_, err := io.WriteString(w, b.String())
	return err
}

// Fish writes root's fish completion, with each subcommand's and flag's
// summary, and each listed name's.
func Fish(w io.Writer, root *Command) error {
	var b strings.Builder
	names := "__" + funcName(root.Name) + "_names"
	fmt.Fprintf(&b, "# fish completion for %s, generated by '%[1]s completion fish'\n", root.Name)
	fmt.Fprintf(&b, `
# %[1]s KIND: the names of KIND '%[2]s __complete' lists in the yard of
# the command line's --root, for the token being completed.
function %[1]s
    set -l tokens (commandline -opc)
    set -l root
    for i in (seq (count $tokens))
        switch $tokens[$i]
            case --root -root
                set root $tokens[(math $i + 1)]
            case '--root=*' '-root=*'
                set root (string replace -r '^[^=]*=' '' -- $tokens[$i])
        end
    end
    set root (string replace -r '^~/' "$HOME/" -- "$root")
    set -l word (string replace -r '^--?[^=]*=' '' -- (commandline -ct))
    %[2]s __complete $argv[1] "$word" "$root" 2>/dev/null
end

`, names, root.Name)
	values := func(v Values) string {
		if v.Kind != "" {
			return " -f -a " + fishQuote("("+names+" "+v.Kind+")")
		}
		if len(v.Words) > 0 {
			return " -f -a " + fishQuote(strings.Join(v.Words, " "))
		}
		return ""
	}
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
		} else if v := values(c.Values[""]); v != "" {
			fmt.Fprintf(&b, "complete -c %s -n %s%s\n", root.Name, n, v)
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
				opt += " -r" + values(c.Values[f.Name])
			}
			fmt.Fprintf(&b, "complete -c %s -n %s %s -d %s\n", root.Name, n, opt, fishQuote(flagText(f)))
		}
	})
	_, err := io.WriteString(w, b.String())
	return err
}
