// Command impgw is the egress gateway: the only way out of a box. It is an
// HTTP/1.1 forward proxy that terminates TLS with a host-minted CA, judges
// every request against policies/gateway.json, forwards what is allowed
// and records one decision per request in runs/decisions.jsonl.
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

const usage = `usage: impgw COMMAND [flags] [args]

The egress gateway of an impyard yard: a forward proxy that terminates TLS,
judges every request against policies/gateway.json and appends one decision
record per request to runs/decisions.jsonl.

Commands:
  serve    run the gateway
  ca       create (ca init) or show (ca show) the CA in IMPYARD_HOME/ca
  judge    dry-run one request against a policy; exit 0 allow, 1 deny
  replay   re-judge recorded decisions under a candidate policy
  log      list the recorded decisions, filtered; -f to follow
  token    issue or revoke the tokens that say who is asking

Run 'impgw COMMAND --help' or 'impgw help COMMAND' for a command's flags.

Examples:
  impgw ca init
  impgw serve --listen 127.0.0.1:7300
  impgw judge --explain POST https://api.resend.com/emails -H 'content-type: application/json'
  impgw replay --policy candidate.json
  impgw log --since 1h --verdict deny
`

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	os.Exit(run(ctx, os.Args[1:], os.Stdin, os.Stdout, os.Stderr))
}

func run(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	e := &cli.Env{Name: "impgw", Names: complete.Names, Stdin: stdin, Stdout: stdout, Stderr: stderr}
	code := cli.OK
	cmds := map[string]func([]string) error{
		"serve":  func(a []string) error { return serve(ctx, e, a) },
		"ca":     func(a []string) error { return caCmd(e, a) },
		"replay": func(a []string) error { return replay(e, a) },
		"log":    func(a []string) error { return logCmd(ctx, e, a) },
		"token":  func(a []string) error { return tokenCmd(e, a) },
		"judge": func(a []string) error {
			// judge's exit status is its verdict, when it reached one.
			c, err := judgeCmd(e, a)
			if err == nil {
				code = c
			}
			return err
		},
	}
	if rc := e.Dispatch(args, usage, cmds); rc != cli.OK {
		return rc
	}
	return code
}
