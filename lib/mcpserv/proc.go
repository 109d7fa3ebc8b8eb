package mcpserv

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/impyard/impyard/lib/config"
	"github.com/impyard/impyard/lib/home"
	"github.com/impyard/impyard/lib/store"
)

// errUnsent: a request was not written to the server, which had ended or
// could not be written to; it cannot have taken effect.
var errUnsent = errors.New("request not sent")

// notStarted is the error of a server that could not be started for a
// request, which so went nowhere; its text is the start's.
type notStarted struct{ error }

func (e notStarted) Unwrap() error { return e.error }

// MaxMessage bounds one JSON-RPC message a server writes: a longer line
// ends the process, which is restarted like any other that dies.
const MaxMessage = 16 << 20

// Errors a call can end in, besides the server's own JSON-RPC errors.
var (
	// ErrExited: the server's process ended before it answered.
	ErrExited = errors.New("MCP server exited")
	// ErrSecret: a secret named in env cannot be read.
	ErrSecret = errors.New("MCP server secret unusable")
)

// MinSecret is the shortest secret a server is given: a shorter one
// could not be told from ordinary text when it is kept out of answers.
const MinSecret = 8

// StartTimeout bounds a server's start, up to its answer to initialize:
// a caller waits no longer for a server that hangs.
const StartTimeout = 30 * time.Second

// DefaultProtocol is the MCP revision the door asks a server for when
// the first client named none.
const DefaultProtocol = "2025-06-18"

// proc is one running server: newline-delimited JSON-RPC on its stdio.
type proc struct {
	name    string
	pid     int // the process's, or the box's first, as the host sees it
	kill    func(grace time.Duration)
	stdin   io.WriteCloser
	secrets []string // values to keep out of everything a server says
	started time.Time

	wmu sync.Mutex // one message at a time on stdin

	mu      sync.Mutex
	next    int64
	waiting map[string]chan json.RawMessage // by the id the door gave
	init    json.RawMessage                 // the server's InitializeResult
	notes   notes                           // the streams of the calls under way

	done chan struct{} // closed once the process is reaped
	err  error         // why it ended; read after done
}

// Secrets reads the values of s's env from IMPYARD_HOME/secrets: the
// error names the variable and the file, never the content.
func Secrets(homeDir, name string, s *config.MCPServer) (env, values []string, err error) {
	for v, file := range s.Env {
		p := home.Dir(homeDir).Secret(file)
		b, err := store.ReadFile(p)
		if err != nil {
			return nil, nil, fmt.Errorf("[mcp.%s] env %s: %w: %s: %w", name, v, ErrSecret, p, err)
		}
		val := strings.TrimRight(string(b), "\r\n")
		if len(val) < MinSecret || strings.ContainsRune(val, 0) {
			return nil, nil, fmt.Errorf("[mcp.%s] env %s: %w: %s is shorter than %d bytes or holds a NUL", name, v, ErrSecret, p, MinSecret)
		}
		if s.Isolation != config.IsolationHost && strings.ContainsAny(val, "\r\n") {
			// A boxed server takes each secret as one line of its stdin.
			return nil, nil, fmt.Errorf("[mcp.%s] env %s: %w: %s holds a line break, which a boxed server's secret may not", name, v, ErrSecret, p)
		}
		env = append(env, v+"="+val)
		values = append(values, val)
	}
	return env, values, nil
}

// baseEnv is what a server gets of the gateway's own environment: enough
// to find its interpreter, nothing that speaks for the gateway.
func baseEnv() []string {
	var env []string
	for _, k := range []string{"PATH", "HOME", "LANG", "TMPDIR"} {
		if v, ok := os.LookupEnv(k); ok {
			env = append(env, k+"="+v)
		}
	}
	return env
}

// running is a server's process as launch gets it from its starter.
type running struct {
	stdin  io.WriteCloser
	stdout io.Reader
	pid    int
	// wait returns once the process has ended and what it held is gone,
	// with why it ended (nil for a clean exit).
	wait func() error
	// kill stops it: SIGTERM, then after grace SIGKILL.
	kill func(grace time.Duration)
}

// launch starts s's process (on the host, or in a box of boxes for
// imp, "" for a shared server) and takes it through initialize, asking
// for protocol. stderr receives what the server logs.
func launch(ctx context.Context, homeDir, name, imp string, s *config.MCPServer, boxes *Boxes, protocol string, stderr io.Writer) (*proc, error) {
	env, secrets, err := Secrets(homeDir, name, s)
	if err != nil {
		return nil, err
	}
	var r *running
	if s.Isolation == config.IsolationHost {
		r, err = startHost(name, s, env, stderr)
	} else {
		r, err = boxes.start(ctx, name, imp, s, env, stderr)
	}
	if err != nil {
		return nil, err
	}
	p := &proc{name: name, pid: r.pid, kill: r.kill, stdin: r.stdin, secrets: secrets, started: time.Now(),
		waiting: map[string]chan json.RawMessage{}, done: make(chan struct{})}
	readDone := make(chan error, 1)
	go func() { readDone <- p.read(r.stdout) }()
	go func() {
		rerr := <-readDone
		werr := r.wait()
		p.mu.Lock()
		switch {
		case werr != nil:
			p.err = fmt.Errorf("[mcp.%s]: %w: %v", name, ErrExited, werr)
		case rerr != nil:
			p.err = fmt.Errorf("[mcp.%s]: %w: %v", name, ErrExited, rerr)
		default:
			p.err = fmt.Errorf("[mcp.%s]: %w", name, ErrExited)
		}
		for id, ch := range p.waiting {
			close(ch)
			delete(p.waiting, id)
		}
		p.mu.Unlock()
		close(p.done)
	}()
	if protocol == "" {
		protocol = DefaultProtocol
	}
	params, _ := json.Marshal(map[string]any{
		"protocolVersion": protocol,
		"capabilities":    map[string]any{},
		"clientInfo":      map[string]any{"name": "impgw", "version": "1"},
	})
	ictx, cancel := context.WithTimeout(ctx, StartTimeout)
	defer cancel()
	resp, err := p.call(ictx, "initialize", params, nil)
	if err == nil {
		var r struct {
			Result json.RawMessage `json:"result"`
			Error  json.RawMessage `json:"error"`
		}
		if err = json.Unmarshal(resp, &r); err == nil && r.Result == nil {
			err = fmt.Errorf("initialize refused: %s", r.Error)
		}
		p.init = r.Result
	}
	if err == nil {
		err = p.notify("notifications/initialized", nil)
	}
	if err != nil {
		p.stop(time.Second)
		return nil, fmt.Errorf("[mcp.%s]: initialize: %w", name, err)
	}
	return p, nil
}

// startHost starts s's command on the host, trusting it fully.
func startHost(name string, s *config.MCPServer, env []string, stderr io.Writer) (*running, error) {
	cmd := exec.Command(s.Command[0], s.Command[1:]...)
	cmd.Env = append(baseEnv(), env...)
	// Its own process group, so that stopping it stops what it spawned
	// (npx runs the server as a child).
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	cmd.Stderr = stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("[mcp.%s]: starting %s: %w", name, s.Command[0], err)
	}
	exited := make(chan struct{})
	pg := -cmd.Process.Pid
	return &running{stdin: stdin, stdout: stdout, pid: cmd.Process.Pid,
		wait: func() error {
			err := cmd.Wait()
			close(exited)
			return err
		},
		kill: func(grace time.Duration) {
			syscall.Kill(pg, syscall.SIGTERM)
			select {
			case <-exited:
			case <-time.After(grace):
			}
			syscall.Kill(pg, syscall.SIGKILL)
		}}, nil
}

// read delivers each response to its caller until stdout ends. A
// server's own requests get an answer here: ping is answered, anything
// else (sampling, roots, elicitation) has no client behind the door.
func (p *proc) read(r io.Reader) error {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), MaxMessage)
	for sc.Scan() {
		line := bytes.TrimSpace(sc.Bytes())
		if len(line) == 0 {
			continue
		}
		var m struct {
			ID     json.RawMessage `json:"id"`
			Method string          `json:"method"`
		}
		if json.Unmarshal(line, &m) != nil {
			continue
		}
		switch {
		case m.Method != "" && m.ID != nil:
			if m.Method == "ping" {
				p.write(append(append([]byte(`{"jsonrpc":"2.0","id":`), m.ID...), `,"result":{}}`...))
			} else {
				p.write(append(append([]byte(`{"jsonrpc":"2.0","id":`), m.ID...), `,"error":{"code":-32601,"message":"the gateway's door answers no server requests"}}`...))
			}
		case m.Method != "":
			p.notes.route(line, p.secrets)
		default:
			p.mu.Lock()
			ch := p.waiting[string(m.ID)]
			delete(p.waiting, string(m.ID))
			p.mu.Unlock()
			if ch != nil {
				ch <- bytes.Clone(line)
			}
		}
	}
	if err := sc.Err(); err != nil {
		p.stdin.Close()
		p.kill(0)
		return err
	}
	return nil
}

func (p *proc) write(msg []byte) error {
	p.wmu.Lock()
	defer p.wmu.Unlock()
	_, err := p.stdin.Write(append(msg, '\n'))
	return err
}

// notify sends a notification.
func (p *proc) notify(method string, params json.RawMessage) error {
	msg := map[string]any{"jsonrpc": "2.0", "method": method}
	if params != nil {
		msg["params"] = params
	}
	b, err := json.Marshal(msg)
	if err != nil {
		return err
	}
	return p.write(b)
}

// call sends a request under an id of the door's and waits for its
// response, returned whole with that id. sent, if set, learns the id
// before the request goes, so that a cancellation can name it. When
// ctx ends first the server is told the request is cancelled.
func (p *proc) call(ctx context.Context, method string, params json.RawMessage, sent func(id string)) (json.RawMessage, error) {
	p.mu.Lock()
	select {
	case <-p.done:
		p.mu.Unlock()
		return nil, fmt.Errorf("%w: %w", errUnsent, p.err)
	default:
	}
	p.next++
	id := strconv.Quote("impgw-" + strconv.FormatInt(p.next, 10))
	ch := make(chan json.RawMessage, 1)
	p.waiting[id] = ch
	p.mu.Unlock()
	if sent != nil {
		sent(id)
	}
	msg := map[string]any{"jsonrpc": "2.0", "id": json.RawMessage(id), "method": method}
	if params != nil {
		msg["params"] = params
	}
	b, err := json.Marshal(msg)
	if err == nil {
		err = p.write(b)
	}
	if err != nil {
		// A server that cannot be written to is of no more use, and
		// is usually one that died and is not yet noticed: it is ended
		// for good, so that the next call starts another.
		p.forget(id)
		p.stdin.Close()
		p.kill(0)
		select {
		case <-p.done:
		case <-ctx.Done():
		}
		return nil, fmt.Errorf("%w: [mcp.%s]: writing to the server: %w", errUnsent, p.name, err)
	}
	select {
	case resp, ok := <-ch:
		if !ok {
			<-p.done
			return nil, p.err
		}
		return resp, nil
	case <-ctx.Done():
		p.forget(id)
		p.cancel(id, "the caller went away")
		return nil, ctx.Err()
	}
}

func (p *proc) forget(id string) {
	p.mu.Lock()
	delete(p.waiting, id)
	p.mu.Unlock()
}

// cancel tells the server a request of the door's is no longer wanted.
func (p *proc) cancel(id, reason string) {
	params, _ := json.Marshal(map[string]any{"requestId": json.RawMessage(id), "reason": reason})
	p.notify("notifications/cancelled", params)
}

// alive says whether the process still runs.
func (p *proc) alive() bool {
	select {
	case <-p.done:
		return false
	default:
		return true
	}
}

// stop ends the process: stdin closed (a stdio server's cue to exit),
// then SIGTERM to its group (or its box), then after grace SIGKILL; it
// returns once the process and its box are gone.
func (p *proc) stop(grace time.Duration) {
	p.stdin.Close()
	p.kill(grace)
	// What it held (a box, its namespace) is gone once done is closed.
	select {
	case <-p.done:
	case <-time.After(grace + cleanupTimeout):
	}
}

// cleanupTimeout bounds the wait, once a server's process is killed, for
// what it held to be removed.
const cleanupTimeout = 30 * time.Second

// Redact replaces every secret value in b, as sent and as JSON escapes
// it, so that what a server echoes of its credentials reaches no box,
// record, gate or mailbox.
func Redact(b []byte, secrets []string) []byte {
	for _, s := range secrets {
		b = bytes.ReplaceAll(b, []byte(s), []byte("[redacted]"))
		q, _ := json.Marshal(s)
		if inner := q[1 : len(q)-1]; !bytes.Equal(inner, []byte(s)) {
			b = bytes.ReplaceAll(b, inner, []byte("[redacted]"))
		}
	}
	return b
}

// Call makes one approved tools/call of name's server for imp with the
// manager's own process (so a boxed server has its network, judged as
// mcp:<name>): how the gateway makes the call of a gate impexec executes.
// The result is the JSON-RPC result object, with every secret of the
// server redacted; a JSON-RPC error is an error. sent reports whether
// the call reached the server, so may have taken effect.
func (m *Manager) Call(ctx context.Context, name, imp string, s *config.MCPServer, tool string, arguments json.RawMessage) (result json.RawMessage, sent bool, err error) {
	params := map[string]any{"name": tool}
	if arguments != nil {
		params["arguments"] = arguments
	}
	b, err := json.Marshal(params)
	if err != nil {
		return nil, false, err
	}
	resp, secrets, err := m.call(ctx, name, imp, s, "tools/call", b, "", nil)
	if err != nil {
		// A server that could not be started, or a request that was
		// never written, cannot have acted.
		var ns notStarted
		return nil, !errors.Is(err, errUnsent) && !errors.As(err, &ns), err
	}
	var r struct {
		Result json.RawMessage `json:"result"`
		Error  json.RawMessage `json:"error"`
	}
	if err := json.Unmarshal(resp, &r); err != nil {
		return nil, true, fmt.Errorf("[mcp.%s]: response to tools/call: %w", name, err)
	}
	if r.Result == nil {
		return nil, true, fmt.Errorf("[mcp.%s]: tools/call %s refused: %s", name, tool, Redact(r.Error, secrets))
	}
	return Redact(r.Result, secrets), true, nil
}

// Check says whether name's server can start here: its program is found
// (on the host), its rootfs is no part of IMPYARD_HOME and its runtime is
// installed (in a box), its secrets are readable. It starts nothing.
func Check(homeDir, name string, s *config.MCPServer) error {
	if s.Isolation != config.IsolationHost {
		if err := checkBoxed(homeDir, name, s); err != nil {
			return err
		}
	} else if _, err := exec.LookPath(s.Command[0]); err != nil {
		return fmt.Errorf("[mcp.%s] command: %w", name, err)
	}
	_, _, err := Secrets(homeDir, name, s)
	return err
}
