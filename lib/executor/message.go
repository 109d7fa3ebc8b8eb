package executor

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/impyard/impyard/lib/config"
	"github.com/impyard/impyard/lib/gate"
	"github.com/impyard/impyard/lib/store"
	"github.com/impyard/impyard/lib/yard"
)

// Notice is one line of the owner's notification log.
type Notice struct {
	Schema  string          `json:"schema"`
	TS      time.Time       `json:"ts"`
	Gate    string          `json:"gate"`
	Imp     string          `json:"imp"`
	Task    string          `json:"task,omitempty"`
	Message json.RawMessage `json:"message"`
}

// noticeLog is the file a message-user executor appends to.
func noticeLog(y *yard.Yard, exe *config.Executor) string {
	switch {
	case exe.Log == "":
		return y.Path("notifications.jsonl")
	case filepath.IsAbs(exe.Log):
		return exe.Log
	}
	return y.Path(exe.Log)
}

// messageUser appends the payload to the owner's notification log, once
// per gate, and then runs the configured command, if any, with the
// message's text on standard input (the gate's JSON with stdin = "json"),
// so that a mail command mails the text.
func (r *Runner) messageUser(ctx context.Context, g *gate.Gate, exe *config.Executor, payload []byte) (*Result, error) {
	logPath := noticeLog(r.Yard, exe)
	seen := false
	_, err := store.ReadJSONL(logPath, func(line []byte) error {
		var n Notice
		if json.Unmarshal(line, &n) == nil && n.Gate == g.ID {
			seen = true
		}
		return nil
	})
	if err != nil {
		return nil, &outcome{err: err, transient: true}
	}
	if !seen {
		n := Notice{Schema: store.Schema("notice", 1), TS: store.Now(), Gate: g.ID, Imp: g.Imp, Task: g.Task, Message: payload}
		if err := store.AppendJSONL(logPath, n); err != nil {
			return nil, &outcome{err: err, transient: true}
		}
	}
	res := &Result{Kind: config.MessageUser, Detail: "appended to " + logPath}
	if len(exe.Command) == 0 {
		return res, nil
	}
	in, err := commandInput(g, exe, payload)
	if err != nil {
		return nil, &outcome{err: err}
	}
	out, err := runCommand(ctx, exe.Command, exe.Timeout.Duration, in)
	if err != nil {
		var ee *exec.ExitError
		started := errors.As(err, &ee)
		return nil, &outcome{err: fmt.Errorf("%s: %w: %s", exe.Command[0], err, trim(out, 300)), sent: started, transient: true}
	}
	res.Detail += "; ran " + exe.Command[0]
	res.Body = trim(out, 2048)
	return res, nil
}

// commandInput is what a message-user command reads: the payload's text
// with a newline after it, or the gate as JSON.
func commandInput(g *gate.Gate, exe *config.Executor, payload []byte) ([]byte, error) {
	if exe.Stdin == config.StdinJSON {
		return json.Marshal(g)
	}
	var m struct {
		Text string `json:"text"`
	}
	if err := json.Unmarshal(payload, &m); err != nil {
		return nil, fmt.Errorf("gate %s: the message's text: %w", g.ID, err)
	}
	if m.Text == "" || strings.HasSuffix(m.Text, "\n") {
		return []byte(m.Text), nil
	}
	return []byte(m.Text + "\n"), nil
}

// runCommand runs argv with in on its standard input, killed after
// timeout, and returns what it wrote to standard output and error.
func runCommand(ctx context.Context, argv []string, timeout time.Duration, in []byte) (string, error) {
	cctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	cmd := exec.CommandContext(cctx, argv[0], argv[1:]...)
	cmd.Stdin = bytes.NewReader(in)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	return out.String(), err
}
