package main

import (
	"fmt"
	"io"
	"strings"

	"github.com/impyard/impyard/lib/cli"
	"github.com/impyard/impyard/lib/complete"
	"github.com/impyard/impyard/lib/mailbox"
	"github.com/impyard/impyard/lib/yard"
)

const tellUsage = `usage: impq tell --imp NAME [--as NAME] [--json] TEXT...

Leave a message for an imp in mailbox/<imp>/. It is delivered with the
imp's next run, in its brief, and then marked delivered to that run; a box
of the imp already running gets it at its next poll of GET /v1/mailbox
(see impgw(8)). It is content for the imp to read, not a command. TEXT '-'
reads standard input. Prints the message id.

Examples:
  impq tell --imp yuko "skip the sports section this week"
`

func tell(e *cli.Env, args []string) error {
	fs := e.FlagSet("tell", tellUsage)
	e.TimeoutFlag(fs)
	root := cli.RootFlag(fs)
	imp := fs.String("imp", "", "the imp `NAME` (required)")
	e.Complete(fs, "imp", cli.Names(complete.Imp))
	as := fs.String("as", "", "`NAME` of who writes (default $USER)")
	asJSON := fs.Bool("json", false, `print {"id": MESSAGE, "imp": NAME} as one JSON object`)
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
	if *asJSON {
		return cli.JSONLine(e.Stdout, map[string]string{"id": msgID, "imp": *imp})
	}
	_, err = fmt.Fprintln(e.Stdout, msgID)
	return err
}
