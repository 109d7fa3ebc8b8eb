// Package gatewayd is what impgw serve runs: the gateway (lib/gateway)
// with the control API (lib/control) as its origin-form handler, the
// listeners inside each live run's namespace (lib/boxnet) attached to it,
// trust auto-approvals signed with the gateway's key, the bytes and model
// tokens each subject spends metered into the ledger, approved MCP calls
// made for impexec on the owner's socket (lib/mcpcall), model calls of
// proactive work refused when their reservation would pass its budget or
// its imp has its inflight calls out, and the inbound relay
// (lib/inbound) on a listener of its own.
//
// New builds every part from the ones before it: the control API reads
// the policy in force through each request (gateway.PolicyOf) and the
// gateway authenticates box connections with boxnet.Authenticate, so
// neither needs the gateway before it exists, and nothing is assigned
// after construction. A missing part is refused by New, before anything
// listens.
package gatewayd

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/impyard/impyard/lib/approval"
	"github.com/impyard/impyard/lib/box"
	"github.com/impyard/impyard/lib/boxnet"
	"github.com/impyard/impyard/lib/ca"
	"github.com/impyard/impyard/lib/cli"
	"github.com/impyard/impyard/lib/config"
	"github.com/impyard/impyard/lib/control"
	"github.com/impyard/impyard/lib/gateway"
	"github.com/impyard/impyard/lib/inbound"
	"github.com/impyard/impyard/lib/judge"
	"github.com/impyard/impyard/lib/ledger"
	"github.com/impyard/impyard/lib/mcpcall"
	"github.com/impyard/impyard/lib/mcpserv"
	"github.com/impyard/impyard/lib/pause"
	"github.com/impyard/impyard/lib/proposal"
	"github.com/impyard/impyard/lib/run"
	"github.com/impyard/impyard/lib/token"
	"github.com/impyard/impyard/lib/yard"
)

// ErrMissingPart is New's refusal of a Config without one of its
// required parts; the error names which.
var ErrMissingPart = errors.New("missing")

// Config is what a Server is built from. Yard, Home, Minter and Signer
// are required.
type Config struct {
	Yard *yard.Yard
	// Home is IMPYARD_HOME: tokens, secrets for injection.
	Home string
	// Minter mints leaf certificates from the gateway's CA.
	Minter *ca.Minter
	// Signer is the gateway's approval key, which signs trust
	// auto-approvals.
	Signer *approval.Key
	// PolicyPath is the policy; "" is the yard's policies/gateway.json.
	PolicyPath string
	// UpstreamCA is a PEM bundle trusted for upstream TLS besides the
	// system roots; "" for none.
	UpstreamCA string
	Limits     gateway.Limits
	// Log receives diagnostics, one "impgw: ..." line each; nil discards.
	Log io.Writer
	// Ready, if set, is called once by Serve when every listener answers
	// GET /v1/health.
	Ready func()
	// Inbound, if set, is served on InboundListener alone: that
	// listener may face the internet, and serves nothing else.
	Inbound         *inbound.Relay
	InboundListener net.Listener
	// Unsynced leaves decision records unsynced: only for measuring what
	// the sync costs (gateway.Config.Unsynced).
	Unsynced bool
}

// Server is a gateway with its control API and box listeners.
type Server struct {
	yard      *yard.Yard
	gw        *gateway.Gateway
	boxes     *boxnet.Server
	meter     *ledger.Meter
	policy    string
	decisions string
	log       io.Writer
	ready     func()
	inbound   *inbound.Relay
	inboundLn net.Listener
	mcp       *mcpserv.Manager
	org       func() (*config.Org, error)
	home      string
	logf      func(format string, a ...any)
}

// New checks cfg and builds the server's parts.
func New(cfg Config) (*Server, error) {
	var missing []string
	if cfg.Yard == nil {
		missing = append(missing, "the yard (Yard)")
	}
	if cfg.Home == "" {
		missing = append(missing, "IMPYARD_HOME (Home)")
	}
	if cfg.Minter == nil {
		missing = append(missing, "the CA's leaf minter (Minter)")
	}
	if cfg.Signer == nil {
		missing = append(missing, "the gateway's approval key (Signer)")
	}
	if (cfg.Inbound == nil) != (cfg.InboundListener == nil) {
		missing = append(missing, "the inbound relay and its listener (Inbound, InboundListener) together")
	}
	if len(missing) > 0 {
		return nil, fmt.Errorf("gateway server: %w: %s", ErrMissingPart, strings.Join(missing, ", "))
	}
	log := cfg.Log
	if log == nil {
		log = io.Discard
	}
	logf := lineLogger(log)
	y := cfg.Yard
	policy := cfg.PolicyPath
	if policy == "" {
		policy = y.PolicyPath()
	}
	decisions, err := y.DecisionsPath()
	if err != nil {
		return nil, err
	}
	meter := ledger.NewMeter(y, func(err error) { logf("error: metering: %v", err) })
	// The trust ladder acts on org.toml as the gateway last took it: one
	// refused as unsafe leaves the last good one in force, the refusal
	// logged once per change.
	orgs := &config.Keeper{}
	org := func() (*config.Org, error) { return orgs.Load(y, logf) }
	api := &control.API{Yard: y, Home: cfg.Home, Signer: cfg.Signer, Policy: gateway.PolicyOf, RunOf: runOf, Org: org}
	// Boxed MCP servers run in org.toml's containerd as the gateway
	// starts, each served by the gateway inside its namespace.
	var g *gateway.Gateway
	boxes := &mcpserv.Boxes{Home: cfg.Home, Yard: y.Root, Serve: func(ctx context.Context, ln net.Listener, subject string) {
		if err := g.Attach(ctx, boxnet.Service(ln, subject)); err != nil {
			logf("error: serving %s: %v", subject, err)
		}
	}}
	if o, err := org(); err == nil {
		boxes.Address, boxes.Namespace = o.Containerd.Address, o.Containerd.Namespace
	}
	servers := &mcpserv.Manager{Yard: y, Home: cfg.Home, Org: org, Stderr: log, Logf: logf, Boxes: boxes}
	g, err = gateway.New(gateway.Config{
		PolicyPath:    policy,
		ReadPolicy:    y.ReadAuthority,
		UpstreamCA:    cfg.UpstreamCA,
		DecisionsPath: decisions,
		Home:          cfg.Home,
		Root:          y.Root,
		Minter:        cfg.Minter,
		Limits:        cfg.Limits,
		Log:           log,
		Control:       api,
		Door:          door{d: &mcpserv.Door{M: servers, Propose: propose(api)}, home: cfg.Home},
		Meter:         spend(org, meter, logf),
		Admit:         (&admission{y: y, org: org, meter: meter, now: ledger.Now, imps: map[string]*inflight{}}).admit,
		Paused:        paused(y),
		Authenticate:  boxnet.Authenticate(cfg.Home),
		Unsynced:      cfg.Unsynced,
	})
	if err != nil {
		return nil, err
	}
	// The desk (impgate serve, another process) decides gates: a box must
	// not reach it through us either. Its address is org.toml's as the
	// gateway starts, the default when org.toml does not load.
	desk := config.DefaultDeskListen
	if o, err := org(); err == nil {
		desk = o.Desk.DeskListen()
	}
	if a, err := net.ResolveTCPAddr("tcp", desk); err != nil {
		logf("warning: [desk] listen %s: %v; the loop guard does not cover the desk", desk, err)
	} else if a.Port != 0 {
		if err := g.Own(a); err != nil {
			return nil, err
		}
	}
	if cfg.InboundListener != nil {
		// The relay files tasks: a box must not reach it through us.
		if err := g.Own(cfg.InboundListener.Addr()); err != nil {
			return nil, err
		}
	}
	return &Server{
		yard:      y,
		gw:        g,
		boxes:     &boxnet.Server{Yard: y, Gateway: g, Logf: logf},
		meter:     meter,
		policy:    policy,
		decisions: decisions,
		log:       log,
		ready:     cfg.Ready,
		inbound:   cfg.Inbound,
		inboundLn: cfg.InboundListener,
		mcp:       servers,
		org:       org,
		home:      cfg.Home,
		logf:      logf,
	}, nil
}

// door hands the gateway's judged requests to the MCP door and its
// replies back.
type door struct {
	d    *mcpserv.Door
	home string
}

func (a door) Serve(ctx context.Context, r *gateway.DoorRequest) *gateway.DoorReply {
	v := mcpserv.Denied
	run := ""
	switch r.Decision.Verdict {
	case judge.Allow:
		v = mcpserv.Allowed
	case judge.Gate:
		v = mcpserv.Gated
		// The run's caps count the gate: its token names the run.
		if _, sub, err := token.ProxyLookup(a.home, r.Credentials); err == nil && sub.Imp() == r.Subject {
			run = sub.Run
		}
	}
	rep := a.d.Serve(ctx, &mcpserv.Request{Subject: r.Subject, Task: r.Task, Run: run, Path: r.Path, Method: r.Method, Body: r.Body,
		Verdict: v, Rule: r.Decision.Rule, Reason: r.Decision.Reason, Accept: r.Header.Get("Accept")})
	out := &gateway.DoorReply{Status: rep.Status, Header: rep.Header, Body: rep.Body, Error: rep.Error}
	if rep.Stream != nil {
		out.Stream = rep.Stream
	}
	return out
}

// propose decides the door's gated calls with the control API's own
// decider: one count of each run's gates, one trust ladder, one record
// for proposals whichever way they came.
func propose(api *control.API) mcpserv.Proposer {
	return func(ctx context.Context, r *mcpserv.Request, envelope []byte) mcpserv.Proposed {
		d, err := api.Propose(ctx, proposal.Proposal{Imp: r.Subject, Run: r.Run, Task: r.Task, Body: bytes.NewReader(envelope)})
		out := mcpserv.Proposed{Verdict: d.Verdict.String(), Reason: d.Reason, Err: err}
		if d.Verdict == proposal.Refused {
			out.Refusal = d.Refusal.String()
		}
		if d.Gate != nil {
			out.Gate = d.Gate.ID
		}
		return out
	}
}

// lineLogger writes one "impgw: " line per call to w, Printable: a
// line quotes model names an upstream chose.
func lineLogger(w io.Writer) func(format string, a ...any) {
	return func(format string, a ...any) {
		fmt.Fprintf(w, "impgw: %s\n", cli.Printable(fmt.Sprintf(format, a...)))
	}
}

// spend debits what an exchange cost: its bytes, and the tokens of a
// metered response, priced from org.toml as it is now. The entry of an
// admitted call settles its reservation: its tokens entry, or a Settle
// entry when it has no usage (refused after all, or failed).
func spend(org func() (*config.Org, error), meter *ledger.Meter, logf func(string, ...any)) func(gateway.Spend) {
	return func(sp gateway.Spend) {
		if sp.Bytes > 0 {
			meter.Add(ledger.Entry{Imp: sp.Subject, Kind: ledger.Bytes, Task: sp.Task, Bytes: sp.Bytes})
		}
		u := sp.Usage
		if u == nil {
			if sp.Call != "" {
				meter.Add(ledger.Entry{Imp: sp.Subject, Kind: ledger.Settle, Task: sp.Task, Call: sp.Call})
			}
			return
		}
		e := ledger.Entry{Imp: sp.Subject, Kind: ledger.Tokens, Task: sp.Task, Model: u.Model,
			InputTokens: u.InputTokens, OutputTokens: u.OutputTokens, UnknownUsage: u.Unknown, Call: sp.Call}
		if org, err := org(); err != nil {
			logf("error: pricing %s tokens of %s: %v", u.Model, sp.Subject, err)
		} else {
			e.Cost = org.Cost(u.Model, u.InputTokens, u.OutputTokens)
			e.UnknownCost = u.Unknown && org.Priced(u.Model)
		}
		meter.Add(e)
	}
}

// ErrInflight is the refusal of a proactive model call while the imp has
// its [budget.<imp>] inflight calls forwarded already.
var ErrInflight = errors.New("too many model calls in flight")

// soon is the Retry-After of a refusal that a call in flight ending can
// lift: the in-flight cap, or a reservation that would pass a cap only
// with the reservations of calls in flight counted.
const soon = 5 * time.Second

// bytesPerToken is what a request's input is estimated at: a token per
// four bytes of its body, the usual rule for English text and JSON. A
// call that uses more than it reserved is counted at what it used; at
// most inflight such calls can be out at once.
const bytesPerToken = 4

// admission admits proactive model calls: under their imp's budget with
// their reservation counted, and no more than its inflight at once. The
// reservation itself is the call's synced Call entry in the ledger, so a
// restarted gateway still counts the calls a crash cut off; the count of
// calls in flight lives here, and starts at zero with the process.
type admission struct {
	y     *yard.Yard
	org   func() (*config.Org, error)
	meter *ledger.Meter
	now   func() time.Time

	mu   sync.Mutex
	imps map[string]*inflight
}

// inflight is one imp's calls in flight; its lock makes reading the
// ledger, checking the caps and writing the reservation one step, so two
// calls can never both pass on the same room.
type inflight struct {
	mu sync.Mutex
	n  int
}

func (a *admission) of(imp string) *inflight {
	a.mu.Lock()
	defer a.mu.Unlock()
	f := a.imps[imp]
	if f == nil {
		f = &inflight{}
		a.imps[imp] = f
	}
	return f
}

// admit refuses a model call of proactive work over its imp's budget
// with its reservation counted, past its inflight cap, or whose usage
// the ledger could not take (the Call entry, synced, is written first:
// a full or failing disk refuses the call with 503 rather than let it
// spend unrecorded); owner work always passes. The metered entries
// before it are written first, so a call never passes on spend not yet
// on disk.
func (a *admission) admit(c gateway.Call) (func(), error) {
	if a.meter.Class(c.Task) != ledger.Proactive {
		return nil, nil
	}
	org, err := a.org()
	if err != nil {
		return nil, fmt.Errorf("proactive work is not admitted while org.toml does not load: %w", err)
	}
	b := org.Bounds(c.Subject)
	f := a.of(c.Subject)
	f.mu.Lock()
	defer f.mu.Unlock()
	now := a.now()
	if f.n >= b.Inflight {
		return nil, gateway.RetryAt(fmt.Errorf("%w: imp %s has %d proactive model calls out, its inflight cap", ErrInflight, c.Subject, f.n), now.Add(soon))
	}
	model, out := c.Asked()
	if out == 0 {
		out = b.ReserveTokens
	}
	in := (int64(len(c.Body)) + bytesPerToken - 1) / bytesPerToken
	r := ledger.Entry{Imp: c.Subject, Task: c.Task, Call: c.ID, Model: model,
		InputTokens: in, OutputTokens: out, Bytes: int64(len(c.Body)), Cost: org.Cost(model, in, out)}
	if b.Capped() {
		a.meter.Sync()
		spent, err := ledger.Spent(a.y, c.Subject, now)
		if err != nil {
			return nil, err
		}
		if why := ledger.Passes(b, spent[ledger.Proactive], r); why != "" {
			// Calls in flight may settle for less than they reserved;
			// else the caps start afresh at midnight.
			_, at := ledger.Day(now)
			if f.n > 0 {
				at = now.Add(soon)
			}
			return nil, gateway.RetryAt(fmt.Errorf("%w: imp %s %s", ledger.ErrOverBudget, c.Subject, why), at)
		}
	}
	if err := a.meter.Open(r); err != nil {
		return nil, fmt.Errorf("%w: a model call of proactive work goes out only once the ledger takes a line: %w", gateway.ErrUnmetered, err)
	}
	f.n++
	return func() {
		f.mu.Lock()
		f.n--
		f.mu.Unlock()
	}, nil
}

// paused refuses the requests of a paused imp's runs, reading the pause
// file for each (one small read, so a pause applies from the moment it
// is written, whatever the watcher's delay). The org subject (executors)
// is not an imp's run: impexec holds a paused imp's gates itself.
func paused(y *yard.Yard) func(subject string) string {
	return func(subject string) string {
		if subject == "" || subject == token.Org {
			return ""
		}
		ps, _ := pause.Load(y)
		return ps.Why(subject)
	}
}

// acknowledge tells impsup pause, for each change of the pause file, that
// this gateway applies it (paused reads the file on each request, so it
// does once the file is written).
func (s *Server) acknowledge(ctx context.Context) {
	acked := -1
	err := pause.Watch(ctx, s.yard, 10*time.Second, func(ps *pause.State, _ error) {
		if ps.Seq == acked || ps.Seq == 0 {
			// Seq 0 is a yard never paused: nothing to acknowledge.
			return
		}
		if err := pause.Acknowledge(s.yard, "impgw", ps.Seq, time.Now()); err != nil {
			fmt.Fprintf(s.log, "impgw: error: acknowledging pause %d: %v\n", ps.Seq, err)
			return
		}
		acked = ps.Seq
	}, func(err error) { fmt.Fprintf(s.log, "impgw: watching the pause file: %v\n", err) })
	if err != nil {
		fmt.Fprintf(s.log, "impgw: error: watching the pause file: %v\n", err)
	}
}

// runOf names the run of the box a control request came from.
func runOf(r *http.Request) (string, bool) {
	runID, _, ok := boxnet.Identity(gateway.Conn(r.Context()))
	return runID, ok
}

// Listen opens a listener on every address, or none: on a failure it
// closes those it opened.
func Listen(addrs []string) ([]net.Listener, error) {
	var lns []net.Listener
	for _, a := range addrs {
		ln, err := net.Listen("tcp", a)
		if err != nil {
			for _, l := range lns {
				l.Close()
			}
			return nil, err
		}
		lns = append(lns, ln)
	}
	return lns, nil
}

// Serve serves lns, and a listener inside every live run's namespace,
// until ctx ends or one of lns fails; then it gives open connections up
// to grace to finish and writes out the metered bytes.
func (s *Server) Serve(ctx context.Context, lns []net.Listener, grace time.Duration) error {
	defer s.meter.Sync()
	// Holding runs/.impgw.lock shared, from before the first listener
	// serves, tells impsup pause that a gateway runs and must
	// acknowledge.
	release, err := run.Present(s.yard, "impgw")
	if err != nil {
		return err
	}
	defer release()
	// One listener failing stops them all: a gateway half up is a box
	// half cut off, which is harder to notice than one that is down.
	sctx, stop := context.WithCancel(ctx)
	defer stop()
	// Stopped last, once no listener can start one again.
	defer s.mcp.Close()
	// The boxes of MCP servers a gateway killed before it could stop them
	// go before any server is boxed again.
	s.sweep(ctx)
	if org, err := s.org(); err == nil {
		go s.mcp.Eager(sctx, org)
	}
	var wg sync.WaitGroup
	// impexec has approved MCP calls made here, by this gateway's servers
	// with their network; without the socket such a gate waits, approved.
	if ln, err := mcpcall.Listen(s.home); err != nil {
		s.logf("error: %v; approved MCP calls wait until a gateway serves it", err)
	} else {
		srv := &http.Server{Handler: &mcpcall.Handler{Yard: s.yard, Home: s.home, Org: s.org, M: s.mcp, Logf: s.logf}}
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-sctx.Done()
			srv.Close()
		}()
		go srv.Serve(ln)
	}
	errs := make([]error, len(lns))
	for i, ln := range lns {
		fmt.Fprintf(s.log, "impgw: serving on %s (policy %s, decisions %s)\n", ln.Addr(), s.policy, s.decisions)
		wg.Add(1)
		go func() {
			defer wg.Done()
			if errs[i] = s.gw.Serve(sctx, ln, grace); errs[i] != nil {
				stop()
			}
		}()
	}
	var inboundErr error
	if s.inbound != nil {
		fmt.Fprintf(s.log, "impgw: inbound relay on %s (sources %s)\n", s.inboundLn.Addr(), strings.Join(s.inbound.Sources(), ", "))
		wg.Add(1)
		go func() {
			defer wg.Done()
			if inboundErr = s.inbound.Serve(sctx, s.inboundLn, grace); inboundErr != nil {
				stop()
			}
		}()
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		s.acknowledge(sctx)
	}()
	// Boxes are served inside their own namespaces, each listener
	// attached as its run starts and closed as it ends.
	wg.Add(1)
	go func() {
		defer wg.Done()
		if err := s.boxes.Run(sctx); err != nil {
			fmt.Fprintf(s.log, "impgw: error: serving boxes: %v\n", err)
		}
	}()
	if s.ready != nil {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if answered(sctx, lns) {
				s.ready()
			}
		}()
	}
	wg.Wait()
	return errors.Join(append(errs, inboundErr)...)
}

// sweep removes the boxes of MCP servers this yard's gateway left. With
// containerd down there is nothing it could remove, and no server can
// be boxed either: that is said when one is asked for.
func (s *Server) sweep(ctx context.Context) {
	removed, err := s.mcp.Boxes.Sweep(ctx)
	for _, id := range removed {
		fmt.Fprintf(s.log, "impgw: removed the box %s of an MCP server a previous gateway left\n", id)
	}
	if err != nil && !errors.Is(err, box.ErrUnreachable) {
		fmt.Fprintf(s.log, "impgw: error: removing MCP server boxes left before: %v\n", err)
	}
}

// answered waits until every listener answers GET /v1/health, as a
// client would ask it; false if ctx ends first.
func answered(ctx context.Context, lns []net.Listener) bool {
	// Straight to the listener, whatever HTTP_PROXY says.
	c := &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{Proxy: nil}}
	defer c.CloseIdleConnections()
	for _, ln := range lns {
		url := "http://" + reachable(ln.Addr()) + "/v1/health"
		for {
			req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
			if err != nil {
				return false
			}
			resp, err := c.Do(req)
			if err == nil {
				resp.Body.Close()
				if resp.StatusCode == http.StatusOK {
					break
				}
			}
			select {
			case <-ctx.Done():
				return false
			case <-time.After(50 * time.Millisecond):
			}
		}
	}
	return true
}

// reachable is where a local client reaches a listener: its address,
// with loopback for an unspecified one (0.0.0.0, [::]).
func reachable(a net.Addr) string {
	t, ok := a.(*net.TCPAddr)
	if !ok || !t.IP.IsUnspecified() {
		return a.String()
	}
	ip := net.IPv4(127, 0, 0, 1)
	if t.IP.To4() == nil {
		ip = net.IPv6loopback
	}
	return net.JoinHostPort(ip.String(), fmt.Sprint(t.Port))
}
