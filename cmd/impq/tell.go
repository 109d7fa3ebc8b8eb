package main

import (
	"fmt"
	"io"
	"strings"

	"github.com/impyard/impyard/lib/cli"
	"github.com/impyard/impyard/lib/mailbox"
	"github.com/impyard/impyard/lib/yard"
)

const tellUsage = `usage: impq tell --imp NAME [--as NAME] TEXT...

Leave a message for an imp in mailbox/<imp>/. It is delivered with the
imp's next run, in its brief, and then marked delivered to that run. It is
content for the imp to read, not a command. TEXT '-' reads standard input.
Prints the message id.

Examples:
  impq tell --imp yuko "skip the sports section this week"
`

func tell(e *cli.Env, args []string) error {
	fs := e.FlagSet("tell", tellUsage)
	e.TimeoutFlag(fs)
	root := cli.RootFlag(fs)
	imp := fs.String("imp", "", "the imp `NAME` (required)")
	as := fs.String("as", "", "who writes (default $USER)")
	if err := cli.Parse(fs, args); err != nil {
		return err
	}
	if *imp == "" || fs.NArg() == 0 {
		return cli.Usagef("tell: want --imp NAME and the message")
	}
	text := strings.Join(fs.Args(), " ")
	if text == "-" {
		b, err := io.ReadAll(io.LimitReader(e.Stdin, mailbox.MaxText+1))
		if err != nil {
			return err
		}
		text = string(b)
	}
	y, err := yard.Open(*root)
	if err != nil {
		return err
	}
	msgID, err := mailbox.Send(y, *imp, by(*as), text)
	if err != nil {
		return err
	}
	_, err = fmt.Fprintln(e.Stdout, msgID)
	return err
}
