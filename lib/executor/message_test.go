package executor

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/impyard/impyard/lib/config"
	"github.com/impyard/impyard/lib/gate"
)

func messageExecutor(command ...string) *config.Executor {
	return &config.Executor{Kind: config.MessageUser, Command: command, Timeout: config.Duration{Duration: 20 * time.Second}}
}

// The owner's log gets one notice per gate, however often the gate is
// sent, and other gates' notices do not count as this one's.
func TestMessageUserOncePerGate(t *testing.T) {
	r := setup(t, "")
	one := &gate.Gate{ID: "g-0000000000000001", Imp: "yuko", Task: "t-0000000000000001"}
	two := &gate.Gate{ID: "g-0000000000000002", Imp: "rex"}
	for _, g := range []*gate.Gate{one, two, one, two} {
		res, err := r.messageUser(context.Background(), g, messageExecutor(), []byte(`{"text":"`+g.ID+`"}`))
		if err != nil || res.Kind != config.MessageUser || res.Detail != "appended to "+r.Yard.Path("notifications.jsonl") {
			t.Fatalf("%s: %+v %v", g.ID, res, err)
		}
	}
	n := notices(t, r)
	if len(n) != 2 || n[0].Gate != one.ID || n[1].Gate != two.ID {
		t.Fatalf("notices %+v, want one per gate", n)
	}
	if n[0].Schema != "impyard.notice/1" || n[0].Imp != "yuko" || n[0].Task != one.Task || string(n[0].Message) != `{"text":"`+one.ID+`"}` || n[0].TS.IsZero() {
		t.Errorf("notice %+v", n[0])
	}
	if n[1].Imp != "rex" || n[1].Task != "" {
		t.Errorf("notice %+v", n[1])
	}
}

func TestMessageUserLogPath(t *testing.T) {
	r := setup(t, "")
	abs := filepath.Join(t.TempDir(), "owner.jsonl")
	g := &gate.Gate{ID: "g-0000000000000001", Imp: "yuko"}
	for _, c := range []struct{ log, want string }{
		{"mail.jsonl", r.Yard.Path("mail.jsonl")},
		{abs, abs},
	} {
		exe := messageExecutor()
		exe.Log = c.log
		res, err := r.messageUser(context.Background(), g, exe, []byte(`{}`))
		if err != nil || res.Detail != "appended to "+c.want {
			t.Errorf("log %q: %+v %v", c.log, res, err)
		}
		if b, err := os.ReadFile(c.want); err != nil || !strings.Contains(string(b), g.ID) {
			t.Errorf("log %q: %s holds %q %v", c.log, c.want, b, err)
		}
	}
	if _, err := os.Stat(r.Yard.Path("notifications.jsonl")); !os.IsNotExist(err) {
		t.Errorf("the default log was written too: %v", err)
	}
	// A log that cannot be read is worth retrying; nothing was sent.
	exe := messageExecutor()
	exe.Log = t.TempDir()
	_, err := r.messageUser(context.Background(), g, exe, []byte(`{}`))
	var o *outcome
	if !errors.As(err, &o) || o.sent || !o.transient {
		t.Errorf("unreadable log: %v", err)
	}
}

// The command gets the message's text on its standard input, or with
// stdin = "json" the gate as JSON; its output is the result's body.
func TestMessageUserCommand(t *testing.T) {
	r := setup(t, "")
	g := &gate.Gate{ID: "g-0000000000000001", Imp: "yuko", Intent: "notify", Payload: json.RawMessage(`{"text":"hi"}`)}
	for payload, want := range map[string]string{`{"text":"hi"}`: "[hi\n]", `{"text":"two\nlines\n"}`: "[two\nlines\n]", `{"text":""}`: "[]"} {
		res, err := r.messageUser(context.Background(), g, messageExecutor("sh", "-c", `printf '['; cat; printf ']'`), []byte(payload))
		if err != nil || res.Body != want {
			t.Errorf("text of %s: the command read %q (%v), want %q", payload, res.Body, err, want)
		}
	}
	if _, err := r.messageUser(context.Background(), g, messageExecutor("cat"), []byte(`{"text":`)); err == nil {
		t.Errorf("a payload whose text cannot be read was sent to the command")
	}
	exe := messageExecutor("sh", "-c", "cat; echo; echo done >&2")
	exe.Stdin = config.StdinJSON
	res, err := r.messageUser(context.Background(), g, exe, []byte(`{"text":"hi"}`))
	if err != nil {
		t.Fatal(err)
	}
	if want := "appended to " + r.Yard.Path("notifications.jsonl") + "; ran sh"; res.Detail != want {
		t.Errorf("detail %q, want %q", res.Detail, want)
	}
	stdin, rest, _ := strings.Cut(res.Body, "\n")
	var got gate.Gate
	if err := json.Unmarshal([]byte(stdin), &got); err != nil || got.ID != g.ID || got.Intent != "notify" || string(got.Payload) != `{"text":"hi"}` {
		t.Errorf("the command read %q (%v), want the gate", stdin, err)
	}
	if rest != "done\n" {
		t.Errorf("stderr %q not in the body", rest)
	}

	// A command that cannot start had no effect; one that ran and failed may have.
	for _, c := range []struct {
		command []string
		sent    bool
		want    string
	}{
		{[]string{filepath.Join(t.TempDir(), "missing")}, false, "missing: "},
		{[]string{"sh", "-c", "echo partial; exit 2"}, true, "sh: exit status 2: partial"},
	} {
		_, err := r.messageUser(context.Background(), g, messageExecutor(c.command...), []byte(`{}`))
		var o *outcome
		if !errors.As(err, &o) || o.sent != c.sent || !o.transient || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%q: %v (sent %v), want sent %v and %q", c.command, err, o != nil && o.sent, c.sent, c.want)
		}
	}
	// A command that outlives its timeout is killed: it may have acted.
	exe = messageExecutor("sleep", "60")
	exe.Timeout.Duration = 50 * time.Millisecond
	start := time.Now()
	_, err = r.messageUser(context.Background(), g, exe, []byte(`{}`))
	var o *outcome
	if !errors.As(err, &o) || !o.sent || time.Since(start) > 30*time.Second {
		t.Errorf("timed-out command: %v after %v", err, time.Since(start))
	}
	// A gate that cannot be encoded for the command is not sent to it.
	bad := &gate.Gate{ID: "g-0000000000000003", Imp: "yuko", Payload: json.RawMessage(`{`)}
	exe = messageExecutor("sh", "-c", "echo ran")
	exe.Stdin = config.StdinJSON
	_, err = r.messageUser(context.Background(), bad, exe, []byte(`{}`))
	if !errors.As(err, &o) || o.sent || o.transient {
		t.Errorf("unencodable gate: %v", err)
	}
}
