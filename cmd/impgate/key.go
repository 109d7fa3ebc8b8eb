package main

import (
	"fmt"
	"text/tabwriter"

	"github.com/impyard/impyard/lib/approval"
	"github.com/impyard/impyard/lib/cli"
	"github.com/impyard/impyard/lib/yard"
)

const keyUsage = `usage: impgate key init [--timeout DURATION] [--json]
       impgate key ls [--json]

Commands:
  init  create the owner's key
  ls    list the public keys approvals are verified against

The keys that sign approvals live in IMPYARD_HOME/keys/, never in the
yard: owner.key signs 'impgate approve', gateway.key (made by impgw serve)
signs trust auto-approvals. Each has its public key beside it (NAME.pub);
impexec executes only approvals signed by a key whose .pub is there.

init creates the owner's key now rather than at the first approval; it
never replaces one (exit 1). ls lists the public keys approvals are
verified against, with their fingerprints.

Examples:
  impgate key init
  impgate key ls --json | jq -r .fingerprint
`

func keyCmd(e *cli.Env, args []string) error {
	return e.Group("key", args, keyUsage, map[string]func([]string) error{
		"init": func(a []string) error { return keyInit(e, a) },
		"ls":   func(a []string) error { return keyLs(e, a) },
	})
}

func keyInit(e *cli.Env, args []string) error {
	fs := e.FlagSet("key init", keyUsage)
	e.TimeoutFlag(fs)
	asJSON := fs.Bool("json", false, "print one JSON object")
	if err := cli.ParseNone(fs, args); err != nil {
		return err
	}
	home, err := yard.Home()
	if err != nil {
		return err
	}
	k, err := approval.Create(home, approval.Owner)
	if err != nil {
		return err
	}
	if *asJSON {
		return cli.JSONLine(e.Stdout, map[string]string{"name": approval.Owner, "path": k.Path, "fingerprint": k.Fingerprint()})
	}
	_, err = fmt.Fprintf(e.Stdout, "%s %s\n", k.Path, k.Fingerprint())
	return err
}

func keyLs(e *cli.Env, args []string) error {
	asJSON, err := e.JSONOnly("key ls", keyUsage, args, "print one JSON object per line")
	if err != nil {
		return err
	}
	home, err := yard.Home()
	if err != nil {
		return err
	}
	kr, err := approval.LoadKeyring(home)
	if err != nil {
		return err
	}
	if asJSON {
		for _, k := range kr.Keys {
			if err := cli.JSONLine(e.Stdout, k); err != nil {
				return err
			}
		}
		return nil
	}
	tw := tabwriter.NewWriter(e.Stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "NAME\tKIND\tFINGERPRINT\tPATH")
	for _, k := range kr.Keys {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", k.Name, k.Kind, k.Fingerprint, k.Path)
	}
	return tw.Flush()
}
