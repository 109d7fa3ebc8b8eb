package cli

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

func TestParseFlagsAnywhere(t *testing.T) {
	for _, c := range []struct {
		args  []string
		as    string
		force bool
		pos   []string
	}{
		{[]string{"G", "--as", "bob"}, "bob", false, []string{"G"}},
		{[]string{"--as", "bob", "G"}, "bob", false, []string{"G"}},
		{[]string{"a", "-as", "bob", "b", "--force", "c"}, "bob", true, []string{"a", "b", "c"}},
		{[]string{"a", "--as=bob", "--force=false"}, "bob", false, []string{"a"}},
		// "--" ends the flags: what follows is positional, even "-x".
		{[]string{"a", "--", "--force", "-x"}, "", false, []string{"a", "--force", "-x"}},
		{[]string{"--force", "--", "--"}, "", true, []string{"--"}},
		// A "--" that is a flag's value does not end the flags.
		{[]string{"--as", "--", "a", "--force"}, "--", true, []string{"a"}},
		{[]string{"-", "--force"}, "", true, []string{"-"}},
		{nil, "", false, nil},
	} {
		e, _, _ := newEnv()
		fs := e.FlagSet("approve", "usage")
		as := fs.String("as", "", "`NAME`")
		force := fs.Bool("force", false, "force")
		if err := Parse(fs, c.args); err != nil {
			t.Errorf("%q: %v", c.args, err)
			continue
		}
		if *as != c.as || *force != c.force || !slices.Equal(fs.Args(), c.pos) && len(c.pos)+fs.NArg() > 0 {
			t.Errorf("%q: as %q force %v args %q; want %q %v %q", c.args, *as, *force, fs.Args(), c.as, c.force, c.pos)
		}
	}
}

func TestParseErrorsAnywhere(t *testing.T) {
	for _, c := range []struct {
		args []string
		msg  string
	}{
		{[]string{"G", "--bogus"}, "flag provided but not defined: --bogus"},
		{[]string{"G", "-bogus"}, "flag provided but not defined: --bogus"},
		{[]string{"G", "--n", "x"}, `invalid value "x" for flag -n: parse error`},
		{[]string{"G", "--as"}, "flag needs an argument: --as"},
		{[]string{"G", "-H"}, "flag needs an argument: -H"},
	} {
		e, out, errb := newEnv()
		fs := e.FlagSet("approve", "usage")
		fs.String("as", "", "`NAME`")
		fs.String("H", "", "`HEADER`")
		fs.Int("n", 0, "`N`")
		err := Parse(fs, c.args)
		var u *UsageError
		if !errors.As(err, &u) || u.Msg != c.msg || u.Cmd != "impq approve" {
			t.Errorf("%q: %#v, want usage error %q for impq approve", c.args, err, c.msg)
		}
		if out.Len() != 0 || errb.Len() != 0 {
			t.Errorf("%q: parse printed %q %q", c.args, out, errb)
		}
	}
}

func TestHelpListsFlagsAsManPages(t *testing.T) {
	e, out, _ := newEnv()
	fs := e.FlagSet("cancel", "usage: impq cancel TASK\n")
	fs.String("as", "", "`NAME` of who cancels (default $USER)")
	fs.String("reason", "cancelled", "why")
	fs.Bool("json", false, "print JSON")
	fs.String("H", "", "a `HEADER`")
	if err := Parse(fs, []string{"--help"}); !errors.Is(err, flag.ErrHelp) {
		t.Fatal(err)
	}
	want := `usage: impq cancel TASK

Flags:
  -H HEADER        a HEADER
  --as NAME        NAME of who cancels (default $USER)
  --json           print JSON
  --reason STRING  why (default cancelled)
`
	if out.String() != want {
		t.Errorf("help:\n%s\nwant:\n%s", out, want)
	}
}

func TestColour(t *testing.T) {
	var buf bytes.Buffer
	t.Setenv("NO_COLOR", "")
	if Colour(ColorAuto, &buf) || !Colour(ColorAlways, &buf) || Colour(ColorNever, &buf) {
		t.Error("a buffer: want colour only with always")
	}
	tty := openTTY(t)
	if !Colour(ColorAuto, tty) || Colour(ColorNever, tty) {
		t.Error("a terminal: want colour with auto, none with never")
	}
	t.Setenv("NO_COLOR", "1")
	if Colour(ColorAuto, tty) {
		t.Error("a terminal with NO_COLOR: coloured")
	}
	if !Colour(ColorAlways, tty) {
		t.Error("--color=always with NO_COLOR: not coloured")
	}
	if p := Painter(false); p.Paint(Red, "deny") != "deny" {
		t.Error("a painter that is off painted")
	}
	if got := Painter(true).Paint(StateStyle("deny"), "deny"); got != "\x1b[31mdeny\x1b[0m" {
		t.Errorf("deny painted %q", got)
	}
	for _, s := range []Style{Plain, Bold, Red, Green, Amber, Cyan} {
		if len(s) != len(Plain) {
			t.Errorf("style %q is not as long as Plain: columns would shift", s)
		}
	}

	var m ColorMode
	if err := m.Set("sometimes"); err == nil {
		t.Error("--color=sometimes accepted")
	}
}

// openTTY opens a pseudo-terminal's terminal end.
func openTTY(t *testing.T) *os.File {
	t.Helper()
	if _, err := exec.LookPath("script"); err != nil {
		t.Skip("script(1) is needed for a terminal")
	}
	ptmx, err := os.OpenFile("/dev/ptmx", os.O_RDWR, 0)
	if err != nil {
		t.Skipf("no pseudo-terminals: %v", err)
	}
	t.Cleanup(func() { ptmx.Close() })
	name, err := ptsName(ptmx)
	if err != nil {
		t.Skipf("no pseudo-terminals: %v", err)
	}
	tty, err := os.OpenFile(name, os.O_RDWR, 0)
	if err != nil {
		t.Skipf("no pseudo-terminals: %v", err)
	}
	t.Cleanup(func() { tty.Close() })
	return tty
}

// treeEnv is a command with a subcommand group, described for completion.
func treeEnv() (*Env, string, map[string]func([]string) error) {
	e, _, _ := newEnv()
	usage := "usage: impq COMMAND\n\nCommands:\n  add    file a task\n  token  issue or revoke\n         tokens\n\nExamples:\n  impq add x\n"
	cmds := map[string]func([]string) error{
		"add": func(args []string) error {
			fs := e.FlagSet("add", "usage")
			fs.String("imp", "", "the imp `NAME`")
			fs.Bool("force", false, "queue 'anyway'")
			fs.String("kind", "research", "task `KIND`")
			e.Complete(fs, "imp", Names("imp"))
			e.Complete(fs, "kind", Words("research", "code"))
			if err := Parse(fs, args); err != nil {
				return err
			}
			panic("add ran while described")
		},
		"token": func(args []string) error {
			return e.Group("token", args, "usage", map[string]func([]string) error{
				"issue": func(args []string) error {
					fs := e.FlagSet("token issue", "usage")
					fs.String("task", "", "the `TASK`")
					e.Complete(fs, "", Names("task:waiting"))
					if err := Parse(fs, args); err != nil {
						return err
					}
					panic("issue ran while described")
				},
			})
		},
	}
	return e, usage, cmds
}

func TestTree(t *testing.T) {
	e, usage, cmds := treeEnv()
	root := e.Tree(usage, cmds)
	var got []string
	root.walk(nil, func(path []string, c *Command) {
		var flags []string
		for _, f := range c.Flags {
			flags = append(flags, f.Name)
		}
		got = append(got, strings.Join(path, " ")+": "+c.Summary+" "+strings.Join(flags, ","))
	})
	want := []string{
		":  help,version",
		"add: file a task force,imp,kind",
		"token: issue or revoke tokens ",
		"token issue:  task",
		"completion: print a shell completion script ",
		"completion bash: bash completion script ",
		"completion fish: fish completion script ",
		"completion zsh: zsh completion script ",
		"help: print the usage, or a command's help ",
	}
	if !slices.Equal(got, want) {
		t.Errorf("tree:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

// complete runs the bash completion script for words, the last being
// the word completed, and returns the candidates.
func complete(t *testing.T, script string, words ...string) []string {
	t.Helper()
	cmd := exec.Command("bash", "--norc", "-c", `source "$1"; shift
complete -p impq >/dev/null || exit 3
COMP_WORDS=("$@"); COMP_CWORD=$(($# - 1)); _impq; printf '%s\n' "${COMPREPLY[@]}"`, "bash", script)
	cmd.Args = append(cmd.Args, words...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%q: %v\n%s", words, err, out)
	}
	return strings.Fields(string(out))
}

func TestBashCompletion(t *testing.T) {
	if _, err := exec.LookPath("bash"); err != nil {
		t.Skip("bash is not installed")
	}
	e, usage, cmds := treeEnv()
	var b bytes.Buffer
	if err := Bash(&b, e.Tree(usage, cmds)); err != nil {
		t.Fatal(err)
	}
	script := filepath.Join(t.TempDir(), "impq.bash")
	if err := os.WriteFile(script, b.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("bash", "-n", script).CombinedOutput(); err != nil {
		t.Fatalf("bash -n: %v\n%s", err, out)
	}
	for _, c := range []struct {
		words []string
		want  []string
	}{
		{[]string{"impq", ""}, []string{"add", "token", "completion", "help"}},
		{[]string{"impq", "to"}, []string{"token"}},
		{[]string{"impq", "--"}, []string{"--help", "--version"}},
		{[]string{"impq", "add", "--"}, []string{"--force", "--imp", "--kind"}},
		{[]string{"impq", "add", "text", "--f"}, []string{"--force"}},
		{[]string{"impq", "token", ""}, []string{"issue"}},
		{[]string{"impq", "token", "issue", "--"}, []string{"--task"}},
		{[]string{"impq", "completion", "z"}, []string{"zsh"}},
		// A flag's value is not completed from the command's words.
		{[]string{"impq", "token", "issue", "--task", ""}, nil},
		{[]string{"impq", "add", "--kind", "c"}, []string{"code"}},
		{[]string{"impq", "add", "--kind", "=", ""}, []string{"research", "code"}},
	} {
		if got := complete(t, script, c.words...); !slices.Equal(got, c.want) {
			t.Errorf("%q completes to %q, want %q", c.words, got, c.want)
		}
	}
}

func TestZshAndFishCompletionParse(t *testing.T) {
	e, usage, cmds := treeEnv()
	root := e.Tree(usage, cmds)
	for _, c := range []struct {
		shell string
		gen   func(w *bytes.Buffer) error
		want  string
	}{
		{"zsh", func(w *bytes.Buffer) error { return Zsh(w, root) }, `'--force:queue '\''anyway'\'''`},
		{"fish", func(w *bytes.Buffer) error { return Fish(w, root) }, `-l 'force' -d 'queue \'anyway\''`},
	} {
		var b bytes.Buffer
		if err := c.gen(&b); err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(b.String(), c.want) {
			t.Errorf("%s script lacks %s:\n%s", c.shell, c.want, b.String())
		}
		if _, err := exec.LookPath(c.shell); err != nil {
			t.Logf("%s is not installed (apt-get install %[1]s): its script is not syntax-checked", c.shell)
			continue
		}
		script := filepath.Join(t.TempDir(), "impq."+c.shell)
		if err := os.WriteFile(script, b.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
		if out, err := exec.Command(c.shell, "-n", script).CombinedOutput(); err != nil {
			t.Errorf("%s -n: %v\n%s", c.shell, err, out)
		}
	}
}

func TestParseNone(t *testing.T) {
	e, _, _ := newEnv()
	fs := e.FlagSet("key ls", "usage")
	asJSON := fs.Bool("json", false, "JSON")
	if err := ParseNone(fs, []string{"--json"}); err != nil || !*asJSON {
		t.Errorf("--json: %v, json %v", err, *asJSON)
	}
	err := ParseNone(fs, []string{"--json", "extra"})
	var u *UsageError
	if !errors.As(err, &u) || u.Msg != `key ls: unexpected argument "extra"` {
		t.Errorf("extra argument: %v, want a usage error naming it", err)
	}
}

// TestCompletionAsksTheCommand: for the names of a kind the bash script
// runs the command's __complete with the kind, the word and the
// command line's --root, and offers the words it prints, not what
// follows their tab.
func TestCompletionAsksTheCommand(t *testing.T) {
	if _, err := exec.LookPath("bash"); err != nil {
		t.Skip("bash is not installed")
	}
	e, usage, cmds := treeEnv()
	var b bytes.Buffer
	if err := Bash(&b, e.Tree(usage, cmds)); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	script, log := filepath.Join(dir, "impq.bash"), filepath.Join(dir, "asked")
	if err := os.WriteFile(script, b.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	fake := "#!/bin/sh\necho \"$*\" >>" + log + "\nprintf 'yuko\\tthe imp\\nyumi\\n'\n"
	if err := os.WriteFile(filepath.Join(dir, "impq"), []byte(fake), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Setenv("PATH", dir+string(os.PathListSeparator)+os.Getenv("PATH"))
	t.Setenv("HOME", "/home/owner")
	for _, c := range []struct {
		words []string
		want  []string
		asked string
	}{
		{[]string{"impq", "add", "--imp", "y"}, []string{"yuko", "yumi"}, "__complete imp y \n"},
		{[]string{"impq", "--root", "/srv/yard", "add", "--imp", ""}, []string{"yuko", "yumi"}, "__complete imp  /srv/yard\n"},
		{[]string{"impq", "add", "--root", "=", "~/yard", "--imp", "=", "y"}, []string{"yuko", "yumi"}, "__complete imp y /home/owner/yard\n"},
		{[]string{"impq", "token", "issue", ""}, []string{"yuko", "yumi"}, "__complete task:waiting  \n"},
	} {
		os.Remove(log)
		if got := complete(t, script, c.words...); !slices.Equal(got, c.want) {
			t.Errorf("%q completes to %q, want %q", c.words, got, c.want)
		}
		if asked, _ := os.ReadFile(log); string(asked) != c.asked {
			t.Errorf("%q asked %q, want %q", c.words, asked, c.asked)
		}
	}
}

// TestNamesAnswer: __complete prints the names of a kind beginning with
// the word, one a line with what each is after a tab, on one printable
// line; a name a shell would read as more than a word is left out; a
// command that lists no names prints nothing, and neither fails.
func TestNamesAnswer(t *testing.T) {
	e, out, errb := newEnv()
	var asked []string
	e.Names = func(root, kind, word string) []Name {
		asked = append(asked, root, kind, word)
		return []Name{
			{Word: "yuko", About: "two\tcolumns\x1b[31m red\nline"},
			{Word: "yumi"},
			{Word: "y$(touch x)"},
			{Word: "y uko"},
			{Word: "mina"},
		}
	}
	if code := e.Dispatch([]string{"__complete", "imp", "y", "/srv/yard"}, "usage", nil); code != OK {
		t.Errorf("exit %d", code)
	}
	want := "yuko\ttwo columns\\x1b[31m red line\nyumi\n"
	if out.String() != want || errb.Len() != 0 || !slices.Equal(asked, []string{"/srv/yard", "imp", "y"}) {
		t.Errorf("__complete printed %q, stderr %q, asked %q; want %q", out, errb, asked, want)
	}
	e, out, errb = newEnv()
	if code := e.Dispatch([]string{"__complete", "imp", ""}, "usage", nil); code != OK || out.Len() != 0 || errb.Len() != 0 {
		t.Errorf("__complete of a command that lists no names: exit %d, %q, %q", code, out, errb)
	}
}

// TestCompleteNamesAFlag: a completion given for a flag the command does
// not define is a mistake its description shows at once.
func TestCompleteNamesAFlag(t *testing.T) {
	e, _, _ := newEnv()
	defer func() {
		if r := recover(); r == nil || !strings.Contains(fmt.Sprint(r), "--imps") {
			t.Errorf("recovered %v, want a panic naming --imps", r)
		}
	}()
	e.Tree("usage", map[string]func([]string) error{"ls": func(args []string) error {
		fs := e.FlagSet("ls", "usage")
		fs.String("imp", "", "imp")
		e.Complete(fs, "imps", Names("imp"))
		return Parse(fs, args)
	}})
}
