package main

import (
	"fmt"

	"github.com/impyard/impyard/lib/cli"
	"github.com/impyard/impyard/lib/complete"
	"github.com/impyard/impyard/lib/config"
	"github.com/impyard/impyard/lib/gate"
	"github.com/impyard/impyard/lib/queue"
	runs "github.com/impyard/impyard/lib/run"
	"github.com/impyard/impyard/lib/trust"
	"github.com/impyard/impyard/lib/yard"
)

const fileUsage = `usage: impgate file --imp NAME --intent INTENT [--payload-file F|-] [--rationale WHY] [--expires DURATION] [--json]

File a gate from the trusted side and print its id alone on stdout. The
payload must be JSON (wrap plain text with jq -Rs .) and fit the fields
the intent's executor declares in org.toml, as at the gateway; it is
frozen as canonical bytes and its sha256 recorded. An intent with no
executor in org.toml is refused: its gate could never be executed. Without --payload-file
the payload is {}.

--expires gives the gate a deadline of its own, DURATION after filing
("48h", "90m"), in place of its executor's expires: undecided by then, it
becomes expired (see EXPIRY in impgate(1)).

Examples:
  id=$(echo '{"to":["team@ourco.com"],"subject":"digest"}' | impgate file --imp yuko --intent email-send --payload-file -)
  jq -Rs '{text: .}' notes.txt | impgate file --imp yuko --intent message-user --payload-file - --rationale "nightly notes"
`

func file(e *cli.Env, args []string) error {
	fs := e.FlagSet("file", fileUsage)
	e.TimeoutFlag(fs)
	root := cli.RootFlag(fs)
	o := gate.FileOptions{Actor: "impgate"}
	var payloadFile, as string
	fs.StringVar(&o.Imp, "imp", "", "the imp `NAME` the gate belongs to (required)")
	e.Complete(fs, "imp", cli.Names(complete.Imp))
	fs.StringVar(&o.Intent, "intent", "", "the `INTENT`, a policy rule name (required)")
	fs.StringVar(&payloadFile, "payload-file", "", "read the JSON payload from `FILE` ('-' for standard input)")
	fs.StringVar(&o.Rationale, "rationale", "", "`WHY` the action is proposed")
	fs.StringVar(&o.Task, "task", "", "the `TASK` the gate belongs to")
	e.Complete(fs, "task", cli.Names(complete.Task))
	fs.StringVar(&o.Run, "run", "", "the `RUN` that proposed it")
	fs.StringVar(&as, "as", "", "`NAME` of who files it (default $USER)")
	expires := cli.PositiveDuration(fs, "expires", 0, "expire the gate undecided `DURATION` after filing")
	asJSON := gateJSONFlag(fs)
	if err := cli.Parse(fs, args); err != nil {
		return err
	}
	if o.Imp == "" || o.Intent == "" {
		return cli.Usagef("file: --imp and --intent are required")
	}
	if fs.NArg() > 0 {
		return cli.Usagef("file: unexpected argument %q", fs.Arg(0))
	}
	o.Expires = *expires
	o.By = decider(as)
	o.Trust = &gate.Trust{Level: "gate", Why: "filed from the trusted side by " + o.By + " with impgate file; no trust entry is consulted"}
	o.Payload = []byte("{}")
	if payloadFile != "" {
		b, err := e.ReadInput(payloadFile, gate.MaxPayload)
		if err != nil {
			return err
		}
		o.Payload = b
	}
	y, err := yard.Open(*root)
	if err != nil {
		return err
	}
	if o.Task != "" {
		if o.Task, err = queue.Resolve(y, o.Task); err != nil {
			return err
		}
	}
	if o.Run != "" {
		if o.Run, err = runs.Resolve(y, o.Run); err != nil {
			return err
		}
	}
	org, err := config.LoadOrg(y)
	if err != nil {
		return err
	}
	if _, err := org.Executor(o.Intent); err != nil {
		return err
	}
	if err := trust.Admit(org, o.Intent, o.Payload); err != nil {
		if payloadFile != "" && payloadFile != "-" {
			return fmt.Errorf("%s: %w", payloadFile, err)
		}
		return err
	}
	g, err := gate.File(y, o)
	if err != nil {
		if payloadFile != "" && payloadFile != "-" {
			return fmt.Errorf("%s: %w", payloadFile, err)
		}
		return err
	}
	if *asJSON {
		return cli.JSONLine(e.Stdout, g)
	}
	_, err = fmt.Fprintln(e.Stdout, g.ID)
	return err
}
