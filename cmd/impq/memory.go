package main

import (
	"fmt"
	"strings"
	"time"

	"github.com/impyard/impyard/lib/approval"
	"github.com/impyard/impyard/lib/cli"
	"github.com/impyard/impyard/lib/complete"
	"github.com/impyard/impyard/lib/config"
	"github.com/impyard/impyard/lib/gate"
	"github.com/impyard/impyard/lib/intent"
	"github.com/impyard/impyard/lib/memory"
	"github.com/impyard/impyard/lib/state"
	"github.com/impyard/impyard/lib/yard"
)

const memoryUsage = `usage: impq memory [--json] IMP

Show the core memory of an imp, imps/<imp>/memory.md, entry by entry with
its provenance: a promoted entry with its id, the memory-promote gate that
kept it, when, and who approved that gate (UNVERIFIED, and why, when that
gate is not an executed memory-promote of the imp whose approval
verifies); the owner's own text
(anything outside the entry markers) as "owner". The file is plain markdown: edit it
in any editor, and the next brief carries the edit.

Examples:
  impq memory yuko
  impq memory --json yuko | jq -r 'select(.by=="gate") | .gate'
  $EDITOR "$IMPYARD_ROOT/imps/yuko/memory.md"
`

// memoryEntry is one entry as impq prints it: the file's entry and who
// approved its gate, or why the gate it names does not vouch for it.
type memoryEntry struct {
	Imp  string `json:"imp"`
	File string `json:"file"`
	memory.Entry
	Approved   string `json:"approved_by,omitempty"`
	Unverified string `json:"unverified,omitempty"`
}

// vouch says who approved the gate an entry names, or why that gate does
// not vouch for the entry: the marker is text anyone who can edit
// memory.md can write, and so is a gate file, so the gate must be an
// executed memory-promote of this imp whose approval verifies against
// the owner's keys (keys, or keysErr when they could not be loaded), as
// impexec checks it before executing.
func vouch(y *yard.Yard, keys *approval.Keyring, keysErr error, imp, gateID string) (approved, unverified string) {
	g, err := gate.Get(y, gateID)
	switch {
	case err != nil:
		return "", "its gate cannot be read: " + err.Error()
	case g.Imp != imp || g.Intent != intent.MemoryPromote:
		return "", fmt.Sprintf("its gate is %s's %s, not a memory-promote of %s", g.Imp, g.Intent, imp)
	case g.State != state.Executed || g.Approval == nil:
		return "", fmt.Sprintf("its gate is %s, not approved and executed", g.State)
	case keysErr != nil:
		return "", "its gate's approval cannot be checked: " + keysErr.Error()
	}
	if _, err := g.VerifyApproval(keys); err != nil {
		return "", "its gate's approval does not verify: " + err.Error()
	}
	return g.Approval.By, ""
}

func memoryCmd(e *cli.Env, args []string) error {
	fs := e.FlagSet("memory", memoryUsage)
	e.Complete(fs, "", cli.Names(complete.Imp))
	root := cli.RootFlag(fs)
	asJSON := fs.Bool("json", false, "print one JSON object per entry")
	if err := cli.Parse(fs, args); err != nil {
		return err
	}
	if fs.NArg() != 1 {
		return cli.Usagef("memory: want exactly one imp")
	}
	imp := fs.Arg(0)
	y, err := yard.Open(*root)
	if err != nil {
		return err
	}
	entries, err := memory.Entries(y, imp)
	if err != nil {
		return err
	}
	file := config.MemoryPath(y, imp)
	var keys *approval.Keyring
	home, keysErr := yard.Home()
	if keysErr == nil {
		keys, keysErr = approval.LoadKeyring(home)
	}
	for _, en := range entries {
		m := memoryEntry{Imp: imp, File: file, Entry: en}
		if en.Gate != "" {
			m.Approved, m.Unverified = vouch(y, keys, keysErr, imp, en.Gate)
		}
		if *asJSON {
			if err := cli.JSONLine(e.Stdout, m); err != nil {
				return err
			}
			continue
		}
		head := fmt.Sprintf("owner  line %d", en.Line)
		if en.By == memory.Provenance {
			head = fmt.Sprintf("%s  gate %s  %s", en.ID, en.Gate, en.At.Format(time.RFC3339))
			if m.Approved != "" {
				head += "  approved by " + m.Approved
			}
			if m.Unverified != "" {
				head += "  UNVERIFIED: " + cli.Printable(m.Unverified)
			}
		}
		fmt.Fprintln(e.Stdout, head)
		for _, line := range strings.Split(cli.PrintableLines(en.Text), "\n") {
			fmt.Fprintln(e.Stdout, strings.TrimRight("    "+line, " "))
		}
	}
	return nil
}
