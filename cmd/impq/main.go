// Command impq is the task queue from the shell.
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

const usage = `usage: impq COMMAND [flags] [args]

The task queue of an impyard yard: queue/<imp>/<task-id>.json.

Commands:
  add     file a task and print its id
  ls      list tasks
  show    show one task
  cancel  cancel a waiting, running or needs-review task
  retry   move a failed task back to waiting as a new attempt
  watch   print every transition as it happens, one JSON line each
  spend   show each imp's spend today against its budget
  tell    leave a message for an imp's next run
  memory  show an imp's core memory, each entry with its provenance

Run 'impq COMMAND --help' or 'impq help COMMAND' for a command's flags.

Examples:
  id=$(impq add --imp yuko "draft the weekly digest")
  impq ls --state waiting --json | jq -r .id
  impq watch --imp yuko | jq -c 'select(.to=="failed")'
`

func main() {
	os.Exit(run(context.Background(), os.Args[1:], os.Stdin, os.Stdout, os.Stderr))
}

// run runs one command. Only watch, which runs until interrupted, catches
// SIGINT and SIGTERM to end cleanly: catching them costs every process a
// thread of its own, and a short command a signal stops mid-write leaves
// what a crash leaves, which the store recovers.
func run(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	e := &cli.Env{Name: "impq", Names: complete.Names, Stdin: stdin, Stdout: stdout, Stderr: stderr}
	return e.Dispatch(args, usage, map[string]func([]string) error{
		"add":    func(a []string) error { return add(e, a) },
		"ls":     func(a []string) error { return ls(e, a) },
		"show":   func(a []string) error { return show(e, a) },
		"cancel": func(a []string) error { return cancel(e, a) },
		"retry":  func(a []string) error { return retry(e, a) },
		"watch": func(a []string) error {
			ctx, stop := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
			defer stop()
			return watchCmd(ctx, e, a)
		},
		"spend":  func(a []string) error { return spend(e, a) },
		"tell":   func(a []string) error { return tell(e, a) },
		"memory": func(a []string) error { return memoryCmd(e, a) },
	})
}
