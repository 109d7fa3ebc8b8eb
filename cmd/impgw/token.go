package main

import (
	"fmt"

	"github.com/impyard/impyard/lib/cli"
	"github.com/impyard/impyard/lib/complete"
	"github.com/impyard/impyard/lib/token"
	"github.com/impyard/impyard/lib/yard"
)

const tokenUsage = `usage: impgw token issue --imp NAME [--task ID] [--run ID] [--timeout DURATION] [--json]
       impgw token revoke [--timeout DURATION] TOKEN

Commands:
  issue   record a fresh token for an imp and print it
  revoke  forget a token

Tokens say who is asking. issue records a fresh random token for an imp
(and the run and task it works on) in IMPYARD_HOME/tokens/ and prints it;
revoke forgets one. A box gets its run's token from the supervisor; an
owner who runs an agent outside a box issues one by hand.

The executors' subject, org, is never issued: 'issue --imp org' is
refused (exit 1). impexec reads the one org credential from
IMPYARD_HOME/tokens/org.token itself, and no other token speaks for org.

Control API requests carry the token as "Authorization: Bearer TOKEN";
proxied requests carry it as proxy credentials (http://NAME:TOKEN@gateway).

Examples:
  tok=$(impgw token issue --imp yuko)
  curl -H "Authorization: Bearer $tok" http://127.0.0.1:7300/v1/gates
  HTTPS_PROXY=http://yuko:$tok@127.0.0.1:7300 curl --cacert ~/.impyard/ca/ca.crt https://example.com/
  impgw token revoke "$tok"
`

func tokenCmd(e *cli.Env, args []string) error {
	return e.Group("token", args, tokenUsage, map[string]func([]string) error{
		"issue":  func(a []string) error { return tokenIssue(e, a) },
		"revoke": func(a []string) error { return tokenRevoke(e, a) },
	})
}

func tokenIssue(e *cli.Env, args []string) error {
	fs := e.FlagSet("token issue", tokenUsage)
	e.TimeoutFlag(fs)
	imp := fs.String("imp", "", "the imp `NAME` the token speaks for (required)")
	task := fs.String("task", "", "the `TASK` it works on")
	e.Complete(fs, "imp", cli.Names(complete.Imp))
	e.Complete(fs, "task", cli.Names(complete.Task))
	run := fs.String("run", "", "the `RUN` it belongs to")
	asJSON := fs.Bool("json", false, "print one JSON object")
	if err := cli.Parse(fs, args); err != nil {
		return err
	}
	if *imp == "" || fs.NArg() > 0 {
		return cli.Usagef("token issue: want --imp NAME and no arguments")
	}
	home, err := yard.Home()
	if err != nil {
		return err
	}
	tok, err := token.Issue(home, *imp, *run, *task)
	if err != nil {
		return err
	}
	if *asJSON {
		return cli.JSONLine(e.Stdout, map[string]string{"token": tok, "imp": *imp, "run": *run, "task": *task})
	}
	_, err = fmt.Fprintln(e.Stdout, tok)
	return err
}

func tokenRevoke(e *cli.Env, args []string) error {
	fs := e.FlagSet("token revoke", tokenUsage)
	e.TimeoutFlag(fs)
	if err := cli.Parse(fs, args); err != nil {
		return err
	}
	if fs.NArg() != 1 {
		return cli.Usagef("token revoke: want exactly one token")
	}
	home, err := yard.Home()
	if err != nil {
		return err
	}
	return token.Revoke(home, fs.Arg(0))
}
