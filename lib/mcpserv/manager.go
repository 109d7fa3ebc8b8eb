// Package mcpserv runs the stdio MCP servers of org.toml's [mcp.<name>]
// on the trusted side and bridges them to the gateway's door, where boxes
// reach them as Streamable HTTP MCP at https://mcp.impyard/<name>.
//
// What it guarantees:
//   - A server's credentials (env, from IMPYARD_HOME/secrets) are given
//     to its process alone, and every secret value is replaced by
//     [redacted] in whatever the server answers, before it reaches a
//     box, a gate or a mailbox.
//   - One process serves one imp unless the entry says shared = true,
//     and a cancellation names only its own imp's calls, so no call of
//     one imp reaches another's session.
//   - The door initializes each process itself, so a process restarted
//     after it died serves the next call without the client knowing.
//   - A process that dies fails every call it had at once (the caller
//     gets a JSON-RPC error, never a hang) and is started again after a
//     backoff that doubles, up to MaxBackoff; one idle for its entry's
//     idle is stopped.
//   - A boxed server (isolation = "box", the default) runs in a box of
//     its own with an imp's hardening, whose network reaches only the
//     gateway, where what it sends is judged as subject mcp:<name>; its
//     secrets reach it through its stdin pipe, in no file. It is never
//     run on the host in its place. Its box is deleted, namespace and
//     all, when it stops; a gateway killed before it could stop them
//     leaves them to Boxes.Sweep at the next start.
package mcpserv

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"slices"
	"sync"
	"time"

	"github.com/impyard/impyard/lib/config"
	"github.com/impyard/impyard/lib/store"
	"github.com/impyard/impyard/lib/yard"
)

// Server states, as impsup status shows them.
const (
	StateStarting = "starting"
	StateRunning  = "running"
	StateBackoff  = "backoff" // died; restarted when its backoff ends
	StateStopped  = "stopped" // stopped idle, or by the gateway's end
)

// MaxBackoff caps the wait before a dead server is started again.
const MaxBackoff = 30 * time.Second

// StatusFile is where the gateway keeps its servers' states, under the
// yard, for impsup status and doctor.
var StatusFile = []string{"mcp", "servers.json"}

// Manager runs the servers of one gateway.
type Manager struct {
	Yard *yard.Yard
	Home string
	// Org is org.toml as the gateway acts on it.
	Org func() (*config.Org, error)
	// Backoff is the first restart delay; 0 means 500ms.
	Backoff time.Duration
	// Stderr receives the servers' own logs; nil discards them.
	Stderr io.Writer
	Logf   func(format string, a ...any)
	// Boxes runs the boxed servers (isolation = "box"); nil refuses
	// them with ErrNoBoxes.
	Boxes *Boxes

	mu      sync.Mutex
	inst    map[key]*instance
	changed chan struct{}  // closed and replaced on every state change
	writes  sync.WaitGroup // StatusFile writes under way; Close waits for them
}

type key struct{ name, imp string } // imp is "" for a shared server

// State is one server process's standing, in StatusFile.
type State struct {
	Server    string    `json:"server"`
	Imp       string    `json:"imp,omitempty"` // "" for a shared server
	Isolation string    `json:"isolation"`
	State     string    `json:"state"`
	PID       int       `json:"pid,omitempty"`
	Restarts  int       `json:"restarts"`
	LastError string    `json:"last_error,omitempty"`
	Since     time.Time `json:"since"`
}

// Status is StatusFile.
type Status struct {
	Schema  string    `json:"schema"`
	Updated time.Time `json:"updated"`
	Servers []State   `json:"servers"`
}

type instance struct {
	m    *Manager
	k    key
	spec *config.MCPServer

	mu       sync.Mutex
	p        *proc
	starting chan struct{} // non-nil while a start is under way
	st       State
	protocol string
	delay    time.Duration
	retry    *time.Timer
	idle     *time.Timer
	active   int
	// inflight maps a caller's request id to the door's, per subject.
	inflight map[string]string
}

func (m *Manager) logf(format string, a ...any) {
	if m.Logf != nil {
		m.Logf(format, a...)
	}
}

// instance returns the process slot of (name, imp), made on first use.
func (m *Manager) instance(name, imp string, spec *config.MCPServer) *instance {
	k := key{name, imp}
	if spec.Shared {
		k.imp = ""
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.inst == nil {
		m.inst = map[key]*instance{}
	}
	in := m.inst[k]
	if in == nil {
		in = &instance{m: m, k: k, spec: spec, inflight: map[string]string{},
			st: State{Server: name, Imp: k.imp, Isolation: spec.Isolation, State: StateStopped, Since: time.Now()}}
		m.inst[k] = in
	}
	// The entry as org.toml says it now: the next start uses it.
	in.mu.Lock()
	in.spec = spec
	in.mu.Unlock()
	return in
}

// Eager starts the servers whose entries say start = "eager": one
// process for a shared server, one per listed imp otherwise.
func (m *Manager) Eager(ctx context.Context, org *config.Org) {
	for name, s := range org.MCP {
		if s.Start != config.StartEager {
			continue
		}
		imps := s.Imps
		if s.Shared {
			imps = imps[:min(len(imps), 1)]
		}
		for _, imp := range imps {
			if _, err := m.instance(name, imp, s).get(ctx); err != nil {
				m.logf("error: [mcp.%s] eager start: %v", name, err)
			}
		}
	}
}

// get returns the running process, starting it (or waiting for a start
// under way, or for the backoff of a dead one) first.
func (in *instance) get(ctx context.Context) (*proc, error) {
	for {
		in.mu.Lock()
		if in.p != nil && in.p.alive() {
			p := in.p
			in.mu.Unlock()
			return p, nil
		}
		if w := in.starting; w != nil {
			in.mu.Unlock()
			select {
			case <-w:
				continue
			case <-ctx.Done():
				return nil, ctx.Err()
			}
		}
		if in.st.State == StateBackoff && in.retry != nil {
			// The restart is due soon: start it now rather than make
			// the caller wait out the timer it would start it on.
			in.retry.Stop()
			in.retry = nil
		}
		w := make(chan struct{})
		in.starting = w
		spec, protocol := in.spec, in.protocol
		in.set(StateStarting, 0, "")
		in.mu.Unlock()

		stderr := in.m.Stderr
		if stderr == nil {
			stderr = io.Discard
		}
		p, err := launch(ctx, in.m.Home, in.k.name, in.k.imp, spec, in.m.Boxes, protocol, stderr)

		in.mu.Lock()
		in.starting = nil
		close(w)
		if err != nil {
			in.st.Restarts++
			in.backoff(err)
			in.mu.Unlock()
			return nil, err
		}
		in.p = p
		in.set(StateRunning, p.pid, "")
		in.armIdle()
		in.mu.Unlock()
		go in.watch(p)
		return p, nil
	}
}

// watch restarts p's slot after its process dies, unless it was stopped.
func (in *instance) watch(p *proc) {
	<-p.done
	in.mu.Lock()
	defer in.mu.Unlock()
	if in.p != p {
		return
	}
	in.p = nil
	if in.st.State == StateStopped {
		return
	}
	in.st.Restarts++
	in.m.logf("%v", p.err)
	if time.Since(p.started) > 2*MaxBackoff {
		// It ran well for a while: this death starts a fresh count.
		in.delay = 0
	}
	in.backoff(p.err)
}

// backoff schedules the next start; in.mu is held.
func (in *instance) backoff(err error) {
	first := in.m.Backoff
	if first <= 0 {
		first = 500 * time.Millisecond
	}
	switch {
	case in.delay == 0:
		in.delay = first
	default:
		in.delay = min(2*in.delay, MaxBackoff)
	}
	in.set(StateBackoff, 0, err.Error())
	if in.retry != nil {
		in.retry.Stop()
	}
	in.retry = time.AfterFunc(in.delay, func() {
		in.mu.Lock()
		due := in.st.State == StateBackoff
		in.retry = nil
		in.mu.Unlock()
		if due {
			if _, err := in.get(context.Background()); err != nil {
				in.m.logf("error: [mcp.%s] restart: %v", in.k.name, err)
			}
		}
	})
}

// armIdle (re)starts the idle timer; in.mu is held.
func (in *instance) armIdle() {
	if in.idle != nil {
		in.idle.Stop()
	}
	d := in.spec.Idle.Duration
	if d <= 0 {
		d = config.DefaultMCPIdle
	}
	p := in.p
	in.idle = time.AfterFunc(d, func() {
		in.mu.Lock()
		if in.p != p || in.active > 0 {
			in.mu.Unlock()
			return
		}
		// Let go first: a call from now on starts a new process rather
		// than write to this one as it stops.
		in.p = nil
		in.set(StateStopped, 0, "")
		in.mu.Unlock()
		p.stop(5 * time.Second)
	})
}

// set records a state change and publishes it; in.mu is held.
func (in *instance) set(state string, pid int, lastErr string) {
	in.st.State, in.st.PID, in.st.Since = state, pid, time.Now()
	if lastErr != "" {
		in.st.LastError = lastErr
	}
	in.m.publish()
}

// begin and end bracket a call, which holds off the idle stop.
func (in *instance) begin() {
	in.mu.Lock()
	in.active++
	in.mu.Unlock()
}

func (in *instance) end() {
	in.mu.Lock()
	in.active--
	if in.active == 0 && in.p != nil {
		in.armIdle()
	}
	in.mu.Unlock()
}

// States lists every server process the manager knows, sorted.
func (m *Manager) States() []State {
	m.mu.Lock()
	ins := make([]*instance, 0, len(m.inst))
	for _, in := range m.inst {
		ins = append(ins, in)
	}
	m.mu.Unlock()
	out := make([]State, 0, len(ins))
	for _, in := range ins {
		in.mu.Lock()
		out = append(out, in.st)
		in.mu.Unlock()
	}
	slices.SortFunc(out, func(a, b State) int {
		if a.Server != b.Server {
			return cmpString(a.Server, b.Server)
		}
		return cmpString(a.Imp, b.Imp)
	})
	return out
}

func cmpString(a, b string) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// Changed returns a channel closed at the next state change, to wait on
// one without polling.
func (m *Manager) Changed() <-chan struct{} {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.changed == nil {
		m.changed = make(chan struct{})
	}
	return m.changed
}

// publish wakes the waiters of Changed and writes StatusFile in the
// background: a state change never waits on the disk.
func (m *Manager) publish() {
	m.mu.Lock()
	if m.changed != nil {
		close(m.changed)
		m.changed = nil
	}
	m.mu.Unlock()
	m.writes.Go(m.writeStatus)
}

var statusMu sync.Mutex

func (m *Manager) writeStatus() {
	if m.Yard == nil {
		return
	}
	statusMu.Lock()
	defer statusMu.Unlock()
	st := Status{Schema: store.Schema("mcp-servers", 1), Updated: time.Now().UTC(), Servers: m.States()}
	b, err := store.Encode(st)
	if err == nil {
		var d *store.Dir
		if d, err = m.Yard.Dir(StatusFile[0]); err == nil {
			err = d.Update(func(tx *store.Tx) error { return tx.Write(StatusFile[1], b) })
		}
	}
	if err != nil {
		m.logf("error: writing %s: %v", m.Yard.Path(StatusFile...), err)
	}
}

// ReadStatus reads StatusFile; a yard whose gateway never ran a server
// has none, which is no error: Status is then empty.
func ReadStatus(y *yard.Yard) (*Status, error) {
	p := y.Path(StatusFile...)
	b, err := store.ReadFile(p)
	if store.IsNotExist(err) {
		return &Status{}, nil
	}
	if err != nil {
		return nil, err
	}
	var st Status
	if err := store.Decode(p, b, "mcp-servers", 1, &st); err != nil {
		return nil, err
	}
	return &st, nil
}

// Close stops every server process, deleting the boxes of boxed ones.
func (m *Manager) Close() {
	m.mu.Lock()
	ins := make([]*instance, 0, len(m.inst))
	for _, in := range m.inst {
		ins = append(ins, in)
	}
	m.mu.Unlock()
	var wg sync.WaitGroup
	for _, in := range ins {
		in.mu.Lock()
		p := in.p
		in.p = nil
		if in.retry != nil {
			in.retry.Stop()
		}
		if in.idle != nil {
			in.idle.Stop()
		}
		in.set(StateStopped, 0, "")
		in.mu.Unlock()
		if p != nil {
			wg.Go(func() { p.stop(5 * time.Second) })
		}
	}
	wg.Wait()
	if m.Boxes != nil {
		m.Boxes.Close()
	}
	m.writes.Wait()
	m.writeStatus()
}

// use takes (name, imp)'s process for one request of subject, starting
// it (asking for protocol if this is its first start); done ends the
// use, which holds off the idle stop until then.
func (m *Manager) use(ctx context.Context, name, subject string, spec *config.MCPServer, protocol string) (in *instance, p *proc, done func(), err error) {
	in = m.instance(name, subject, spec)
	in.begin()
	in.mu.Lock()
	if in.protocol == "" {
		in.protocol = protocol
	}
	in.mu.Unlock()
	if p, err = in.get(ctx); err != nil {
		in.end()
		return nil, nil, nil, err
	}
	return in, p, in.end, nil
}

// call makes one request of (name, imp)'s process as subject, under
// the caller's id callerID (kept so a cancellation can name it). sink,
// when set, takes the notifications the server writes for the call
// while it runs.
func (m *Manager) call(ctx context.Context, name, subject string, spec *config.MCPServer, method string, params json.RawMessage, callerID string, sink func([]byte)) (json.RawMessage, []string, error) {
	resp, secrets, err := m.callOnce(ctx, name, subject, spec, method, params, callerID, sink)
	if errors.Is(err, errUnsent) {
		// The process had died, not yet noticed, when the request was
		// to go: nothing reached a server, so it goes once more, to
		// the process started in its place.
		resp, secrets, err = m.callOnce(ctx, name, subject, spec, method, params, callerID, sink)
	}
	return resp, secrets, err
}

// callOnce is one attempt of call, on the process running or started
// now.
func (m *Manager) callOnce(ctx context.Context, name, subject string, spec *config.MCPServer, method string, params json.RawMessage, callerID string, sink func([]byte)) (json.RawMessage, []string, error) {
	in, p, done, err := m.use(ctx, name, subject, spec, "")
	if err != nil {
		return nil, nil, notStarted{err}
	}
	defer done()
	if sink != nil {
		var unlisten func()
		params, unlisten = p.notes.listen(params, !spec.Shared, sink)
		defer unlisten()
	}
	ik := subject + "\x00" + callerID
	resp, err := p.call(ctx, method, params, func(id string) {
		if callerID != "" {
			in.mu.Lock()
			in.inflight[ik] = id
			in.mu.Unlock()
		}
	})
	if callerID != "" {
		in.mu.Lock()
		delete(in.inflight, ik)
		in.mu.Unlock()
	}
	return resp, p.secrets, err
}

// initialized returns (name, imp)'s InitializeResult, starting it.
func (m *Manager) initialized(ctx context.Context, name, subject string, spec *config.MCPServer, protocol string) (json.RawMessage, []string, error) {
	_, p, done, err := m.use(ctx, name, subject, spec, protocol)
	if err != nil {
		return nil, nil, err
	}
	done()
	return p.init, p.secrets, nil
}

// cancelled passes a caller's cancellation on, if the call it names is
// subject's and still under way.
func (m *Manager) cancelled(name, subject string, spec *config.MCPServer, callerID, reason string) {
	in := m.instance(name, subject, spec)
	in.mu.Lock()
	id, ok := in.inflight[subject+"\x00"+callerID]
	p := in.p
	in.mu.Unlock()
	if ok && p != nil {
		p.cancel(id, reason)
		p.abandon(id)
	}
}

// notify passes a caller's notification on to a running process.
func (m *Manager) notify(name, subject string, spec *config.MCPServer, method string, params json.RawMessage) error {
	in := m.instance(name, subject, spec)
	in.mu.Lock()
	p := in.p
	in.mu.Unlock()
	if p == nil {
		return nil
	}
	return p.notify(method, params)
}
