package main

import (
	"encoding/hex"
	"fmt"
	"strings"

	"github.com/impyard/impyard/lib/approval"
	"github.com/impyard/impyard/lib/cli"
	"github.com/impyard/impyard/lib/earn"
	"github.com/impyard/impyard/lib/gate"
	"github.com/impyard/impyard/lib/state"
	"github.com/impyard/impyard/lib/yard"
)

const approveUsage = `usage: impgate approve [--sha PREFIX] [--as NAME] [--note TEXT] GATE

Approve a pending gate. The executor then performs exactly the frozen
payload. With --sha, the approval is refused unless the payload's sha256
starts with PREFIX (at least 8 hex digits): a script approves only what it
reviewed. The decider (--as, default $USER) is recorded.

The approval is signed with the owner's key, IMPYARD_HOME/keys/owner.key
(created on first use, with a notice), over the gate id, the payload
sha256, the decider and the time; impexec executes only what verifies.

Approving a gate that is already approved or denied fails (exit 1), except
an approved gate with no signature (approved before approvals were
signed): approving it again signs it, recorded in its timeline.

Examples:
  impgate approve g-01jf8k2m3nx4k9q2
  sha=$(impgate show --json g-01jf8k2m3nx4k9q2 | jq -r .sha256)
  impgate approve --sha "${sha:0:12}" --as ci-bot g-01jf8k2m3nx4k9q2
`

const denyUsage = `usage: impgate deny [--reason TEXT] [--as NAME] GATE

Deny a pending gate. Nothing is executed; the imp sees the denial and the
reason in its journal and next briefing.

A deny resets the count of approvals toward an earned trust entry for
the gate's imp and intent ([[earn]] in org.toml). If an earned entry
(earned = true in imps/<imp>/imp.toml) would have approved the denied
payload, every earned entry for that imp and intent is removed, the
previous file kept as imp.toml.N, and the removal is printed and
recorded (trust-earned-removed) in the journal and the audit log.

Examples:
  impgate deny --reason "wrong recipients" g-01jf8k2m3nx4k9q2
`

func approve(e *cli.Env, args []string) error {
	fs := e.FlagSet("approve", approveUsage)
	root := cli.RootFlag(fs)
	sha := fs.String("sha", "", "refuse unless the payload sha256 starts with `PREFIX`")
	as := fs.String("as", "", "the decider's `NAME` (default $USER)")
	note := fs.String("note", "", "a note kept with the approval")
	if err := cli.Parse(fs, args); err != nil {
		return err
	}
	if *sha != "" {
		if _, err := hex.DecodeString(padEven(*sha)); err != nil || len(*sha) < 8 {
			return cli.Usagef("approve: --sha wants at least 8 hex digits of the payload sha256")
		}
	}
	return decide(e, fs.Args(), *root, gate.Change{To: state.Approved, By: decider(*as), Actor: "impgate", Why: *note, SHA: *sha})
}

func deny(e *cli.Env, args []string) error {
	fs := e.FlagSet("deny", denyUsage)
	root := cli.RootFlag(fs)
	reason := fs.String("reason", "", "why the gate is denied")
	as := fs.String("as", "", "the decider's `NAME` (default $USER)")
	if err := cli.Parse(fs, args); err != nil {
		return err
	}
	return decide(e, fs.Args(), *root, gate.Change{To: state.Denied, By: decider(*as), Actor: "impgate", Why: *reason})
}

// decide moves one gate as c says. An approval is signed with the
// owner's key, made on first use, once the yard is known to be one.
func decide(e *cli.Env, args []string, root string, c gate.Change) error {
	if len(args) != 1 {
		return cli.Usagef("want exactly one gate id")
	}
	if strings.ContainsAny(c.By, "\x00\r\n") || len(c.By) > 64 {
		return cli.Usagef("--as: a name of at most 64 characters on one line")
	}
	y, err := yard.Open(root)
	if err != nil {
		return err
	}
	if c.To == state.Approved {
		home, err := yard.Home()
		if err != nil {
			return err
		}
		if c.Signer, err = approval.Ensure(home, approval.Owner, e.Stderr, "impgate"); err != nil {
			return err
		}
	}
	g, err := gate.Move(y, args[0], c)
	if err != nil {
		return err
	}
	again := ""
	if h := g.History[len(g.History)-1]; h.From == state.Approved && h.To == state.Approved {
		again = " (signed now; its first approval had no signature)"
	}
	if _, err := fmt.Fprintf(e.Stdout, "%s %s by %s%s\n", g.ID, g.State, c.By, again); err != nil {
		return err
	}
	if c.To != state.Denied {
		return nil
	}
	// The deny stands whatever follows; an earned entry it disagrees with
	// goes, or the owner is told it could not.
	removed, err := earn.Denied(y, g)
	if err != nil {
		return fmt.Errorf("%s denied, but the earned trust entries it disagrees with were not removed: %w", g.ID, err)
	}
	if removed != "" {
		_, err = fmt.Fprintln(e.Stdout, removed)
	}
	return err
}

func decider(as string) string {
	if as != "" {
		return as
	}
	return cli.User()
}

func padEven(s string) string {
	if len(s)%2 == 1 {
		return s + "0"
	}
	return s
}
