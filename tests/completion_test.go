package tests

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"syscall"
	"testing"

	"github.com/impyard/impyard/lib/queue"
	"github.com/impyard/impyard/lib/state"
	"github.com/impyard/impyard/lib/yard"
	"golang.org/x/sys/unix"
)

// TestMakeInstallCompletions: make install puts each binary's bash, zsh
// and fish completion where those shells look for them under PREFIX,
// below DESTDIR, mode 0644; the installed bash script completes the
// binary's subcommands.
func TestMakeInstallCompletions(t *testing.T) {
	if _, err := exec.LookPath("make"); err != nil {
		t.Skip("make is not installed")
	}
	dest := t.TempDir()
	cmd := exec.Command("make", "-C", "..", "install", "PREFIX=/usr/local", "DESTDIR="+dest)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("make install: %v\n%s", err, out)
	}
	share := filepath.Join(dest, "usr", "local", "share")
	for _, name := range []string{"impexec", "impgate", "impgw", "impq", "impsup"} {
		for _, p := range []string{
			filepath.Join(share, "bash-completion", "completions", name),
			filepath.Join(share, "zsh", "site-functions", "_"+name),
			filepath.Join(share, "fish", "vendor_completions.d", name+".fish"),
		} {
			fi, err := os.Stat(p)
			if err != nil {
				t.Fatal(err)
			}
			if fi.Mode().Perm() != 0o644 || fi.Size() == 0 {
				t.Errorf("%s: mode %o, %d bytes; want 644 and a script", p, fi.Mode().Perm(), fi.Size())
			}
		}
	}
	if _, err := exec.LookPath("bash"); err != nil {
		t.Skip("bash is not installed")
	}
	script := filepath.Join(share, "bash-completion", "completions", "impgate")
	out, err := exec.Command("bash", "--norc", "-c", `. "$1"; complete -p impgate >/dev/null || exit 3
COMP_WORDS=(impgate ap); COMP_CWORD=1; _impgate; echo "${COMPREPLY[@]}"`, "bash", script).CombinedOutput()
	if err != nil || strings.TrimSpace(string(out)) != "approve" {
		t.Errorf("installed bash completion of 'impgate ap': %q, %v; want approve", out, err)
	}
}

// TestManSynopsisNamesEveryFlag: every flag a command parses, as its
// completion script lists them, is in its man page's SYNOPSIS, written
// as the page writes flags (Fl -name, Fl H for one letter).
func TestManSynopsisNamesEveryFlag(t *testing.T) {
	flagsLine := regexp.MustCompile(`^\t'flags:([^']*)'\) echo '([^']*)' ;;$`)
	for _, page := range []string{"impq.1", "impgate.1", "impgw.8", "impsup.8", "impexec.8"} {
		name := strings.TrimSuffix(page, filepath.Ext(page))
		b, err := os.ReadFile(filepath.Join("..", "man", page))
		if err != nil {
			t.Fatal(err)
		}
		synopsis, _, _ := strings.Cut(string(b), ".Sh DESCRIPTION")
		_, synopsis, _ = strings.Cut(synopsis, ".Sh SYNOPSIS")
		out, err := exec.Command(filepath.Join(bin, name), "completion", "bash").Output()
		if err != nil {
			t.Fatalf("%s completion bash: %v", name, err)
		}
		n := 0
		for _, line := range strings.Split(string(out), "\n") {
			m := flagsLine.FindStringSubmatch(line)
			if m == nil {
				continue
			}
			for _, f := range strings.Fields(m[2]) {
				n++
				if !regexp.MustCompile(`Fl ` + regexp.QuoteMeta(strings.TrimPrefix(f, "-")) + `(\s|$)`).MatchString(synopsis) {
					t.Errorf("%s: %s %s parses %s; the SYNOPSIS does not name it", page, name, m[1], f)
				}
			}
		}
		if n < 5 {
			t.Errorf("%s: %d flags found in its completion script; the parse of the script is broken", name, n)
		}
	}
}

// completionYard is a yard for the completion tests: imps yuko and mina
// (and a directory under imps/ that is no imp's name), tasks waiting,
// cancelled and failed, one gate pending and one denied. env runs the
// binaries on it, with a home of the test's own for the shells.
type completionYard struct {
	root string
	env  []string
}

func newCompletionYard(t *testing.T) *completionYard {
	t.Helper()
	home := t.TempDir()
	c := &completionYard{root: filepath.Join(t.TempDir(), "yard"), env: append(os.Environ(),
		"PATH="+bin+string(os.PathListSeparator)+os.Getenv("PATH"), "HOME="+home,
		"XDG_CONFIG_HOME="+filepath.Join(home, ".config"), "XDG_DATA_HOME="+filepath.Join(home, ".local", "share"))}
	c.must(t, "", "impsup", "init", c.root)
	c.env = append(c.env, "IMPYARD_ROOT="+c.root)
	for _, d := range []string{"yuko", "mina", "Bad Name"} {
		if err := os.MkdirAll(filepath.Join(c.root, "imps", d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	f, err := os.OpenFile(filepath.Join(c.root, "org.toml"), os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteString("\n[executors.message-user]\nkind = \"message-user\"\n"); err != nil {
		t.Fatal(err)
	}
	f.Close()
	var tasks []string
	for i := range 4 {
		tasks = append(tasks, strings.TrimSpace(c.must(t, "", "impq", "add", "--force", "--imp", "yuko", fmt.Sprintf("task %d", i))))
	}
	c.must(t, "", "impq", "cancel", tasks[1])
	y, err := yard.Open(c.root)
	if err != nil {
		t.Fatal(err)
	}
	for _, to := range []string{state.Running, state.Failed} {
		if _, err := queue.Move(y, tasks[2], queue.Change{To: to, By: "test", Actor: "test", Why: "test"}); err != nil {
			t.Fatal(err)
		}
	}
	var gates []string
	for range 2 {
		gates = append(gates, strings.TrimSpace(c.must(t, `{"text":"hello"}`, "impgate", "file", "--imp", "yuko", "--intent", "message-user", "--payload-file", "-")))
	}
	c.must(t, "", "impgate", "deny", gates[1])
	return c
}

func (c *completionYard) must(t *testing.T, stdin string, name string, args ...string) string {
	t.Helper()
	cmd := exec.Command(filepath.Join(bin, name), args...)
	cmd.Env, cmd.Stdin = c.env, strings.NewReader(stdin)
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("%s %q: %v\n%s", name, args, err, out)
	}
	return string(out)
}

// shorts are the ids a listing prints with --json, each as the
// abbreviation a terminal shows, of the records whose state is one of
// states (any, for none).
func (c *completionYard) shorts(t *testing.T, list []string, states ...string) []string {
	t.Helper()
	var ids []string
	for _, line := range strings.Split(strings.TrimSpace(c.must(t, "", list[0], list[1:]...)), "\n") {
		var r struct{ ShortID, State string }
		if err := json.Unmarshal([]byte(line), &struct {
			ShortID *string `json:"short_id"`
			State   *string `json:"state"`
		}{&r.ShortID, &r.State}); err != nil {
			t.Fatalf("%q: %v", line, err)
		}
		if len(states) == 0 || slices.Contains(states, r.State) {
			ids = append(ids, r.ShortID)
		}
	}
	slices.Sort(ids)
	return ids
}

// shellCompletions are the words a shell completes the command line
// line to, its last word (maybe empty) the one completed, with the
// script the command prints: bash calls the script's function as
// programmable completion does; fish completes with complete -C; zsh,
// whose completion system needs a terminal, runs the script with
// _describe and _files standing in for the system's own, keeping the
// words that begin the word completed.
func (c *completionYard) shellCompletions(t *testing.T, shell, line string, env ...string) (words []string, stderr string) {
	t.Helper()
	fields := strings.Fields(line)
	if strings.HasSuffix(line, " ") {
		fields = append(fields, "")
	}
	name := fields[0]
	script := filepath.Join(t.TempDir(), name+"."+shell)
	if err := os.WriteFile(script, []byte(c.must(t, "", name, "completion", shell)), 0o644); err != nil {
		t.Fatal(err)
	}
	var cmd *exec.Cmd
	switch shell {
	case "bash":
		cmd = exec.Command("bash", "--norc", "--noprofile", "-c", `source "$1"; shift
COMP_WORDS=("$@"); COMP_CWORD=$(($# - 1)); _`+name+`; printf '%s\n' "${COMPREPLY[@]}"`, "bash", script)
		cmd.Args = append(cmd.Args, fields...)
	case "zsh":
		cmd = exec.Command("zsh", "-f", "-c", `_describe() {
	local x
	for x in "${(@P)4}"; do
		x=${x%%:*}
		[[ $x == "$PREFIX"* ]] && print -r -- $x
	done
}
_files() { print -r -- FILES; }
script=$1; shift
words=("$@"); CURRENT=$#; PREFIX=${words[-1]}
source $script
exit 0`, "zsh", script)
		cmd.Args = append(cmd.Args, fields...)
	case "fish":
		cmd = exec.Command("fish", "--no-config", "-c", `source $argv[1]; complete -C $argv[2]`, script, line)
	}
	cmd.Env = append(slices.Clip(c.env), env...)
	var errb strings.Builder
	cmd.Stderr = &errb
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("%s completing %q: %v\n%s%s", shell, line, err, out, errb.String())
	}
	for _, l := range strings.Split(string(out), "\n") {
		if w, _, _ := strings.Cut(l, "\t"); w != "" {
			words = append(words, w)
		}
	}
	slices.Sort(words)
	return words, errb.String()
}

// TestCompletionOfNames: in bash, zsh and fish, the completion scripts
// complete task and gate ids (as the listings abbreviate them, only those
// in a state the command takes), imp names and the values of --state and
// --color, asking the binary; a word longer than an abbreviation
// completes to the whole id; with no yard they complete nothing and
// print nothing.
func TestCompletionOfNames(t *testing.T) {
	for _, shell := range []string{"bash", "zsh", "fish"} {
		if _, err := exec.LookPath(shell); err != nil {
			t.Fatalf("%s is not installed: scripts/deps installs it", shell)
		}
	}
	c := newCompletionYard(t)
	tasks := c.shorts(t, []string{"impq", "ls", "--json"})
	gates := c.shorts(t, []string{"impgate", "ls", "--all", "--json"})
	full := strings.TrimSpace(c.must(t, "", "impq", "ls", "--state", "failed", "--json"))
	var failed struct{ ID string }
	if err := json.Unmarshal([]byte(full), &failed); err != nil {
		t.Fatal(err)
	}
	long := failed.ID[:len(c.shorts(t, []string{"impq", "ls", "--state", "failed", "--json"})[0])+1]
	for _, tc := range []struct {
		line string
		want []string
	}{
		{"impq show ", tasks},
		{"impq cancel ", c.shorts(t, []string{"impq", "ls", "--json"}, state.Waiting, state.Running, state.NeedsReview)},
		{"impq retry ", c.shorts(t, []string{"impq", "ls", "--json"}, state.Failed)},
		{"impq show " + long, []string{failed.ID}},
		{"impq add --imp ", []string{"mina", "yuko"}},
		{"impq add --imp y", []string{"yuko"}},
		{"impq memory ", []string{"mina", "yuko"}},
		{"impq ls --state ne", []string{"needs-review"}},
		{"impgate approve ", c.shorts(t, []string{"impgate", "ls", "--json"})},
		{"impgate show ", gates},
		{"impgate ls --color a", []string{"always", "auto"}},
		{"impsup pause ", []string{"mina", "yuko"}},
		{"impgw log --verdict t", []string{"tunnel"}},
	} {
		if len(tc.want) == 0 {
			t.Fatalf("%q: the yard has nothing to complete", tc.line)
		}
		for _, shell := range []string{"bash", "zsh", "fish"} {
			got, stderr := c.shellCompletions(t, shell, tc.line)
			if !slices.Equal(got, tc.want) || stderr != "" {
				t.Errorf("%s: %q completes to %q (stderr %q), want %q", shell, tc.line, got, stderr, tc.want)
			}
		}
	}
	// No yard: nothing, not even file names, and no error; but the yard
	// the command line names with --root.
	elsewhere := t.TempDir()
	for _, shell := range []string{"bash", "zsh", "fish"} {
		line := "impq --root " + c.root + " show "
		if got, _ := c.shellCompletions(t, shell, line, "IMPYARD_ROOT="+elsewhere); !slices.Equal(got, tasks) {
			t.Errorf("%s: %q completes to %q, want %q", shell, line, got, tasks)
		}
	}
	for _, line := range []string{"impq show ", "impq add --imp ", "impgate approve ", "impq --root " + elsewhere + " show "} {
		for _, shell := range []string{"bash", "zsh", "fish"} {
			got, stderr := c.shellCompletions(t, shell, line, "IMPYARD_ROOT="+elsewhere)
			if len(got) != 0 || stderr != "" {
				t.Errorf("%s without a yard: %q completes to %q, stderr %q; want nothing", shell, line, got, stderr)
			}
		}
	}
}

// interactiveBash completes line as a person does, in an interactive
// bash on a pseudo-terminal with the command's script sourced and
// matches listed at the first tab: line, a tab, then a marker command;
// it returns what the terminal showed
// between the line and the marker's output, which comes after whatever
// the completion printed.
func (c *completionYard) interactiveBash(t *testing.T, dir, line string, env ...string) string {
	t.Helper()
	ptmx, err := os.OpenFile("/dev/ptmx", os.O_RDWR, 0)
	if err != nil {
		t.Skipf("no pseudo-terminals: %v", err)
	}
	defer ptmx.Close()
	if err := unix.IoctlSetPointerInt(int(ptmx.Fd()), unix.TIOCSPTLCK, 0); err != nil {
		t.Fatal(err)
	}
	n, err := unix.IoctlGetUint32(int(ptmx.Fd()), unix.TIOCGPTN)
	if err != nil {
		t.Fatal(err)
	}
	tty, err := os.OpenFile(fmt.Sprintf("/dev/pts/%d", n), os.O_RDWR|unix.O_NOCTTY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer tty.Close()
	name := strings.Fields(line)[0]
	script := filepath.Join(t.TempDir(), name+".bash")
	if err := os.WriteFile(script, []byte(c.must(t, "", name, "completion", "bash")), 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("bash", "--norc", "--noprofile", "-i")
	cmd.Dir, cmd.Env = dir, append(slices.Clip(c.env), append(env, "PS1=$ ", "TERM=dumb")...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = tty, tty, tty
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true, Setctty: true}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Wait()
	defer cmd.Process.Kill()
	var out []byte
	buf := make([]byte, 4096)
	// upTo reads the terminal until it has shown want, and returns what
	// it showed since the last call.
	seen := 0
	upTo := func(want string) string {
		for !strings.Contains(string(out[seen:]), want) {
			n, err := ptmx.Read(buf)
			if err != nil {
				t.Fatalf("bash ended before showing %q: %v\n%s", want, err, out)
			}
			out = append(out, buf[:n]...)
		}
		i := seen + strings.Index(string(out[seen:]), want) + len(want)
		s := string(out[seen:i])
		seen = i
		return s
	}
	write := func(s string) {
		if _, err := ptmx.WriteString(s); err != nil {
			t.Fatal(err)
		}
	}
	// Each step waits for the prompt, when readline reads keys one by
	// one; a marker is printed from two pieces, so its echo as typed is
	// not taken for its output.
	upTo("$ ")
	write("source " + script + "; bind 'set show-all-if-ambiguous on'; printf '%s-%s\\n' sourced ok\n")
	upTo("sourced-ok\r\n")
	upTo("$ ")
	write(line + "\t\x15printf '%s-%s\\n' completion done\n")
	shown := upTo("completion-done\r\n")
	write("exit\n")
	_, shown, _ = strings.Cut(shown, line)
	return shown
}

// TestInteractiveBashCompletion: in an interactive bash, a tab after "impq
// show " lists the yard's task ids; where there is no yard it lists
// nothing at all, not the directory's files, as they would for a
// command that takes file names.
func TestInteractiveBashCompletion(t *testing.T) {
	c := newCompletionYard(t)
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "somefile"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	shown := c.interactiveBash(t, dir, "impq show ")
	for _, s := range c.shorts(t, []string{"impq", "ls", "--json"}) {
		if !strings.Contains(shown, s) {
			t.Errorf("impq show <tab> showed %q; %s is not in it", shown, s)
		}
	}
	if shown := c.interactiveBash(t, dir, "impq show ", "IMPYARD_ROOT="+dir); strings.Contains(shown, "somefile") || strings.Contains(shown, "t-") {
		t.Errorf("impq show <tab> with no yard showed %q; want nothing", shown)
	}
	// The same directory's files where a file name is due.
	if shown := c.interactiveBash(t, dir, "impsup config edit ", "IMPYARD_ROOT="+dir); !strings.Contains(shown, "somefile") {
		t.Errorf("impsup config edit <tab> showed %q; want the directory's file", shown)
	}
}
