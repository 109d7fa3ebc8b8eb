package main

import (
	"fmt"
	"text/tabwriter"

	"github.com/impyard/impyard/lib/approval"
	"github.com/impyard/impyard/lib/cli"
	"github.com/impyard/impyard/lib/yard"
)

const keyUsage = `usage: impgate key init
       impgate key ls [--json]

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
	if len(args) == 0 {
		return cli.Usagef("key: want init or ls")
	}
	home, err := yard.Home()
	if err != nil {
		return err
	}
	switch args[0] {
	case "init":
		fs := e.FlagSet("key init", keyUsage)
		e.TimeoutFlag(fs)
		if err := cli.Parse(fs, args[1:]); err != nil {
			return err
		}
		if fs.NArg() > 0 {
			return cli.Usagef("key init: unexpected argument %q", fs.Arg(0))
		}
		k, err := approval.Create(home, approval.Owner)
		if err != nil {
			return err
		}
		_, err = fmt.Fprintf(e.Stdout, "%s %s\n", k.Path, k.Fingerprint())
		return err
	case "ls":
		fs := e.FlagSet("key ls", keyUsage)
		asJSON := fs.Bool("json", false, "print one JSON object per line")
		if err := cli.Parse(fs, args[1:]); err != nil {
			return err
		}
		if fs.NArg() > 0 {
			return cli.Usagef("key ls: unexpected argument %q", fs.Arg(0))
		}
		kr, err := approval.LoadKeyring(home)
		if err != nil {
			return err
		}
		if *asJSON {
			for _, k := range kr.Keys {
				if err := cli.JSONLine(e.Stdout, k); err != nil {
					return err
				}
			}
			return nil
		}
		tw := tabwriter.NewWriter(e.Stdout, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "NAME\tFINGERPRINT\tPATH")
		for _, k := range kr.Keys {
			fmt.Fprintf(tw, "%s\t%s\t%s\n", k.Name, k.Fingerprint, k.Path)
		}
		return tw.Flush()
	case "-h", "-help", "--help":
		fmt.Fprint(e.Stdout, keyUsage)
		return nil
	}
	return fmt.Errorf("key: %w", cli.UnknownCommand(args[0], []string{"init", "ls"}))
}
