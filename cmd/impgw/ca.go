package main

import (
	"errors"
	"fmt"
	"time"

	"github.com/impyard/impyard/lib/ca"
	"github.com/impyard/impyard/lib/cli"
	"github.com/impyard/impyard/lib/yard"
)

const caUsage = `usage: impgw ca init [--json]
       impgw ca show [--json]

Commands:
  init  create the CA
  show  print where ca.crt is and its fingerprint

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
	return e.Group("ca", args, caUsage, map[string]func([]string) error{
		"init": func(a []string) error { return caInit(e, a) },
		"show": func(a []string) error { return caShow(e, a) },
	})
}

func caInit(e *cli.Env, args []string) error {
	asJSON, err := e.JSONOnly("ca init", caUsage, args, "print one JSON object")
	if err != nil {
		return err
	}
	home, err := yard.Home()
	if err != nil {
		return err
	}
	c, err := ca.Init(home)
	if errors.Is(err, ca.ErrExists) {
		return cli.WithHint(err, "the CA in "+ca.Dir(home)+" stays in use; 'impgw ca show' prints it")
	}
	if err != nil {
		return err
	}
	if asJSON {
		return cli.JSONLine(e.Stdout, caJSON(home, c))
	}
	fmt.Fprintf(e.Stdout, "created %s\n%s\nsha256 %s\n", ca.KeyPath(home), ca.CertPath(home), c.Fingerprint())
	return nil
}

func caShow(e *cli.Env, args []string) error {
	asJSON, err := e.JSONOnly("ca show", caUsage, args, "print one JSON object")
	if err != nil {
		return err
	}
	home, err := yard.Home()
	if err != nil {
		return err
	}
	c, err := ca.Load(home)
	if err != nil {
		return cli.WithHint(err, "'impgw ca init' creates the CA")
	}
	if asJSON {
		return cli.JSONLine(e.Stdout, caJSON(home, c))
	}
	fmt.Fprintf(e.Stdout, "cert     %s\nsha256   %s\nsubject  %s\nexpires  %s\n",
		ca.CertPath(home), c.Fingerprint(), c.Cert.Subject, c.Cert.NotAfter.UTC().Format(time.RFC3339))
	return nil
}

// caJSON is the CA as ca init --json and ca show --json print it.
func caJSON(home string, c *ca.CA) map[string]any {
	return map[string]any{
		"cert":      ca.CertPath(home),
		"key":       ca.KeyPath(home),
		"sha256":    c.Fingerprint(),
		"subject":   c.Cert.Subject.String(),
		"not_after": c.Cert.NotAfter.UTC().Format(time.RFC3339),
	}
}
