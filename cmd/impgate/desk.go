package main

import (
	"fmt"
	"time"

	"github.com/impyard/impyard/lib/approval"
	"github.com/impyard/impyard/lib/cli"
	"github.com/impyard/impyard/lib/config"
	"github.com/impyard/impyard/lib/deskd"
	"github.com/impyard/impyard/lib/yard"
)

const deskUsage = `usage: impgate desk enroll --name NAME [--json]
       impgate desk revoke NAME

Commands:
  enroll  print a one-time URL that registers a passkey called NAME
  revoke  remove passkey NAME: its approvals stop verifying, its
          sessions end

enroll prints the desk's URL (org.toml [desk] url, else its origin)
followed by /enroll/TOKEN. Opened within 10 minutes, once, it registers
a passkey (user verification required) whose public key is written to
IMPYARD_HOME/keys/NAME.passkey, beside the Ed25519 keys: impexec trusts
it, 'impgate key ls' lists it. A NAME a key or passkey already has is
refused (exit 1).

revoke removes keys/NAME.passkey. Gates it approved and impexec has not
yet executed no longer verify and wait; its desk sessions end at their
next request. Revoking a NAME that is not enrolled fails (exit 1).

Examples:
  impgate desk enroll --name phone
  impgate desk revoke phone
`

func deskCmd(e *cli.Env, args []string) error {
	return e.Group("desk", args, deskUsage, map[string]func([]string) error{
		"enroll": func(a []string) error { return deskEnroll(e, a) },
		"revoke": func(a []string) error { return deskRevoke(e, a) },
	})
}

func deskEnroll(e *cli.Env, args []string) error {
	fs := e.FlagSet("desk enroll", deskUsage)
	root := cli.RootFlag(fs)
	name := fs.String("name", "", "the passkey's `NAME`")
	asJSON := fs.Bool("json", false, "print one JSON object")
	if err := cli.ParseNone(fs, args); err != nil {
		return err
	}
	if *name == "" {
		return cli.Usagef("desk enroll: --name is required")
	}
	if err := approval.CheckName(*name); err != nil {
		return cli.Usagef("desk enroll: --name: %v", err)
	}
	y, err := yard.Open(*root)
	if err != nil {
		return err
	}
	org, err := config.LoadOrg(y)
	if err != nil {
		return err
	}
	home, err := yard.Home()
	if err != nil {
		return err
	}
	token, expires, err := deskd.Enroll(home, *name, time.Now())
	if err != nil {
		return err
	}
	base := org.Desk.URL
	if base == "" {
		base = org.Desk.DeskOrigin()
	}
	url := deskd.EnrollURL(base, token)
	if *asJSON {
		return cli.JSONLine(e.Stdout, map[string]string{"name": *name, "url": url, "expires": expires.Format(time.RFC3339)})
	}
	_, err = fmt.Fprintf(e.Stdout, "%s\n(passkey %s; open it once before %s)\n", url, *name, expires.Local().Format(time.RFC3339))
	return err
}

func deskRevoke(e *cli.Env, args []string) error {
	fs := e.FlagSet("desk revoke", deskUsage)
	if err := cli.Parse(fs, args); err != nil {
		return err
	}
	if fs.NArg() != 1 {
		return cli.Usagef("desk revoke: want exactly one passkey name")
	}
	home, err := yard.Home()
	if err != nil {
		return err
	}
	if err := approval.RemovePasskey(home, fs.Arg(0)); err != nil {
		return err
	}
	_, err = fmt.Fprintf(e.Stdout, "passkey %s revoked\n", fs.Arg(0))
	return err
}
