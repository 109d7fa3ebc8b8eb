package cli

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"runtime/debug"
	"strings"
	"testing"
	"time"

	"github.com/impyard/impyard/lib/store"
)

func newEnv() (*Env, *bytes.Buffer, *bytes.Buffer) {
	var out, errb bytes.Buffer
	return &Env{Name: "impq", Stdout: &out, Stderr: &errb}, &out, &errb
}

func TestReport(t *testing.T) {
	for _, c := range []struct {
		name   string
		err    error
		code   int
		stderr string
	}{
		{"nil", nil, OK, ""},
		{"help", flag.ErrHelp, OK, ""},
		{"wrapped help", fmt.Errorf("parse: %w", flag.ErrHelp), OK, ""},
		{"failure", errors.New("task t-1 is done"), Fail, "impq: error: task t-1 is done\n"},
		{"usage", Usagef("unknown flag %q", "-x"), Usage, "impq: error: unknown flag \"-x\"\nimpq: hint: try 'impq --help'\n"},
		{"wrapped usage", fmt.Errorf("add: %w", Usagef("no text")), Usage, "impq: error: add: no text\nimpq: hint: try 'impq --help'\n"},
		{"usage of a subcommand", &UsageError{Msg: "no text", Cmd: "impq add"}, Usage, "impq: error: no text\nimpq: hint: try 'impq add --help'\n"},
		{"busy", fmt.Errorf("queue/yuko: %w", store.ErrBusy), Temp, "impq: error: queue/yuko: " + store.ErrBusy.Error() + "\n"},
		{"hint", WithHint(errors.New("no yard here"), "run impq init"), Fail, "impq: error: no yard here\nimpq: hint: run impq init\n"},
		{"hint on usage", WithHint(Usagef("bad"), "see impq ls"), Usage, "impq: error: bad\nimpq: hint: see impq ls\nimpq: hint: try 'impq --help'\n"},
		{"hint on busy", WithHint(store.ErrBusy, "try again"), Temp, "impq: error: " + store.ErrBusy.Error() + "\nimpq: hint: try again\n"},
	} {
		e, out, errb := newEnv()
		if got := e.Report(c.err); got != c.code {
			t.Errorf("%s: exit %d, want %d", c.name, got, c.code)
		}
		if errb.String() != c.stderr || out.Len() != 0 {
			t.Errorf("%s: stderr %q stdout %q, want stderr %q", c.name, errb, out, c.stderr)
		}
	}
}

func TestWarnAndLogf(t *testing.T) {
	e, _, errb := newEnv()
	e.Warn(errors.New("policy reloaded"))
	if got, want := errb.String(), "impq: warning: policy reloaded\n"; got != want {
		t.Errorf("Warn wrote %q, want %q", got, want)
	}
	errb.Reset()
	before := time.Now().UTC().Truncate(time.Second)
	e.Logf("gate %s: %s", "g-1", "executed")
	line := errb.String()
	rest, ok := strings.CutPrefix(line, "impq: ")
	ts, msg, _ := strings.Cut(rest, " ")
	at, err := time.Parse(time.RFC3339, ts)
	if !ok || err != nil || msg != "gate g-1: executed\n" || at.Before(before) || at.Location() != time.UTC {
		t.Errorf("Logf wrote %q", line)
	}
}

func TestFlagSetAndParse(t *testing.T) {
	e, out, errb := newEnv()
	fs := e.FlagSet("add", "\nusage: impq add [--root DIR] TEXT\n")
	root := RootFlag(fs)
	if err := Parse(fs, []string{"--root", "/y", "hello"}); err != nil || *root != "/y" || fs.Arg(0) != "hello" {
		t.Errorf("parse: %v root %q args %q", err, *root, fs.Args())
	}
	if fs.Name() != "impq add" {
		t.Errorf("flag set named %q", fs.Name())
	}
	if out.Len() != 0 || errb.Len() != 0 {
		t.Errorf("a good parse printed %q %q", out, errb)
	}

	e, out, errb = newEnv()
	fs = e.FlagSet("add", "\nusage: impq add TEXT\n")
	RootFlag(fs)
	err := Parse(fs, []string{"--bogus"})
	var u *UsageError
	if !errors.As(err, &u) || !strings.Contains(err.Error(), "bogus") {
		t.Errorf("bad flag: %v, want a UsageError", err)
	}
	if e.Report(err) != Usage {
		t.Errorf("bad flag does not exit %d", Usage)
	}
	// One error line in the man pages' spelling of the flag, and the
	// command whose help to read: never the usage, never twice.
	if s, want := errb.String(), "impq: error: flag provided but not defined: --bogus\nimpq: hint: try 'impq add --help'\n"; s != want || out.Len() != 0 {
		t.Errorf("bad flag printed %q, want %q", s, want)
	}

	// -h and --help print the usage text on stdout, without its leading
	// newline, then the flags as the man pages write them.
	for _, h := range []string{"-h", "--help", "-help"} {
		e, out, errb := newEnv()
		fs := e.FlagSet("add", "\nusage: impq add TEXT\n")
		RootFlag(fs)
		if err := Parse(fs, []string{"x", h}); !errors.Is(err, flag.ErrHelp) || errors.As(err, &u) {
			t.Errorf("%s: %v, want flag.ErrHelp", h, err)
		}
		if s := out.String(); !strings.HasPrefix(s, "usage: impq add TEXT\n\nFlags:\n  --root DIR  the yard DIR") || errb.Len() != 0 {
			t.Errorf("%s printed %q, stderr %q", h, s, errb)
		}
		if e.Report(flag.ErrHelp) != OK {
			t.Errorf("%s does not exit 0", h)
		}
	}
}

func TestJSONLine(t *testing.T) {
	var b bytes.Buffer
	if err := JSONLine(&b, map[string]any{"id": "t-1", "n": 2}); err != nil {
		t.Fatal(err)
	}
	if err := JSONLine(&b, []string{"a"}); err != nil {
		t.Fatal(err)
	}
	if got, want := b.String(), "{\"id\":\"t-1\",\"n\":2}\n[\"a\"]\n"; got != want {
		t.Errorf("wrote %q, want %q", got, want)
	}
	if err := JSONLine(&b, func() {}); err == nil {
		t.Error("encoded a func")
	}
	if err := JSONLine(failWriter{}, 1); err == nil {
		t.Error("a failed write was not reported")
	}
}

type failWriter struct{}

func (failWriter) Write([]byte) (int, error) { return 0, errors.New("disk full") }

func TestUser(t *testing.T) {
	for _, c := range []struct{ user, logname, want string }{
		{"alice", "bob", "alice"},
		{"", "bob", "bob"},
		{"", "", "unknown"},
	} {
		t.Setenv("USER", c.user)
		t.Setenv("LOGNAME", c.logname)
		if got := User(); got != c.want {
			t.Errorf("USER=%q LOGNAME=%q: User() = %q, want %q", c.user, c.logname, got, c.want)
		}
	}
}

func TestDispatch(t *testing.T) {
	const usage = "\nusage: impq COMMAND\n"
	var ran []string
	cmds := map[string]func([]string) error{
		"ok":   func(args []string) error { ran = append(ran, strings.Join(args, " ")); return nil },
		"fail": func([]string) error { return errors.New("refused") },
		"busy": func([]string) error { return store.ErrBusy },
		"bad":  func([]string) error { return Usagef("want one thing") },
	}
	for _, c := range []struct {
		args           []string
		code           int
		stdout, stderr string
	}{
		{nil, Usage, "", "impq: error: no command; commands: bad, busy, fail, ok\nimpq: hint: try 'impq --help'\n"},
		{[]string{"help"}, OK, "usage: impq COMMAND\n", ""},
		{[]string{"-h"}, OK, "usage: impq COMMAND\n", ""},
		{[]string{"-help"}, OK, "usage: impq COMMAND\n", ""},
		{[]string{"--help"}, OK, "usage: impq COMMAND\n", ""},
		{[]string{"--version"}, OK, Version("impq") + "\n", ""},
		{[]string{"-version"}, OK, Version("impq") + "\n", ""},
		{[]string{"nope"}, Usage, "", "impq: error: unknown command \"nope\"; commands: bad, busy, fail, ok\nimpq: hint: try 'impq --help'\n"},
		{[]string{"bsuy"}, Usage, "", "impq: error: unknown command \"bsuy\"; did you mean \"busy\"?\nimpq: hint: try 'impq --help'\n"},
		{[]string{"frobnicate"}, Usage, "", "impq: error: unknown command \"frobnicate\"; commands: bad, busy, fail, ok\nimpq: hint: try 'impq --help'\n"},
		{[]string{"help", "nope"}, Usage, "", "impq: error: unknown command \"nope\"; commands: bad, busy, fail, ok\nimpq: hint: try 'impq --help'\n"},
		{[]string{"bad"}, Usage, "", "impq: error: want one thing\nimpq: hint: try 'impq bad --help'\n"},
		{[]string{"ok", "a", "b"}, OK, "", ""},
		{[]string{"fail"}, Fail, "", "impq: error: refused\n"},
		{[]string{"busy"}, Temp, "", "impq: error: " + store.ErrBusy.Error() + "\n"},
	} {
		e, out, errb := newEnv()
		if got := e.Dispatch(c.args, usage, cmds); got != c.code || out.String() != c.stdout || errb.String() != c.stderr {
			t.Errorf("Dispatch(%q) = %d, stdout %q, stderr %q; want %d, %q, %q", c.args, got, out, errb, c.code, c.stdout, c.stderr)
		}
	}
	if len(ran) != 1 || ran[0] != "a b" {
		t.Errorf("ok ran with %q, want once with the rest of the arguments", ran)
	}
	// help COMMAND and COMMAND help ask the command for its help; help
	// beside another argument is an argument.
	for _, args := range [][]string{{"help", "ok"}, {"ok", "help"}} {
		ran = nil
		e, _, _ := newEnv()
		if got := e.Dispatch(args, usage, cmds); got != OK || len(ran) != 1 || ran[0] != "--help" {
			t.Errorf("%q = %d, ran %q; want ok run with --help", args, got, ran)
		}
	}
	ran = nil
	e, _, _ := newEnv()
	if got := e.Dispatch([]string{"ok", "help", "me"}, usage, cmds); got != OK || len(ran) != 1 || ran[0] != "help me" {
		t.Errorf("ok help me = %d, ran %q; want ok run with help me", got, ran)
	}
}

func TestAge(t *testing.T) {
	now := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	for _, c := range []struct {
		ago  time.Duration
		want string
	}{
		{0, "0s"},
		{59*time.Second + 999*time.Millisecond, "59s"},
		{time.Minute, "1m"},
		{59*time.Minute + 59*time.Second, "59m"},
		{time.Hour, "1h"},
		{47*time.Hour + 59*time.Minute, "47h"},
		{48 * time.Hour, "2d"},
		{71 * time.Hour, "2d"},
		{72 * time.Hour, "3d"},
		{400 * 24 * time.Hour, "400d"},
	} {
		if got := Age(now, now.Add(-c.ago)); got != c.want {
			t.Errorf("Age(%v ago) = %q, want %q", c.ago, got, c.want)
		}
	}
}

func TestOneLine(t *testing.T) {
	for _, c := range []struct {
		s    string
		n    int
		want string
	}{
		{"fix  the\n\tbuild ", 20, "fix the build"},
		{"abcdef", 6, "abcdef"},
		{"abcdefg", 6, "abcde…"},
		{"ééééééé", 4, "ééé…"},
		{"", 3, ""},
	} {
		if got := OneLine(c.s, c.n); got != c.want {
			t.Errorf("OneLine(%q, %d) = %q, want %q", c.s, c.n, got, c.want)
		}
	}
}

func TestTimeline(t *testing.T) {
	at := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	stamp := at.Local().Format(time.RFC3339)
	for _, c := range []struct {
		from, to, by, why, want string
	}{
		{"", "waiting", "alice", "", stamp + "  -            -> waiting      by alice"},
		{"running", "done", "impsup", "exit 0", stamp + "  running      -> done         by impsup: exit 0"},
	} {
		if got := Timeline(at, c.from, c.to, c.by, c.why); got != c.want {
			t.Errorf("Timeline(%q, %q) =\n%q, want\n%q", c.from, c.to, got, c.want)
		}
	}
}

func TestVersionLine(t *testing.T) {
	full := &debug.BuildInfo{
		Main: debug.Module{Version: "v0.3.0"},
		Settings: []debug.BuildSetting{
			{Key: "vcs.revision", Value: "87d2c41f0a1b2c3d4e5f60718293a4b5c6d7e8f9"},
			{Key: "vcs.modified", Value: "false"},
		},
	}
	dirty := &debug.BuildInfo{
		Main: debug.Module{Version: "v0.3.1-0.20261201013800-87d2c41f0a1b"},
		Settings: []debug.BuildSetting{
			{Key: "vcs.revision", Value: "87d2c41f0a1b2c3d"},
			{Key: "vcs.modified", Value: "true"},
		},
	}
	for _, c := range []struct {
		info *debug.BuildInfo
		want string
	}{
		{nil, "impq (devel) (unknown)"},
		{&debug.BuildInfo{}, "impq (devel) (unknown)"},
		{&debug.BuildInfo{Main: debug.Module{Version: "(devel)"}}, "impq (devel) (unknown)"},
		{full, "impq v0.3.0 (87d2c41f0a1b)"},
		{dirty, "impq v0.3.1-0.20261201013800-87d2c41f0a1b (87d2c41f0a1b, modified)"},
	} {
		if got := versionLine("impq", c.info); got != c.want {
			t.Errorf("versionLine(%+v) = %q, want %q", c.info, got, c.want)
		}
	}
	if got := Version("impq"); !strings.HasPrefix(got, "impq ") {
		t.Errorf("Version = %q", got)
	}
}

func TestDistance(t *testing.T) {
	for _, c := range []struct {
		a, b string
		want int
	}{
		{"", "", 0},
		{"", "ls", 2},
		{"ls", "", 2},
		{"approve", "approve", 0},
		{"aprove", "approve", 1},
		{"approvee", "approve", 1},
		{"apprive", "approve", 1},
		{"sattus", "status", 1},
		{"dney", "deny", 1},
		{"aprvoe", "approve", 2},
		{"kitten", "sitting", 3},
		{"frobnicate", "run", 8},
		{"naïve", "naive", 1},
	} {
		if got := Distance(c.a, c.b); got != c.want {
			t.Errorf("Distance(%q, %q) = %d, want %d", c.a, c.b, got, c.want)
		}
		if got := Distance(c.b, c.a); got != c.want {
			t.Errorf("Distance(%q, %q) = %d, want %d", c.b, c.a, got, c.want)
		}
	}
}

func TestNearest(t *testing.T) {
	cmds := []string{"show", "ls", "approve", "deny", "review", "file"}
	for _, c := range []struct {
		s, want string
		ok      bool
	}{
		{"aprove", "approve", true},
		{"sohw", "show", true},
		{"l", "ls", true},
		{"revew", "review", true},
		{"fiel", "file", true},
		// "lx" is one from "ls"; "sl" is one from "ls" and two from none
		// closer.
		{"lx", "ls", true},
		{"sl", "ls", true},
		{"appr", "", false},
		{"frobnicate", "", false},
		{"xy", "", false},
		{"", "", false},
	} {
		got, ok := Nearest(c.s, cmds)
		if got != c.want || ok != c.ok {
			t.Errorf("Nearest(%q) = %q, %v; want %q, %v", c.s, got, ok, c.want, c.ok)
		}
	}
	// Equally near: the first in order, whatever the order given.
	if got, _ := Nearest("ab", []string{"ac", "aa"}); got != "aa" {
		t.Errorf("tie broken to %q, want aa", got)
	}
}

// TestTimeoutFlagUsage: --timeout's help names the default wait as
// store.LockTimeout holds it when the flag is added.
func TestTimeoutFlagUsage(t *testing.T) {
	old := store.LockTimeout
	defer func() { store.LockTimeout = old }()
	store.LockTimeout = 90 * time.Second
	e, _, _ := newEnv()
	fs := flag.NewFlagSet("add", flag.ContinueOnError)
	e.TimeoutFlag(fs)
	want := "wait at most `DURATION` for a lock another process holds, then exit 111 (default 1m30s)"
	if got := fs.Lookup("timeout").Usage; got != want {
		t.Fatalf("--timeout usage %q, want %q", got, want)
	}
}
