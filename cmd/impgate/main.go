// Command impgate is the approval desk: it lists gates, shows the exact
// bytes a gate would send, and records a human's decision.
package main

import (
	"context"
	"io"
	"os"
	"os/signal"
	"syscall"

	"github.com/impyard/impyard/lib/cli"
	"github.com/impyard/impyard/lib/complete"
)

const usage = `usage: impgate COMMAND [flags] [args]

The approval desk of an impyard yard: gates/pending/ and gates/resolved/.

Commands:
  ls       list pending gates (--all: decided ones too)
  show     show a gate: where it goes, why it waits, the exact payload, its
           sha256 and timeline, and the line that approves it
  approve  approve a pending gate
  deny     deny a pending gate
  review   walk the pending gates on a terminal: approve, deny, skip, quit
  log      print a gate's timeline
  file     file a new gate from the trusted side and print its id
  key      create (key init) or list (key ls) the keys that sign approvals
  serve    serve the desk as a web application for a phone, with passkeys
  desk     enroll or revoke the passkeys that sign in to it and approve

Run 'impgate COMMAND --help' or 'impgate help COMMAND' for a command's flags.

Examples:
  impgate ls
  impgate show g-01jf8k2m3nx4k9q2
  impgate approve --sha 3f2a9c01 g-01jf8k2m3nx4k9q2
  impgate ls --json | jq -r 'select(.intent=="message-user") | .id'
`

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	os.Exit(run(ctx, os.Args[1:], os.Stdin, os.Stdout, os.Stderr))
}

func run(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	e := &cli.Env{Name: "impgate", Names: complete.Names, Stdin: stdin, Stdout: stdout, Stderr: stderr}
	return e.Dispatch(args, usage, map[string]func([]string) error{
		"ls":      func(a []string) error { return ls(e, a) },
		"show":    func(a []string) error { return show(e, a) },
		"approve": func(a []string) error { return approve(e, a) },
		"deny":    func(a []string) error { return deny(e, a) },
		"log":     func(a []string) error { return logCmd(e, a) },
		"file":    func(a []string) error { return file(e, a) },
		"review":  func(a []string) error { return review(e, a) },
		"key":     func(a []string) error { return keyCmd(e, a) },
		"serve":   func(a []string) error { return serve(ctx, e, a) },
		"desk":    func(a []string) error { return deskCmd(e, a) },
	})
}
