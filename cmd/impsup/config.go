package main

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"

	"github.com/impyard/impyard/lib/cli"
	"github.com/impyard/impyard/lib/config"
	"github.com/impyard/impyard/lib/yard"
)

const configUsage = `usage: impsup config edit [--yes] [--root DIR] FILE

Edit an authority file as visudo edits sudoers: FILE (org.toml,
policies/gateway.json or imps/IMP/imp.toml, relative to the yard root)
is copied to a private temporary file, $VISUAL or $EDITOR (default vi)
opens the copy, and the result must load as the daemons would load it
(org.toml and imp.toml wholly; the policy's schema, its rules being
impgw's to judge). The difference is shown, and on a terminal 'y'
applies it; --yes applies it without asking, and is needed when standard
input is not a terminal. It is applied atomically, the previous file
kept as FILE.N, written as every yard file is (mode 0640, by the account
running it), so it passes strict modes (impyard-security(7)).

A FILE the daemons refuse for its owner or mode is not edited: an edit
would make whatever another account put there the owner's; review it,
then chown or chmod it. A FILE changed meanwhile is not overwritten. A
copy that does not load, or an answer other than y, changes nothing
(exit 1); the edited copy is kept, and its path said.

Examples:
  impsup config edit org.toml
  EDITOR=nano impsup config edit imps/yuko/imp.toml
`

func configCmd(e *cli.Env, args []string) error {
	return e.Group("config", args, configUsage, map[string]func([]string) error{
		"edit": func(a []string) error { return configEdit(e, a) },
	})
}

func configEdit(e *cli.Env, args []string) error {
	fs := e.FlagSet("config edit", configUsage)
	root := cli.RootFlag(fs)
	yes := fs.Bool("yes", false, "apply a change that loads without asking")
	if err := cli.Parse(fs, args); err != nil {
		return err
	}
	if fs.NArg() != 1 {
		return cli.Usagef("config edit: want one FILE")
	}
	y, err := yard.Open(*root)
	if err != nil {
		return err
	}
	a, err := config.AuthorityFile(y, fs.Arg(0))
	if errors.Is(err, config.ErrNotAuthority) {
		return cli.Usagef("config edit: %v", err)
	}
	if err != nil {
		return err
	}
	if !*yes && !cli.IsTerminal(e.Stdin) {
		return cli.Usagef("config edit: standard input is not a terminal: pass --yes to apply without asking")
	}
	old, err := a.Read(y)
	if errors.Is(err, config.ErrUnsafe) {
		return cli.WithHint(err, "review it, then chown or chmod it; an edit would make its content the owner's")
	}
	if err != nil {
		return err
	}
	dir, err := os.MkdirTemp("", "impsup-edit-")
	if err != nil {
		return err
	}
	keep := false
	defer func() {
		if !keep {
			os.RemoveAll(dir)
		}
	}()
	draft := filepath.Join(dir, filepath.Base(a.Path))
	if err := os.WriteFile(draft, old, 0o600); err != nil {
		return err
	}
	if err := edit(e, draft); err != nil {
		return err
	}
	next, err := os.ReadFile(draft)
	if err != nil {
		return err
	}
	if bytes.Equal(next, old) {
		fmt.Fprintf(e.Stdout, "%s: no change\n", a.Path)
		return nil
	}
	kept := func(err error) error {
		keep = true
		return cli.WithHint(err, "the edited copy is kept at "+draft)
	}
	if err := a.Check(next); err != nil {
		return kept(fmt.Errorf("%w; %s not changed", err, a.Path))
	}
	showDiff(e, a.Path, old, draft)
	if !*yes && !e.Confirm("apply to "+a.Path+"? [y/N] ") {
		return kept(fmt.Errorf("%s not changed", a.Path))
	}
	backup, err := a.Replace(y, old, next)
	if err != nil {
		return kept(err)
	}
	if backup != "" {
		fmt.Fprintf(e.Stdout, "%s: replaced; the previous is %s\n", a.Path, backup)
	} else {
		fmt.Fprintf(e.Stdout, "%s: written\n", a.Path)
	}
	return nil
}

// edit runs $VISUAL or $EDITOR (through the shell, as visudo does, so it
// may carry arguments), else vi, on path, on the command's terminal.
func edit(e *cli.Env, path string) error {
	editor := os.Getenv("VISUAL")
	if editor == "" {
		editor = os.Getenv("EDITOR")
	}
	if editor == "" {
		editor = "vi"
	}
	cmd := exec.Command("/bin/sh", "-c", editor+` "$1"`, "sh", path)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = e.Stdin, e.Stdout, e.Stderr
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("editor %q: %w; nothing was changed", editor, err)
	}
	return nil
}

// showDiff prints diff -u of the file as it is and the edited copy.
func showDiff(e *cli.Env, path string, old []byte, draft string) {
	cmd := exec.Command("diff", "-u", "--label", path, "--label", path+" (edited)", "-", draft)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = bytes.NewReader(old), e.Stdout, e.Stderr
	// diff exits 1 when the files differ, as they do here.
	if err := cmd.Run(); err != nil && cmd.ProcessState == nil {
		e.Warn(fmt.Errorf("no diff shown: %w", err))
	}
}
