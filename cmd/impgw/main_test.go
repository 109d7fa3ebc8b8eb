package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/rogpeppe/go-internal/testscript"

	"github.com/impyard/impyard/internal/scripttest"
	"github.com/impyard/impyard/lib/gateway"
	"github.com/impyard/impyard/lib/proposal"
)

// TestMain makes this test binary double as impgw, on PATH for the
// scripts and for the tests that run a live gateway.
func TestMain(m *testing.M) {
	testscript.Main(m, map[string]func(){"impgw": scripttest.Main(main)})
}

func TestScripts(t *testing.T) {
	testscript.Run(t, testscript.Params{
		Dir: "testdata/script",
		Setup: func(env *testscript.Env) error {
			if err := scripttest.Setup(env); err != nil {
				return err
			}
			env.Setenv("HOME", env.WorkDir)
			env.Values[followKey{}] = &follower{}
			return os.MkdirAll(filepath.Join(env.WorkDir, "policies"), 0o755)
		},
		Cmds: scripttest.Cmds(map[string]func(ts *testscript.TestScript, neg bool, args []string){
			"decisions": decisionsCmd,
			"follow":    followCmd,
		}),
	})
}

// decisionsCmd appends decision records to a file with the gateway's own
// encoder, as impgw serve writes them: "decisions FILE" writes the set
// below, "decisions FILE more" one more denial, dated now. The set is two
// records of 2026-07-01 (an allow completed by its outcome, a deny), a
// gate event and two proposals sharing the log (one refused by trust, one
// gated), and four of the last minutes: an allow of kenji's with its
// outcome, a malformed request rejected, a proposal refused by its
// payload's type checks, and a tunnel still open (no outcome yet).
func decisionsCmd(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) < 1 || len(args) > 2 {
		ts.Fatalf("usage: decisions FILE [more]")
	}
	ts.Check(os.MkdirAll(filepath.Dir(ts.MkAbs(args[0])), 0o755))
	f, err := os.OpenFile(ts.MkAbs(args[0]), os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
	ts.Check(err)
	defer f.Close()
	now := time.Now().UTC()
	put := func(b []byte) {
		_, err := f.Write(append(b, '\n'))
		ts.Check(err)
	}
	rec := func(id string, at time.Time, imp, verdict, rule, method, host, path string, status int) *gateway.Record {
		r := &gateway.Record{ID: id, Time: at, Verdict: verdict, Rule: rule, Reason: "rule " + rule,
			Request: gateway.RequestInfo{Imp: imp, Protocol: "https", Method: method, Host: host, Port: 443, Path: path}, Status: status}
		b, err := r.MarshalJSON()
		ts.Check(err)
		put(b)
		return r
	}
	outcome := func(r *gateway.Record, status int, out int64) {
		r.Status, r.BytesOut = status, out
		put(r.OutcomeJSON(r.Time.Add(time.Second)))
	}
	if len(args) == 2 {
		rec("00000000-0000-4000-8000-000000000007", now, "yuko", gateway.VerdictDeny, "", "DELETE", "api.github.com", "/repos/x", 403)
		return
	}
	t0 := time.Date(2026, 7, 1, 10, 0, 0, 0, time.UTC)
	r := rec("00000000-0000-4000-8000-000000000001", t0, "yuko", gateway.VerdictAllow, "model-api", "POST", "chatgpt.com", "/backend-api/codex/responses", 0)
	rec("00000000-0000-4000-8000-000000000002", t0.Add(time.Second), "yuko", gateway.VerdictDeny, "", "POST", "api.resend.com", "/emails", 403)
	ev, err := json.Marshal(map[string]string{"schema": "impyard.event/1", "ts": t0.Add(2 * time.Second).Format(time.RFC3339), "event": "gate-filed", "imp": "yuko"})
	ts.Check(err)
	put(ev)
	prop := func(r *proposal.Record) {
		b, err := r.MarshalJSON()
		ts.Check(err)
		put(b)
	}
	prop(&proposal.Record{Time: t0.Add(3 * time.Second), Imp: "yuko", Run: "r-1", Task: "t-1", Intent: "email-send", Verdict: proposal.Refused,
		Refusal: proposal.TrustDeny, Reason: `intent "email-send" is refused for yuko by trust.toml:3`, Entry: "trust.toml:3"})
	prop(&proposal.Record{Time: t0.Add(4 * time.Second), Imp: "yuko", Intent: "message-user", Verdict: proposal.Gated, Gate: "g-1"})
	outcome(r, 200, 900)
	r = rec("00000000-0000-4000-8000-000000000004", now.Add(-5*time.Minute), "kenji", gateway.VerdictAllow, "github", "GET", "API.GitHub.com", "/user", 0)
	outcome(r, 200, 120)
	bad := &gateway.Record{ID: "00000000-0000-4000-8000-000000000005", Time: now.Add(-time.Minute), Verdict: gateway.VerdictReject,
		Reason: "both Content-Length and Transfer-Encoding (request smuggling)", Request: gateway.RequestInfo{Method: "POST"}, Status: 400}
	b, err := bad.MarshalJSON()
	ts.Check(err)
	put(b)
	prop(&proposal.Record{Time: now.Add(-45 * time.Second), Imp: "kenji", Intent: "email-send", Verdict: proposal.Refused,
		Refusal: proposal.PayloadRefused, Reason: `payload: "to": want a list of addresses`})
	rec("00000000-0000-4000-8000-000000000006", now.Add(-30*time.Second), "kenji", gateway.VerdictTunnel, "ws", "CONNECT", "ws.example.com", "", 0)
}

// followCmd runs impgw in the background as a follower, the way an owner
// leaves impgw log -f running: "follow ARGS..." starts it and returns
// once it says on standard error that it follows, so what the script
// appends next is new to it; "follow stop" interrupts it, waits for it to
// end and writes what it printed to follow.stdout and follow.stderr.
func followCmd(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) == 0 {
		ts.Fatalf("usage: follow ARGS... | follow stop")
	}
	slot := ts.Value(followKey{}).(*follower)
	if args[0] == "stop" {
		if slot.cmd == nil {
			ts.Fatalf("follow stop: nothing follows")
		}
		ts.Check(slot.cmd.Process.Signal(os.Interrupt))
		<-slot.done
		err := slot.cmd.Wait()
		ts.Check(os.WriteFile(ts.MkAbs("follow.stdout"), slot.stdout.Bytes(), 0o644))
		ts.Check(os.WriteFile(ts.MkAbs("follow.stderr"), slot.stderr.Bytes(), 0o644))
		slot.cmd = nil
		ts.Check(err)
		return
	}
	if slot.cmd != nil {
		ts.Fatalf("follow: one follows already")
	}
	cmd := exec.Command("impgw", args...)
	cmd.Dir = ts.Getenv("WORK")
	cmd.Env = os.Environ()
	for _, k := range []string{"HOME", "USER", "IMPYARD_ROOT", "IMPYARD_HOME"} {
		cmd.Env = append(cmd.Env, k+"="+ts.Getenv(k))
	}
	*slot = follower{cmd: cmd, done: make(chan struct{})}
	cmd.Stdout = &slot.stdout
	pr, pw, err := os.Pipe()
	ts.Check(err)
	cmd.Stderr = pw
	ts.Check(cmd.Start())
	pw.Close()
	ts.Defer(func() { cmd.Process.Kill() })
	ready := make(chan bool, 1)
	go func() {
		defer close(slot.done)
		defer pr.Close()
		sc := bufio.NewScanner(pr)
		said := false
		for sc.Scan() {
			slot.stderr.WriteString(sc.Text() + "\n")
			if !said && strings.Contains(sc.Text(), ": note: following ") {
				said = true
				ready <- true
			}
		}
		if !said {
			ready <- false
		}
	}()
	if !<-ready {
		<-slot.done
		cmd.Wait()
		ts.Fatalf("impgw %s ended without following:\n%s", strings.Join(args, " "), slot.stderr.String())
	}
}

// followKey holds a script's follower in its Values.
type followKey struct{}

// follower is the impgw a script's follow started; stderr is written by
// the goroutine that reads it until done is closed.
type follower struct {
	cmd            *exec.Cmd
	done           chan struct{}
	stdout, stderr bytes.Buffer
}
