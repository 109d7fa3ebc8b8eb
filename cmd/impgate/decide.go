package main

import (
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"strings"
	"time"

	"github.com/impyard/impyard/lib/approval"
	"github.com/impyard/impyard/lib/cli"
	"github.com/impyard/impyard/lib/complete"
	"github.com/impyard/impyard/lib/config"
	"github.com/impyard/impyard/lib/crash"
	"github.com/impyard/impyard/lib/desk"
	"github.com/impyard/impyard/lib/earn"
	"github.com/impyard/impyard/lib/gate"
	"github.com/impyard/impyard/lib/signers"
	"github.com/impyard/impyard/lib/state"
	"github.com/impyard/impyard/lib/status"
	"github.com/impyard/impyard/lib/transition"
	"github.com/impyard/impyard/lib/yard"
)

const approveUsage = `usage: impgate approve [--sha PREFIX] [--as NAME] [--note NOTE] [--old] [--timeout DURATION] [--json] GATE

Approve a pending gate. The executor then performs exactly the frozen
payload. With --sha, the approval is refused unless the payload's sha256
starts with PREFIX (at least 8 hex digits): a script approves only what it
reviewed. The decider (--as, default $USER) is recorded.

The approval is signed with the owner's key, IMPYARD_HOME/keys/owner.key,
as impyard.approval/2: over the gate id, imp, intent, task, run, filing,
payload sha256, trust verdict, decider and time (impyard(7)); impexec
executes only what verifies. A key the yard's executors do not trust
(signers/trusted.json: IMPYARD_HOME names another home) is refused,
exit 1, naming the keys they do. The key is created on first use, with
a notice, only in a yard without that record, or whose record names no
owner key and only keys this home holds.

An approval no executor will run now (org.toml does not load or names
no executor for the intent, a pause holds the imp, impexec run is not
running) is made, with a note on stderr saying why.

An approval made whose audit record cannot be written yet exits 0 with a
warning ("approved, but its record is not written yet"), as impq add does.

Approving a gate already approved, or executing or executed since,
changes nothing and exits 0 with a note, once the approval made is
verified (its signature, the payload's sha256, and --sha when given);
otherwise, and for a gate denied or failed, it fails (exit 1) saying why. An approved
gate with no signature (approved before approvals were signed), an
impyard.approval/1 one, or one signed by a key not in IMPYARD_HOME/keys/
is signed by approving it again, recorded in its timeline.

A gate past its deadline (expires; see EXPIRY in impgate(1)) is refused,
exit 1, whether impexec has marked it expired yet or not: nothing is
approved or executed. A gate older than its executor's confirm_after
asks again on a terminal; from a script it needs --old, and without it
is refused (exit 1).

GATE is a gate id or a unique prefix of one (at least 4 characters after
"g-"). --timeout bounds the wait for the gates' lock (exit 111).

Examples:
  impgate approve g-01jf8k2m3nx4k9q2
  sha=$(impgate show --json g-01jf8k2m3nx4k9q2 | jq -r .sha256)
  impgate approve --sha "${sha:0:12}" --as ci-bot g-01jf8k2m3nx4k9q2
`

const denyUsage = `usage: impgate deny [--reason WHY] [--as NAME] [--timeout DURATION] [--json] GATE

Deny a pending gate. Nothing is executed; the imp sees the denial and the
reason in its journal and next briefing. Denying a gate already denied
changes nothing and exits 0 with a note (the first reason stays); an
approved or executed one is refused (exit 1). GATE may be a unique prefix
of the id.

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
	e.Complete(fs, "", cli.Names(complete.Kind(complete.Gate, state.Filed)))
	e.TimeoutFlag(fs)
	root := cli.RootFlag(fs)
	sha := fs.String("sha", "", "refuse unless the payload sha256 starts with `PREFIX`")
	as := fs.String("as", "", "the decider's `NAME` (default $USER)")
	note := fs.String("note", "", "a `NOTE` kept with the approval")
	old := fs.Bool("old", false, "approve a gate older than its executor's confirm_after without asking")
	asJSON := gateJSONFlag(fs)
	if err := cli.Parse(fs, args); err != nil {
		return err
	}
	if *sha != "" {
		if _, err := hex.DecodeString(padEven(*sha)); err != nil || len(*sha) < 8 {
			return cli.Usagef("approve: --sha wants at least 8 hex digits of the payload sha256")
		}
	}
	return decide(e, fs.Args(), *root, *asJSON, *old, gate.Change{To: state.Approved, By: decider(*as), Actor: "impgate", Why: *note, SHA: *sha})
}

func deny(e *cli.Env, args []string) error {
	fs := e.FlagSet("deny", denyUsage)
	e.Complete(fs, "", cli.Names(complete.Kind(complete.Gate, state.Filed)))
	e.TimeoutFlag(fs)
	root := cli.RootFlag(fs)
	reason := fs.String("reason", "", "`WHY` the gate is denied")
	as := fs.String("as", "", "the decider's `NAME` (default $USER)")
	asJSON := gateJSONFlag(fs)
	if err := cli.Parse(fs, args); err != nil {
		return err
	}
	return decide(e, fs.Args(), *root, *asJSON, false, gate.Change{To: state.Denied, By: decider(*as), Actor: "impgate", Why: *reason})
}

// decide moves one gate as c says. An approval is signed with the
// owner's key, made on first use, once the yard is known to be one; of a
// gate older than its executor's confirm_after, it is asked for again
// unless old says it was (askOld).
func decide(e *cli.Env, args []string, root string, asJSON, old bool, c gate.Change) error {
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
	gateID, err := gate.Resolve(y, args[0])
	if err != nil {
		return err
	}
	var keys func() (*approval.Keyring, error)
	if c.To == state.Approved {
		// org.toml as it stands sets the deadlines; unreadable, only a
		// deadline set at filing holds, as for impexec.
		org, _ := config.LoadOrg(y)
		c.Deadline = func(g *gate.Gate) time.Time { return g.Deadline(org) }
		if err := askOld(e, y, gateID, org, old); err != nil {
			return err
		}
		home, err := yard.Home()
		if err != nil {
			return err
		}
		if c.Signer, err = signers.Signer(y, home, e.Stderr, "impgate"); err != nil {
			return err
		}
		keys = func() (*approval.Keyring, error) { return approval.LoadKeyring(home) }
	}
	// An earned entry the deny disagrees with goes first, so that no
	// crash leaves a committed deny with that entry still in force; the
	// deny stands whatever the removal's fate.
	var removed string
	var rerr error
	if c.To == state.Denied {
		removed, rerr = denying(y, gateID, c.By)
		crash.Point("after-earned-removal")
	}
	// Whether an approval of the current schema is there to be replaced,
	// for the words only.
	signed := false
	if prev, err := gate.Get(y, gateID); err == nil {
		signed = prev.Approval.Current()
	}
	g, repeated, err := gate.Decide(y, gateID, c, keys)
	if errors.Is(err, transition.ErrUnrecorded) {
		// The decision is made: failing now would have a retrying caller
		// take it for a refusal. The next change to the gates writes the
		// record.
		e.Warn(unrecorded(y, g, err))
		err = nil
	}
	if err != nil {
		if removed != "" {
			fmt.Fprintf(e.Stderr, "%s: note: %s\n", e.Name, removed)
		}
		if rerr != nil {
			rerr = fmt.Errorf("the earned trust entries a deny of %s disagrees with were not removed: %w", gateID, rerr)
		}
		return errors.Join(err, rerr)
	}
	if rerr != nil {
		rerr = fmt.Errorf("%s denied, but the earned trust entries it disagrees with were not removed: %w", g.ID, rerr)
	}
	if repeated {
		// The decision repeated, and, for a gate that went on from it,
		// how far it went.
		h, since := g.Decision(c.To), ""
		if g.State != c.To {
			since = ", and " + g.State + " since"
		}
		fmt.Fprintf(e.Stderr, "%s: note: %s already %s by %s at %s%s; nothing to do\n", e.Name, g.ID, c.To, cli.Printable(h.By), h.At.UTC().Format(time.RFC3339), since)
		if !asJSON {
			return nil
		}
	}
	if c.To == state.Denied {
		if p, err := earn.Broke(y, g); err != nil {
			fmt.Fprintf(e.Stderr, "%s: note: %s denied; whether a trust-promote gate waits on the approvals it broke is unknown: %v\n", e.Name, g.ID, err)
		} else if p != nil {
			fmt.Fprintf(e.Stderr, "%s: note: trust-promote gate %s rests on approvals of %s %s that this deny broke: approved, it fails and appends nothing; deny it\n", e.Name, p.ID, cli.Printable(g.Imp), cli.Printable(g.Intent))
		}
	}
	if asJSON {
		// Standard output stays one JSON object; the removal is said
		// beside it.
		if removed != "" {
			fmt.Fprintf(e.Stderr, "%s: note: %s\n", e.Name, removed)
		}
		return errors.Join(cli.JSONLine(e.Stdout, g), rerr)
	}
	again := ""
	if h := g.History[len(g.History)-1]; h.From == state.Approved && h.To == state.Approved {
		again = " (signed now; its first approval had no signature of " + approval.Schema + ")"
		if signed {
			again = " (signed now with a trusted key; its first approval was not)"
		}
	}
	if _, err := fmt.Fprintf(e.Stdout, "%s %s by %s%s\n", g.ID, g.State, c.By, again); err != nil {
		return err
	}
	if g.State == state.Approved {
		if why := status.Waiting(y, g); why != "" {
			fmt.Fprintf(e.Stderr, "%s: note: no executor will run %s now: %s\n", e.Name, g.ID, cli.Printable(why))
		}
	}
	if removed != "" {
		if _, err := fmt.Fprintln(e.Stdout, removed); err != nil {
			return err
		}
	}
	return rerr
}

// ErrOld is an approval of a gate older than its executor's
// confirm_after that was not confirmed.
var ErrOld = errors.New("older than its executor's confirm_after")

// askOld asks again before approving a gate older than its executor's
// confirm_after: on a terminal, a question; from a script, --old, or the
// approval is refused naming it. A gate approved or decided otherwise is
// left to Decide, which says what it is.
func askOld(e *cli.Env, y *yard.Yard, gateID string, org *config.Org, old bool) error {
	g, err := gate.Get(y, gateID)
	if err != nil || old || g.State != state.Filed {
		return nil
	}
	t := desk.Timing(g, org, state.Now())
	if !t.Old {
		return nil
	}
	after := org.Executors[g.Intent].ConfirmAfter.Duration
	what := fmt.Errorf("gate %s was filed %s ago, at %s: %w (%s)", g.ID, t.AgeText(), g.Created.UTC().Format(time.RFC3339), ErrOld, after)
	if !cli.IsTerminal(e.Stdin) {
		return cli.WithHint(fmt.Errorf("%w; not approved without --old", what), "check it is still wanted ('impgate show "+g.ID+"'), then 'impgate approve --old "+g.ID+"'")
	}
	if !e.Confirm(fmt.Sprintf("%s: %s; approve it still? [y/N] ", e.Name, what)) {
		return fmt.Errorf("%w; not approved", what)
	}
	return nil
}

// unrecorded says what err, a decision written whose journal and audit
// records could not follow, made of g, in words that fit it ("approved",
// "denied"), and why its record is not written.
func unrecorded(y *yard.Yard, g *gate.Gate, err error) error {
	cause := err
	var both interface{ Unwrap() []error }
	if errors.As(err, &both) {
		for _, e := range both.Unwrap() {
			if !errors.Is(e, transition.ErrUnrecorded) {
				cause = e
			}
		}
	}
	return fmt.Errorf("%s %s, but %w (the next change to %s writes it): %w", g.ID, g.State, transition.ErrUnrecorded, gate.Dir(y), cause)
}

// denying runs earn.Denied for a deny by by of the gate gateID: for a
// pending gate as the transition the deny will be, for one already
// denied (the deny repeated after a crash) as the deny it had. Any other
// gate the deny will refuse, and nothing is removed.
func denying(y *yard.Yard, gateID, by string) (string, error) {
	g, err := gate.Get(y, gateID)
	if err != nil {
		return "", nil
	}
	switch g.State {
	case state.Filed:
		return earn.Denied(y, g, by, len(g.History)+1)
	case state.Denied:
		for i, h := range g.History {
			if h.To == state.Denied {
				return earn.Denied(y, g, h.By, i+1)
			}
		}
	}
	return "", nil
}

// gateJSONFlag adds --json to a command that prints the gate it changed.
func gateJSONFlag(fs *flag.FlagSet) *bool {
	return fs.Bool("json", false, "print the gate as one JSON object")
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
