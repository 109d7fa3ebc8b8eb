package main

import (
	"fmt"
	"strings"
	"time"

	"github.com/impyard/impyard/lib/cli"
	"github.com/impyard/impyard/lib/config"
	"github.com/impyard/impyard/lib/gate"
	"github.com/impyard/impyard/lib/memory"
	"github.com/impyard/impyard/lib/yard"
)

const memoryUsage = `usage: impq memory [--json] IMP

Show the core memory of an imp, imps/<imp>/memory.md, entry by entry with
its provenance: a promoted entry with its id, the memory-promote gate that
kept it, when, and who approved that gate; the owner's own text (anything
outside the entry markers) as "owner". The file is plain markdown: edit it
in any editor, and the next brief carries the edit.

Examples:
  impq memory yuko
  impq memory --json yuko | jq -r 'select(.by=="gate") | .gate'
  $EDITOR "$IMPYARD_ROOT/imps/yuko/memory.md"
`

// memoryEntry is one entry as impq prints it: the file's entry and who
// approved its gate, when the gate can be read.
type memoryEntry struct {
	Imp  string `json:"imp"`
	File string `json:"file"`
	memory.Entry
	Approved string `json:"approved_by,omitempty"`
}

func memoryCmd(e *cli.Env, args []string) error {
	fs := e.FlagSet("memory", memoryUsage)
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
	for _, en := range entries {
		m := memoryEntry{Imp: imp, File: file, Entry: en}
		if en.Gate != "" {
			if g, err := gate.Get(y, en.Gate); err == nil && g.Approval != nil {
				m.Approved = g.Approval.By
			}
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
		}
		fmt.Fprintln(e.Stdout, head)
		for _, line := range strings.Split(en.Text, "\n") {
			fmt.Fprintln(e.Stdout, strings.TrimRight("    "+line, " "))
		}
	}
	return nil
}
