package mcpserv

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/impyard/impyard/lib/box"
	"github.com/impyard/impyard/lib/config"
	"github.com/impyard/impyard/lib/gate"
	"github.com/impyard/impyard/lib/pause"
	"github.com/impyard/impyard/lib/proposal"
	"github.com/impyard/impyard/lib/yard"
	"github.com/impyard/impyard/lib/yard/yardtest"
)

// The test binary is its own stdio MCP server when this is set: small,
// fast and able to die on cue, for the lifecycle's edges. The reference
// server from npm is run end to end in tests/mcp_test.go.
const serverEnv = "MCPSERV_TEST_SERVER"

func TestMain(m *testing.M) {
	if os.Getenv(serverEnv) != "" {
		serve()
		return
	}
	os.Exit(m.Run())
}

// serve answers initialize, tools/list and tools/call of echo (its
// arguments back), env (a variable's value), pid, sleep (never answers),
// die (exits at once) and deaf (reads no more, then answers); every line it reads is appended to the file
// MCPSERV_TEST_SEEN names.
func serve() {
	seen, _ := os.OpenFile(os.Getenv("MCPSERV_TEST_SEEN"), os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o600)
	sc := bufio.NewScanner(os.Stdin)
	out := json.NewEncoder(os.Stdout)
	for sc.Scan() {
		if seen != nil {
			seen.Write(append(sc.Bytes(), '\n'))
		}
		var m struct {
			ID     json.RawMessage `json:"id"`
			Method string          `json:"method"`
			Params struct {
				Name      string            `json:"name"`
				Arguments map[string]string `json:"arguments"`
				Meta      struct {
					ProgressToken json.RawMessage `json:"progressToken"`
				} `json:"_meta"`
			} `json:"params"`
		}
		json.Unmarshal(sc.Bytes(), &m)
		if m.ID == nil {
			continue
		}
		var result any
		switch m.Method {
		case "initialize":
			result = map[string]any{"protocolVersion": DefaultProtocol, "capabilities": map[string]any{"tools": map[string]any{}}, "serverInfo": map[string]any{"name": "test", "version": "1"}}
		case "tools/list":
			result = map[string]any{"tools": []any{map[string]any{"name": "echo"}}}
		case "tools/call":
			switch m.Params.Name {
			case "echo":
				result = map[string]any{"content": []any{map[string]any{"type": "text", "text": m.Params.Arguments["text"]}}}
			case "env":
				result = map[string]any{"content": []any{map[string]any{"type": "text", "text": os.Getenv(m.Params.Arguments["name"])}}}
			case "pid":
				result = map[string]any{"content": []any{map[string]any{"type": "text", "text": fmt.Sprint(os.Getpid())}}}
			case "sleep":
				continue
			case "progress":
				// Two steps of progress and a log line, then the answer.
				for i := 1; i <= 2; i++ {
					out.Encode(map[string]any{"jsonrpc": "2.0", "method": "notifications/progress", "params": map[string]any{"progressToken": m.Params.Meta.ProgressToken, "progress": i, "total": 2}})
				}
				out.Encode(map[string]any{"jsonrpc": "2.0", "method": "notifications/message", "params": map[string]any{"level": "info", "data": "working with " + os.Getenv("TOKEN")}})
				result = map[string]any{"content": []any{map[string]any{"type": "text", "text": "done"}}}
			case "die":
				os.Exit(3)
			case "deaf":
				// Stops reading, then answers, and runs on: to the
				// gateway, a process that died and is not yet noticed.
				// Closed before the answer, so no next call can be in
				// the pipe when it closes.
				os.Stdin.Close()
				out.Encode(map[string]any{"jsonrpc": "2.0", "id": m.ID, "result": map[string]any{"content": []any{}}})
				time.Sleep(time.Minute)
				os.Exit(0)
			}
		}
		out.Encode(map[string]any{"jsonrpc": "2.0", "id": m.ID, "result": result})
	}
}

type rig struct {
	y    *yard.Yard
	home string
	seen string
	org  *config.Org
	m    *Manager
	door *Door
}

const testSecret = "s3cret-value-for-tests"

func newRig(t *testing.T, entry string) *rig {
	t.Helper()
	r := &rig{y: yardtest.New(t), home: t.TempDir()}
	r.seen = filepath.Join(t.TempDir(), "seen")
	os.MkdirAll(filepath.Join(r.home, "secrets"), 0o700)
	os.WriteFile(filepath.Join(r.home, "secrets", "tok"), []byte(testSecret+"\n"), 0o600)
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	// Through env(1): the server gets none of the gateway's environment.
	toml := fmt.Sprintf("[mcp.t]\ncommand = [\"env\", %q, %q, %q]\nisolation = \"host\"\nimps = [\"yuko\", \"ada\"]\nenv = { TOKEN = \"tok\" }\n%s",
		serverEnv+"=1", "MCPSERV_TEST_SEEN="+r.seen, exe, entry)
	r.org, err = config.ParseOrg("org.toml", []byte(toml))
	if err != nil {
		t.Fatal(err)
	}
	r.m = &Manager{Yard: r.y, Home: r.home, Org: func() (*config.Org, error) { return r.org, nil }, Backoff: 10 * time.Millisecond}
	// Gated calls are decided as the gateway decides them: proposals,
	// by one Decider.
	var dc proposal.Decider
	r.door = &Door{M: r.m, Propose: func(_ context.Context, req *Request, env []byte) Proposed {
		d, err := dc.Decide(r.y, proposal.Proposal{Imp: req.Subject, Run: req.Run, Task: req.Task, Body: bytes.NewReader(env),
			Org: func() (*config.Org, error) { return r.org, nil }})
		p := Proposed{Verdict: d.Verdict.String(), Reason: d.Reason, Err: err}
		if d.Verdict == proposal.Refused {
			p.Refusal = d.Refusal.String()
		}
		if d.Gate != nil {
			p.Gate = d.Gate.ID
		}
		return p
	}}
	t.Cleanup(r.m.Close)
	return r
}

func (r *rig) post(t *testing.T, subject string, v int, body string) *Reply {
	t.Helper()
	return r.door.Serve(context.Background(), &Request{Subject: subject, Path: "/t", Method: http.MethodPost, Body: []byte(body),
		Verdict: v, Rule: "r1", Reason: `rule "r1" says so`})
}

// result is the text of a tools/call reply.
func result(t *testing.T, reply *Reply) string {
	t.Helper()
	var m struct {
		ID     json.RawMessage `json:"id"`
		Result struct {
			Content []struct{ Text string } `json:"content"`
		} `json:"result"`
		Error *struct {
			Code    int    `json:"code"`
			Message string `json:"message"`
		} `json:"error"`
	}
	if err := json.Unmarshal(reply.Body, &m); err != nil || m.Error != nil || len(m.Result.Content) != 1 {
		t.Fatalf("reply %d %s: %v", reply.Status, reply.Body, err)
	}
	return m.Result.Content[0].Text
}

func rpcErr(t *testing.T, reply *Reply) (int, string) {
	t.Helper()
	var m struct {
		Error struct {
			Code    int    `json:"code"`
			Message string `json:"message"`
		} `json:"error"`
	}
	if err := json.Unmarshal(reply.Body, &m); err != nil || m.Error.Code == 0 {
		t.Fatalf("want a JSON-RPC error, got %d %s", reply.Status, reply.Body)
	}
	return m.Error.Code, m.Error.Message
}

func (r *rig) seenText(t *testing.T) string {
	t.Helper()
	b, _ := os.ReadFile(r.seen)
	return string(b)
}

// waitState waits, on the manager's change notices, until a state
// of server t for imp satisfies ok.
func (r *rig) waitState(t *testing.T, imp string, ok func(State) bool) State {
	t.Helper()
	timeout := time.After(20 * time.Second)
	for {
		ch := r.m.Changed()
		for _, st := range r.m.States() {
			if st.Imp == imp && ok(st) {
				return st
			}
		}
		select {
		case <-ch:
		case <-timeout:
			t.Fatalf("state never came: %+v", r.m.States())
		}
	}
}

func TestDoorBridges(t *testing.T) {
	r := newRig(t, "")
	init := r.post(t, "yuko", Allowed, `{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"c","version":"1"}}}`)
	if init.Status != 200 || !strings.Contains(string(init.Body), `"serverInfo":{"name":"test"`) || !strings.Contains(string(init.Body), `"id":0`) {
		t.Fatalf("initialize: %d %s", init.Status, init.Body)
	}
	if n := r.post(t, "yuko", Allowed, `{"jsonrpc":"2.0","method":"notifications/initialized"}`); n.Status != http.StatusAccepted || len(n.Body) != 0 {
		t.Fatalf("notification: %d %s", n.Status, n.Body)
	}
	reply := r.post(t, "yuko", Allowed, `{"jsonrpc":"2.0","id":"abc","method":"tools/call","params":{"name":"echo","arguments":{"text":"hi"}}}`)
	if got := result(t, reply); got != "hi" || !strings.Contains(string(reply.Body), `"id":"abc"`) {
		t.Fatalf("echo: %q in %s", got, reply.Body)
	}
	batch := r.post(t, "yuko", Allowed, `[{"jsonrpc":"2.0","id":1,"method":"tools/list"},{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"echo","arguments":{"text":"two"}}}]`)
	var arr []map[string]json.RawMessage
	if err := json.Unmarshal(batch.Body, &arr); err != nil || len(arr) != 2 || string(arr[0]["id"]) != "1" || string(arr[1]["id"]) != "2" || !strings.Contains(string(arr[1]["result"]), "two") {
		t.Fatalf("batch: %s", batch.Body)
	}
	// The door initialized the process once, itself; the client's
	// initialize and notification were answered without it.
	if n := strings.Count(r.seenText(t), `"method":"initialize"`); n != 1 {
		t.Fatalf("server saw %d initialize, want 1:\n%s", n, r.seenText(t))
	}
	if get := r.door.Serve(context.Background(), &Request{Subject: "yuko", Path: "/t", Method: http.MethodGet}); get.Status != http.StatusMethodNotAllowed {
		t.Fatalf("GET: %d", get.Status)
	}
}

func TestDoorRefuses(t *testing.T) {
	r := newRig(t, "")
	call := `{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"echo","arguments":{"text":"denied-call"}}}`
	code, msg := rpcErr(t, r.post(t, "yuko", Denied, call))
	if code != CodeDenied || !strings.Contains(msg, `rule "r1" says so`) {
		t.Fatalf("denied: %d %s", code, msg)
	}
	code, msg = rpcErr(t, r.post(t, "mallory", Allowed, call))
	if code != CodeDenied || !strings.Contains(msg, `imp "mallory" may not call [mcp.t]`) {
		t.Fatalf("other imp: %d %s", code, msg)
	}
	reply := r.door.Serve(context.Background(), &Request{Subject: "yuko", Path: "/nope", Method: http.MethodPost, Body: []byte(call), Verdict: Allowed})
	if code, msg = rpcErr(t, reply); code != CodeDenied || !strings.Contains(msg, "no MCP server at mcp.impyard/nope") {
		t.Fatalf("unknown server: %d %s", code, msg)
	}
	if st := r.m.States(); len(st) != 0 || r.seenText(t) != "" {
		t.Fatalf("a refused call started a server: %+v %q", st, r.seenText(t))
	}
}

func TestDoorGates(t *testing.T) {
	r := newRig(t, "\n[budget.yuko]\ngates_per_run = 1")
	reply := r.door.Serve(context.Background(), &Request{Subject: "yuko", Run: "r-0000000000000001", Path: "/t", Method: http.MethodPost, Verdict: Gated, Rule: "r1",
		Body: []byte(`{"jsonrpc":"2.0","id":9,"method":"tools/call","params":{"name":"echo","arguments":{"text":"later"}}}`)})
	code, msg := rpcErr(t, reply)
	if code != CodePending || !strings.HasPrefix(msg, "pending approval g-") {
		t.Fatalf("gated: %d %s", code, msg)
	}
	gid := strings.TrimSuffix(strings.Fields(msg)[2], ":")
	g, err := gate.Get(r.y, gid)
	if err != nil {
		t.Fatal(err)
	}
	var p Payload
	if err := json.Unmarshal(g.Payload, &p); err != nil || p.Server != "t" || p.Tool != "echo" || string(compact(p.Arguments)) != `{"text":"later"}` || g.Intent != "mcp.t" || g.Imp != "yuko" {
		t.Fatalf("gate: %+v %s %v", p, g.Payload, err)
	}
	if g.Run != "r-0000000000000001" {
		t.Fatalf("gate %s is run %q's, want r-0000000000000001", g.ID, g.Run)
	}
	// The run's second gate is past its gates_per_run: refused, filed
	// nowhere, as a second proposal of the run would be.
	reply = r.door.Serve(context.Background(), &Request{Subject: "yuko", Run: "r-0000000000000001", Path: "/t", Method: http.MethodPost, Verdict: Gated, Rule: "r1",
		Body: []byte(`{"jsonrpc":"2.0","id":10,"method":"tools/call","params":{"name":"echo","arguments":{"text":"again"}}}`)})
	if code, msg := rpcErr(t, reply); code != CodeDenied || !strings.Contains(msg, "gates_per_run") {
		t.Fatalf("gate past the cap: %d %s", code, msg)
	}
	if gs, _ := gate.List(r.y, gate.Filter{All: true}); len(gs) != 1 {
		t.Fatalf("%d gates filed, want 1", len(gs))
	}
	// A paused imp's gated call is refused too: no gate waits to
	// surprise the owner when it resumes.
	if _, err := pause.Pause(r.y, pause.Change{Imps: []string{"yuko"}, By: "alice", Reason: "enough"}); err != nil {
		t.Fatal(err)
	}
	reply = r.post(t, "yuko", Gated, `{"jsonrpc":"2.0","id":11,"method":"tools/call","params":{"name":"echo","arguments":{"text":"paused"}}}`)
	if code, msg := rpcErr(t, reply); code != CodeDenied || !strings.Contains(msg, "paused") {
		t.Fatalf("paused: %d %s", code, msg)
	}
	if r.seenText(t) != "" {
		t.Fatalf("a gated call reached the server: %s", r.seenText(t))
	}
}

// events reads a stream's server-sent events to its end.
func events(t *testing.T, reply *Reply) ([]string, string) {
	t.Helper()
	if reply.Stream == nil || reply.Header.Get("Content-Type") != "text/event-stream" {
		t.Fatalf("want a stream, got %d %s", reply.Status, reply.Body)
	}
	b, err := io.ReadAll(reply.Stream)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, ev := range strings.Split(strings.TrimSuffix(string(b), "\n\n"), "\n\n") {
		data, ok := strings.CutPrefix(ev, "event: message\ndata: ")
		if !ok || strings.Contains(data, "\n") {
			t.Fatalf("not one message event: %q", ev)
		}
		out = append(out, data)
	}
	return out, reply.Stream.End()
}

// A client that takes a stream gets what the server says of its call
// while it runs, under its own progress token, its secrets redacted,
// and then the response.
func TestDoorStreams(t *testing.T) {
	r := newRig(t, "")
	reply := r.door.Serve(context.Background(), &Request{Subject: "yuko", Path: "/t", Method: http.MethodPost, Verdict: Allowed, Accept: "application/json, text/event-stream",
		Body: []byte(`{"jsonrpc":"2.0","id":"c1","method":"tools/call","params":{"name":"progress","_meta":{"progressToken":"mine"}}}`)})
	evs, failed := events(t, reply)
	if failed != "" || len(evs) != 4 {
		t.Fatalf("want 4 events, got %d (%s):\n%s", len(evs), failed, strings.Join(evs, "\n"))
	}
	for i := range 2 {
		if !strings.Contains(evs[i], `"progressToken":"mine"`) || !strings.Contains(evs[i], fmt.Sprintf(`"progress":%d`, i+1)) {
			t.Errorf("event %d: %s", i, evs[i])
		}
	}
	if !strings.Contains(evs[2], `"method":"notifications/message"`) || !strings.Contains(evs[2], "working with [redacted]") {
		t.Errorf("log event: %s", evs[2])
	}
	if !strings.Contains(evs[3], `"id":"c1"`) || !strings.Contains(evs[3], `"text":"done"`) {
		t.Errorf("response: %s", evs[3])
	}
	// The server saw the door's token, never the client's.
	if seen := r.seenText(t); strings.Contains(seen, `"mine"`) || !strings.Contains(seen, `"progressToken":"impgw-p-`) {
		t.Errorf("server saw:\n%s", seen)
	}
}

// On a shared server, progress reaches only the call it is for, and a
// log line, which names no call, reaches no imp's stream.
func TestDoorStreamsSharedOwnOnly(t *testing.T) {
	r := newRig(t, "shared = true")
	ctx := context.Background()
	sleep := r.door.Serve(ctx, &Request{Subject: "ada", Path: "/t", Method: http.MethodPost, Verdict: Allowed, Accept: "text/event-stream",
		Body: []byte(`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"sleep","_meta":{"progressToken":"mine"}}}`)})
	waitSeen(t, r, `"name":"sleep"`)
	evs, _ := events(t, r.door.Serve(ctx, &Request{Subject: "yuko", Path: "/t", Method: http.MethodPost, Verdict: Allowed, Accept: "text/event-stream",
		Body: []byte(`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"progress","_meta":{"progressToken":"mine"}}}`)}))
	if len(evs) != 3 || strings.Contains(strings.Join(evs, ""), "notifications/message") {
		t.Fatalf("yuko's stream: %s", strings.Join(evs, "\n"))
	}
	// ada's call is still waiting, and got nothing of yuko's.
	r.post(t, "ada", Allowed, `{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":1}}`)
	evs, _ = events(t, sleep)
	if len(evs) != 1 || !strings.Contains(evs[0], fmt.Sprint(CodeCancelled)) {
		t.Fatalf("ada's stream: %s", strings.Join(evs, "\n"))
	}
}

func compact(b []byte) []byte {
	var v any
	json.Unmarshal(b, &v)
	out, _ := json.Marshal(v)
	return out
}

func TestCrashRestart(t *testing.T) {
	r := newRig(t, "")
	call := func(tool string) *Reply {
		return r.post(t, "yuko", Allowed, `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"`+tool+`","arguments":{"text":"x"}}}`)
	}
	first := result(t, call("pid"))
	code, msg := rpcErr(t, call("die"))
	if code != CodeServer || !strings.Contains(msg, "exited") {
		t.Fatalf("crash: %d %s", code, msg)
	}
	// Restarted on its own, after its backoff, before anyone calls.
	st := r.waitState(t, "yuko", func(s State) bool { return s.State == StateRunning && s.Restarts == 1 })
	if !strings.Contains(st.LastError, "exit status 3") {
		t.Fatalf("state: %+v", st)
	}
	if second := result(t, call("pid")); second == first {
		t.Fatalf("the same process %s answered after the crash", second)
	}
}

// A call that cannot be written to the process, which has stopped
// reading (as one that died before its death is noticed), is not lost:
// nothing reached a server, so it is made on a process started anew.
func TestUnwritableRestarts(t *testing.T) {
	r := newRig(t, "")
	call := func(tool string) *Reply {
		return r.post(t, "yuko", Allowed, `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"`+tool+`","arguments":{"text":"x"}}}`)
	}
	first := result(t, call("pid"))
	if rep := call("deaf"); rep.Status != http.StatusOK || bytes.Contains(rep.Body, []byte(`"error"`)) {
		t.Fatalf("deaf: %d %s", rep.Status, rep.Body)
	}
	if second := result(t, call("pid")); second == first {
		t.Fatalf("the same process %s answered after it stopped reading", second)
	}
}

func TestIdleStop(t *testing.T) {
	r := newRig(t, `idle = "50ms"`)
	result(t, r.post(t, "yuko", Allowed, `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"pid"}}`))
	st := r.waitState(t, "yuko", func(s State) bool { return s.State == StateStopped })
	if st.Restarts != 0 {
		t.Fatalf("an idle stop counted as a crash: %+v", st)
	}
	// And it starts again on the next use.
	result(t, r.post(t, "yuko", Allowed, `{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"pid"}}`))
}

func TestOneProcessPerImp(t *testing.T) {
	for _, shared := range []bool{false, true} {
		t.Run(fmt.Sprint("shared=", shared), func(t *testing.T) {
			r := newRig(t, fmt.Sprintf("shared = %v", shared))
			pid := `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"pid"}}`
			a, b := result(t, r.post(t, "yuko", Allowed, pid)), result(t, r.post(t, "ada", Allowed, pid))
			if (a == b) != shared {
				t.Fatalf("yuko's process %s, ada's %s, shared %v", a, b, shared)
			}
		})
	}
}

func TestCancelNamesOwnCallsOnly(t *testing.T) {
	r := newRig(t, "shared = true")
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan *Reply)
	go func() {
		done <- r.door.Serve(ctx, &Request{Subject: "yuko", Path: "/t", Method: http.MethodPost, Verdict: Allowed,
			Body: []byte(`{"jsonrpc":"2.0","id":5,"method":"tools/call","params":{"name":"sleep"}}`)})
	}()
	waitSeen(t, r, `"name":"sleep"`)
	// Another imp names yuko's request id: nothing reaches the server.
	r.post(t, "ada", Allowed, `{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":5}}`)
	// yuko's own cancellation goes through, under the door's id.
	r.post(t, "yuko", Allowed, `{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":5,"reason":"changed my mind"}}`)
	waitSeen(t, r, "changed my mind")
	if n := strings.Count(r.seenText(t), "notifications/cancelled"); n != 1 {
		t.Fatalf("server saw %d cancellations, want yuko's alone:\n%s", n, r.seenText(t))
	}
	if !strings.Contains(r.seenText(t), `"requestId":"impgw-`) {
		t.Fatalf("the cancellation does not name the door's id:\n%s", r.seenText(t))
	}
	// The cancelled call's POST is answered at once: the server answers
	// a cancelled request with nothing.
	select {
	case reply := <-done:
		if code, _ := rpcErr(t, reply); code != CodeCancelled {
			t.Fatalf("cancelled call answered %d", code)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("the cancelled call's POST is still open")
	}
	// A caller that goes away cancels its call too, and gets no hang.
	go func() {
		done <- r.door.Serve(ctx, &Request{Subject: "yuko", Path: "/t", Method: http.MethodPost, Verdict: Allowed,
			Body: []byte(`{"jsonrpc":"2.0","id":6,"method":"tools/call","params":{"name":"sleep"}}`)})
	}()
	waitSeen(t, r, `"id":"impgw-3"`)
	cancel()
	<-done
	waitSeen(t, r, "the caller went away")
}

func waitSeen(t *testing.T, r *rig, want string) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !strings.Contains(r.seenText(t), want) {
		if time.Now().After(deadline) {
			t.Fatalf("server never saw %q:\n%s", want, r.seenText(t))
		}
		// The server is another process, writing a file: there is no
		// event of ours to wait on.
		time.Sleep(5 * time.Millisecond)
	}
}

func TestSecretsStayOut(t *testing.T) {
	r := newRig(t, "")
	reply := r.post(t, "yuko", Allowed, `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"env","arguments":{"name":"TOKEN"}}}`)
	if got := result(t, reply); got != "[redacted]" {
		t.Fatalf("the server's TOKEN came back as %q", got)
	}
	// Nothing else of the gateway's environment is given.
	t.Setenv("IMPYARD_SOMETHING", "gateway-only")
	r.m.Close()
	reply = r.post(t, "yuko", Allowed, `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"env","arguments":{"name":"IMPYARD_SOMETHING"}}}`)
	if got := result(t, reply); got != "" {
		t.Fatalf("the server got the gateway's environment: %q", got)
	}
}

func TestSecretRefused(t *testing.T) {
	for _, tc := range []struct{ name, content, want string }{
		{"missing", "", "no such file"},
		{"short", "abc\n", "shorter than 8 bytes"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := newRig(t, "")
			p := filepath.Join(r.home, "secrets", "tok")
			os.Remove(p)
			if tc.content != "" {
				os.WriteFile(p, []byte(tc.content), 0o600)
			}
			code, msg := rpcErr(t, r.post(t, "yuko", Allowed, `{"jsonrpc":"2.0","id":1,"method":"tools/list"}`))
			if code != CodeServer || !strings.Contains(msg, tc.want) || !strings.Contains(msg, "env TOKEN") || strings.Contains(msg, "abc") {
				t.Fatalf("%d %s", code, msg)
			}
			if r.seenText(t) != "" {
				t.Fatal("a server started without its secret")
			}
			_, _, err := Secrets(r.home, "t", r.org.MCP["t"])
			if !errors.Is(err, ErrSecret) {
				t.Fatalf("Secrets: %v", err)
			}
		})
	}
}

// A boxed server with no containerd to run it is refused, never run on
// the host in its place.
func TestBoxedWithoutContainerd(t *testing.T) {
	seen := filepath.Join(t.TempDir(), "ran")
	s := &config.MCPServer{Command: []string{"touch", seen}, Isolation: config.IsolationBox, Image: "i"}
	if _, err := launch(context.Background(), t.TempDir(), "b", "yuko", s, nil, "", nil); !errors.Is(err, ErrNoBoxes) {
		t.Fatalf("launch with no boxes: %v", err)
	}
	boxes := &Boxes{Address: filepath.Join(t.TempDir(), "containerd.sock"), Home: t.TempDir()}
	if _, err := launch(context.Background(), t.TempDir(), "b", "yuko", s, boxes, "", nil); !errors.Is(err, box.ErrUnreachable) {
		t.Fatalf("launch with containerd down: %v", err)
	}
	if _, err := os.Stat(seen); err == nil {
		t.Fatal("the boxed server ran on the host")
	}
}

// A boxed server's secret is one line of its stdin: one holding a line
// break is refused by name, its content never shown.
func TestBoxedSecretOneLine(t *testing.T) {
	h := t.TempDir()
	os.MkdirAll(filepath.Join(h, "secrets"), 0o700)
	os.WriteFile(filepath.Join(h, "secrets", "k"), []byte("first-line-abc\nsecond-line\n"), 0o600)
	s := &config.MCPServer{Command: []string{"x"}, Isolation: config.IsolationBox, Image: "i", Env: map[string]string{"KEY": "k"}}
	_, _, err := Secrets(h, "b", s)
	if !errors.Is(err, ErrSecret) || !strings.Contains(err.Error(), "env KEY") || strings.Contains(err.Error(), "abc") {
		t.Fatalf("Secrets: %v", err)
	}
	s.Isolation = config.IsolationHost
	if env, _, err := Secrets(h, "b", s); err != nil || len(env) != 1 {
		t.Fatalf("a host server takes it whole: %v %v", env, err)
	}
}

// The preamble takes one line of stdin per secret into the environment,
// then runs the command on the rest of stdin, untouched.
func TestPreamble(t *testing.T) {
	cmd := exec.Command("/bin/sh", "-c", preamble([]string{"A_TOKEN", "B"}), "mcp-t", "/bin/sh", "-c", `printf "%s|%s|%s\\n" "$A_TOKEN" "$B" "$(cat)"`)
	cmd.Stdin = strings.NewReader("sec ret $HOME\\n\nb-value\n{\"jsonrpc\":\"2.0\"}\n")
	cmd.Env = []string{"PATH=/usr/bin:/bin"}
	out, err := cmd.Output()
	if want := `sec ret $HOME\n|b-value|{"jsonrpc":"2.0"}` + "\n"; err != nil || string(out) != want {
		t.Fatalf("got %q %v, want %q", out, err, want)
	}
	// Stdin ending before the secrets do: the server does not start.
	cmd = exec.Command("/bin/sh", "-c", preamble([]string{"A_TOKEN"}), "mcp-t", "/bin/echo", "started")
	cmd.Stdin = strings.NewReader("")
	if out, err := cmd.Output(); len(out) != 0 || err == nil {
		t.Fatalf("with no secret on stdin: %q %v", out, err)
	}
}

func TestRedact(t *testing.T) {
	got := string(Redact([]byte(`{"a":"x s3cr\"et y","b":"s3cr"et"}`), []string{`s3cr"et`}))
	if want := `{"a":"x [redacted] y","b":"[redacted]"}`; got != want {
		t.Fatalf("got %s want %s", got, want)
	}
}
