package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/impyard/impyard/lib/approval"
	"github.com/impyard/impyard/lib/blob"
	"github.com/impyard/impyard/lib/cli"
	"github.com/impyard/impyard/lib/gate"
	"github.com/impyard/impyard/lib/intent"
	"github.com/impyard/impyard/lib/state"
	"github.com/impyard/impyard/lib/yard"
)

const showUsage = `usage: impgate show [--json | --raw | --stat] GATE

Show a gate: imp, intent, task, rationale, the sha256 of the frozen payload,
the payload itself and the full timeline. The payload is re-derived from
the file and checked against its sha256 before it is shown; a gate edited
on disk is reported, not shown as if it were what was filed.

A gate whose payload names a diff ("diff": "sha256:<hex>", as a
commit-and-push gate does) also shows the diff's stat and the diff itself,
read from blobs/sha256/ and checked against its hash; coloured on a
terminal, plain when piped. --stat prints only the stat.

An approved gate's approval is checked as impexec checks it: signed by a
key in IMPYARD_HOME/keys/ over this gate id, payload sha256, decider and
time. The approval line (and approval_verifies, approval_key and
approval_error in --json) says whether it verifies and, if not, why.

--raw prints exactly the frozen payload bytes (the bytes the sha256 is of)
and nothing else, so 'impgate show --raw G | sha256sum' matches.

Examples:
  impgate show g-01jf8k2m3nx4k9q2
  impgate show --raw g-01jf8k2m3nx4k9q2 | jq .
  impgate show --json g-01jf8k2m3nx4k9q2 | jq -r .sha256
`

func show(e *cli.Env, args []string) error {
	fs := e.FlagSet("show", showUsage)
	root := cli.RootFlag(fs)
	asJSON := fs.Bool("json", false, "print the gate as one JSON object")
	raw := fs.Bool("raw", false, "print only the exact frozen payload bytes")
	statOnly := fs.Bool("stat", false, "for a gate with a diff, print only its stat")
	g, err := oneGate(fs, args, root)
	if err != nil {
		return err
	}
	if *asJSON && *raw {
		return cli.Usagef("show: --json and --raw exclude each other")
	}
	frozen, err := g.Frozen()
	if err != nil {
		return err
	}
	switch {
	case *statOnly:
		return showDiff(e, *root, g, frozen, true)
	case *raw:
		_, err = e.Stdout.Write(frozen)
		return err
	}
	verified := verifyApproval(g)
	if *asJSON {
		return cli.JSONLine(e.Stdout, verified)
	}
	w := e.Stdout
	fmt.Fprintf(w, "gate       %s\nimp        %s\nintent     %s\nstate      %s\n", g.ID, g.Imp, g.Intent, g.State)
	if g.Task != "" {
		fmt.Fprintf(w, "task       %s\n", g.Task)
	}
	if g.Run != "" {
		fmt.Fprintf(w, "run        %s\n", g.Run)
	}
	fmt.Fprintf(w, "sha256     %s\n", g.SHA256)
	switch {
	case verified.Verifies == nil:
	case *verified.Verifies:
		fmt.Fprintf(w, "approval   verifies: signed by %s for %s at %s\n", verified.Key, g.Approval.By, g.Approval.At.Format(time.RFC3339))
	default:
		fmt.Fprintf(w, "approval   DOES NOT VERIFY: %s\n", verified.Error)
	}
	if g.Rationale != "" {
		fmt.Fprintf(w, "rationale  %s\n", g.Rationale)
	}
	var pretty bytes.Buffer
	if err := json.Indent(&pretty, frozen, "  ", "  "); err != nil {
		return err
	}
	fmt.Fprintf(w, "\npayload (%d bytes):\n  %s\n", len(frozen), pretty.String())
	if err := showDiff(e, *root, g, frozen, false); err != nil {
		return err
	}
	if len(g.Result) > 0 {
		fmt.Fprintf(w, "\nresult:\n  %s\n", string(g.Result))
	}
	fmt.Fprintln(w, "\ntimeline:")
	for _, h := range g.History {
		fmt.Fprintln(w, "  "+cli.Timeline(h.At, h.From, h.To, h.By, h.Why))
	}
	return nil
}

// shown is a gate with what its approval's check found, when it has one.
type shown struct {
	*gate.Gate
	Verifies *bool  `json:"approval_verifies,omitempty"`
	Key      string `json:"approval_key,omitempty"`
	Error    string `json:"approval_error,omitempty"`
}

func verifyApproval(g *gate.Gate) *shown {
	out := &shown{Gate: g}
	approved := false
	for _, h := range g.History {
		approved = approved || h.To == state.Approved
	}
	if !approved && g.Approval == nil {
		return out
	}
	ok := false
	out.Verifies = &ok
	home, err := yard.Home()
	if err != nil {
		out.Error = err.Error()
		return out
	}
	kr, err := approval.LoadKeyring(home)
	if err != nil {
		out.Error = err.Error()
		return out
	}
	key, err := g.VerifyApproval(kr)
	switch {
	case errors.Is(err, approval.ErrUnsigned) && g.State == state.Approved:
		out.Error = err.Error() + fmt.Sprintf(" (approved before approvals were signed, or written into the yard by hand); 'impgate approve %s' signs it", g.ID)
	case err != nil:
		out.Error = err.Error()
	default:
		ok = true
		out.Key = key.Name + " " + key.Fingerprint
	}
	return out
}

func oneGate(fs *flag.FlagSet, args []string, root *string) (*gate.Gate, error) {
	if err := cli.Parse(fs, args); err != nil {
		return nil, err
	}
	if fs.NArg() != 1 {
		return nil, cli.Usagef("want exactly one gate id")
	}
	y, err := yard.Open(*root)
	if err != nil {
		return nil, err
	}
	return gate.Get(y, fs.Arg(0))
}

// showDiff prints the stat and, unless statOnly, the diff of a payload
// that names one; a payload without a diff prints nothing.
func showDiff(e *cli.Env, root string, g *gate.Gate, frozen []byte, statOnly bool) error {
	var p intent.Push
	if json.Unmarshal(frozen, &p) != nil || !strings.HasPrefix(p.Diff, blob.Prefix) {
		if statOnly {
			return fmt.Errorf("gate %s has no diff", g.ID)
		}
		return nil
	}
	y, err := yard.Open(root)
	if err != nil {
		return err
	}
	diff, err := blob.Get(y, p.Diff)
	if err != nil {
		return err
	}
	w := e.Stdout
	if statOnly {
		fmt.Fprintln(w, p.Stat)
		return nil
	}
	fmt.Fprintf(w, "\nstat:\n%s\n\ndiff (%s, %d bytes):\n", p.Stat, p.Diff, len(diff))
	colour := isTerminal(w)
	for _, line := range strings.SplitAfter(string(diff), "\n") {
		if line == "" {
			continue
		}
		c := ""
		if colour {
			switch {
			case strings.HasPrefix(line, "+++"), strings.HasPrefix(line, "---"):
				c = "\x1b[1m"
			case strings.HasPrefix(line, "+"):
				c = "\x1b[32m"
			case strings.HasPrefix(line, "-"):
				c = "\x1b[31m"
			case strings.HasPrefix(line, "@@"):
				c = "\x1b[36m"
			}
		}
		if c != "" {
			fmt.Fprint(w, c+strings.TrimSuffix(line, "\n")+"\x1b[0m\n")
		} else {
			fmt.Fprint(w, line)
		}
	}
	if !strings.HasSuffix(string(diff), "\n") && len(diff) > 0 {
		fmt.Fprintln(w)
	}
	return nil
}

func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	_, err := unix.IoctlGetTermios(int(f.Fd()), unix.TCGETS)
	return err == nil
}
