package main

import (
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"strings"
	"time"

	"github.com/impyard/impyard/lib/cli"
	"github.com/impyard/impyard/lib/complete"
	"github.com/impyard/impyard/lib/queue"
	"github.com/impyard/impyard/lib/yard"
)

const addUsage = `usage: impq add --imp NAME [--force] [flags] TEXT...

File a waiting task for an imp and print its id alone on stdout.
TEXT '-' reads the task text from standard input.

With --unique KEY, a second add with the same key while the first task is
still waiting or running adds nothing and prints the first task's id, so
overlapping cron jobs never stack duplicates.

Once the task file is written the command exits 0 and prints the id,
even if the task's record in the journal could not be written (that is a
warning; the next change to the queue writes it), so a caller that
retries on failure never files the task twice. A --unique KEY held by a
task this impyard cannot read (a newer schema) is refused with exit 1.

With --continue, each gate the task files gets a continuation task once
it resolves (executed, failed or denied), naming the outcome; the next
box is briefed with it.

A task no box could run is refused (exit 1, naming what is missing): an
imp with no imps/NAME/imp.toml, or a code task with no repository (no
--repo and no repo in the imp's imp.toml). --force queues it anyway.

--not-before takes RFC 3339 (2026-12-01T09:00:00Z), a local
'2006-01-02 15:04', a local clock time '15:04' (the next one), or a
duration from now ('30m', '+2h').

Examples:
  id=$(impq add --imp yuko "draft the weekly digest and email it to the team")
  0 8 * * 1 impq add --imp yuko --proactive --unique weekly-digest "weekly digest"
  git log -1 | impq add --imp rex --kind code --repo ~/src/app --base main -
`

// labels collects a repeated --label flag.
type labels []string

func (l *labels) String() string     { return strings.Join(*l, ",") }
func (l *labels) Set(v string) error { *l = append(*l, v); return nil }

func add(e *cli.Env, args []string) error {
	fs := e.FlagSet("add", addUsage)
	e.TimeoutFlag(fs)
	root := cli.RootFlag(fs)
	o := queue.AddOptions{Actor: "impq"}
	var ls labels
	var notBefore, as string
	var force bool
	fs.StringVar(&o.Imp, "imp", "", "the imp `NAME` (required)")
	e.Complete(fs, "imp", cli.Names(complete.Imp))
	fs.BoolVar(&o.Proactive, "proactive", false, "mark the task proactive (budget-limited), not an owner task")
	fs.Var(&ls, "label", "a `LABEL` (repeatable)")
	fs.StringVar(&o.Kind, "kind", "research", "task `KIND`: research or code")
	e.Complete(fs, "kind", cli.Words("research", "code"))
	fs.StringVar(&o.Repo, "repo", "", "repository `DIR` for a code task")
	fs.StringVar(&o.Base, "base", "", "base `REF` for a code task")
	fs.StringVar(&o.Continues, "continues", "", "the `TASK` this one continues")
	fs.StringVar(&o.Unique, "unique", "", "dedup `KEY`: no new task while one with this key is waiting or running")
	fs.BoolVar(&o.Continue, "continue", false, "file a continuation task when a gate of this task resolves")
	fs.StringVar(&notBefore, "not-before", "", "do not start before `TIME`")
	fs.StringVar(&as, "as", "", "`NAME` of who asks (default $USER)")
	fs.BoolVar(&force, "force", false, "queue the task even if no box could run it yet")
	asJSON := fs.Bool("json", false, `print {"id": TASK} as one JSON object`)
	if err := cli.Parse(fs, args); err != nil {
		return err
	}
	if o.Imp == "" {
		return cli.Usagef("add: --imp is required")
	}
	if fs.NArg() == 0 {
		return cli.Usagef("add: no task text; give TEXT or '-' for standard input")
	}
	if o.Repo != "" {
		abs, err := filepath.Abs(o.Repo)
		if err != nil {
			return err
		}
		o.Repo = abs
	}
	o.Labels = ls
	o.By = as
	if o.By == "" {
		o.By = cli.User()
	}
	if fs.NArg() == 1 && fs.Arg(0) == "-" {
		b, err := io.ReadAll(io.LimitReader(e.Stdin, queue.MaxText+1))
		if err != nil {
			return fmt.Errorf("read task text from standard input: %w", err)
		}
		o.Text = string(b)
	} else {
		o.Text = strings.Join(fs.Args(), " ")
	}
	if notBefore != "" {
		t, err := parseWhen(notBefore, time.Now())
		if err != nil {
			return cli.Usagef("add: --not-before: %v", err)
		}
		o.NotBefore = t
	}
	y, err := yard.Open(*root)
	if err != nil {
		return err
	}
	if o.Continues != "" {
		if o.Continues, err = queue.Resolve(y, o.Continues); err != nil {
			return err
		}
	}
	if !force {
		if err := queue.Runnable(y, o); err != nil {
			if errors.Is(err, queue.ErrNotRunnable) {
				return fmt.Errorf("%w; --force queues it anyway", err)
			}
			return err
		}
	}
	taskID, _, err := queue.Add(y, o)
	if errors.Is(err, queue.ErrUnrecorded) {
		// The task is filed: failing now would make a retrying caller
		// file it twice. The next change to the queue writes the record.
		e.Warn(err)
	} else if err != nil {
		return err
	}
	if *asJSON {
		return cli.JSONLine(e.Stdout, map[string]string{"id": taskID})
	}
	_, err = fmt.Fprintln(e.Stdout, taskID)
	return err
}

// parseWhen reads the forms --not-before accepts, relative to now.
func parseWhen(s string, now time.Time) (time.Time, error) {
	if t, err := time.Parse(time.RFC3339, s); err == nil {
		return t, nil
	}
	for _, layout := range []string{"2006-01-02 15:04", "2006-01-02T15:04", "2006-01-02"} {
		if t, err := time.ParseInLocation(layout, s, now.Location()); err == nil {
			return t, nil
		}
	}
	if c, err := time.ParseInLocation("15:04", s, now.Location()); err == nil {
		t := time.Date(now.Year(), now.Month(), now.Day(), c.Hour(), c.Minute(), 0, 0, now.Location())
		if !t.After(now) {
			t = t.AddDate(0, 0, 1)
		}
		return t, nil
	}
	if d, err := time.ParseDuration(strings.TrimPrefix(s, "+")); err == nil && d >= 0 {
		return now.Add(d), nil
	}
	return time.Time{}, fmt.Errorf("cannot read %q as a time (RFC 3339, '2006-01-02 15:04', '15:04' or a duration like 30m)", s)
}
