package main

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/impyard/impyard/lib/ca"
	"github.com/impyard/impyard/lib/cli"
	"github.com/impyard/impyard/lib/yard"
)

const caUsage = `usage: impgw ca init
       impgw ca show [--json]

init creates the gateway's certificate authority in IMPYARD_HOME/ca
(default ~/.impyard/ca): ca.key (ECDSA P-256, mode 0600) and ca.crt (valid
for ten years, may sign leaves only). It never replaces an existing CA.
Only ca.crt is ever given to a box; the key never leaves IMPYARD_HOME.

show prints where ca.crt is and its SHA-256 fingerprint.

Examples:
  impgw ca init
  impgw ca show
  openssl x509 -noout -fingerprint -sha256 -in "$(impgw ca show --json | jq -r .cert)"
`

func caCmd(e *cli.Env, args []string) error {
	fs := e.FlagSet("ca", caUsage)
	asJSON := fs.Bool("json", false, "show: print one JSON object")
	if len(args) == 0 || strings.HasPrefix(args[0], "-") {
		if err := cli.Parse(fs, args); err != nil {
			return err
		}
		return cli.Usagef("ca: want init or show")
	}
	sub := args[0]
	if err := cli.Parse(fs, args[1:]); err != nil {
		return err
	}
	if fs.NArg() != 0 {
		return cli.Usagef("ca %s: unexpected argument %q", sub, fs.Arg(0))
	}
	home, err := yard.Home()
	if err != nil {
		return err
	}
	switch sub {
	case "init":
		if *asJSON {
			return cli.Usagef("ca init: --json is for ca show")
		}
		c, err := ca.Init(home)
		if errors.Is(err, ca.ErrExists) {
			return cli.WithHint(err, "the CA in "+ca.Dir(home)+" stays in use; 'impgw ca show' prints it")
		}
		if err != nil {
			return err
		}
		fmt.Fprintf(e.Stdout, "created %s\n%s\nsha256 %s\n", ca.KeyPath(home), ca.CertPath(home), c.Fingerprint())
		return nil
	case "show":
		c, err := ca.Load(home)
		if err != nil {
			return cli.WithHint(err, "'impgw ca init' creates the CA")
		}
		if *asJSON {
			return cli.JSONLine(e.Stdout, map[string]any{
				"cert":      ca.CertPath(home),
				"sha256":    c.Fingerprint(),
				"subject":   c.Cert.Subject.String(),
				"not_after": c.Cert.NotAfter.UTC().Format(time.RFC3339),
			})
		}
		fmt.Fprintf(e.Stdout, "cert     %s\nsha256   %s\nsubject  %s\nexpires  %s\n",
			ca.CertPath(home), c.Fingerprint(), c.Cert.Subject, c.Cert.NotAfter.UTC().Format(time.RFC3339))
		return nil
	}
	return fmt.Errorf("ca: %w", cli.UnknownCommand(sub, []string{"init", "show"}))
}
