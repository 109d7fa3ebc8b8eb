// Package gateway is impgw's egress proxy: an HTTP/1.1 forward proxy for
// absolute-form requests and CONNECT that terminates TLS with leaves from
// lib/ca, judges every request with lib/judge against a policy file it
// re-reads when it changes, forwards what is allowed, and appends one
// decision record per request to the audit log.
//
// Guarantees:
//   - Deny unless allowed: a request the judge does not allow, that cannot
//     be judged (a broken policy, an unreadable body, a malformed request),
//     or whose record cannot be written is answered by the gateway and
//     never forwarded.
//   - The name is judged before any DNS lookup; every resolved address is
//     judged again (special addresses need a rule naming their network);
//     the upstream connection goes to exactly the address that passed, and
//     never to one of the gateway's own listeners.
//   - Every request that reaches the judge or is refused as malformed gets
//     one record (schema impyard.decision/1): verdict, rule, reason, the
//     request with sensitive header values redacted, the status returned.
//     Bodies and secrets are never recorded.
//   - Nothing is forwarded unrecorded: a request or tunnel goes upstream
//     only after the log writer accepted its record without error; its
//     outcome (status, bytes) follows in an impyard.outcome/1 line.
//   - Upstream TLS is always verified (system roots, which honour
//     SSL_CERT_FILE and SSL_CERT_DIR, plus optional bundles).
//   - Inside a CONNECT, the SNI and every request's Host must name the
//     CONNECT host (no domain fronting); Proxy-Authorization and other
//     hop-by-hop headers are never forwarded.
//   - What is judged is what goes out: a request body sent with
//     Content-Encoding gzip, br or zstd is judged decoded, within the body
//     size limit, and forwarded as received; one that does not decode so
//     is refused. A WebSocket is judged at its handshake, and only a rule
//     with websocket set allows one.
//   - Limits on header size, body size, slow clients and connection count
//     are answered with a status and a record, not a hang. Each listener
//     (each box) has connection slots of its own, a connection that sends
//     nothing is closed when the header timeout runs out from accept, and
//     the request bodies held at once are bounded over all connections.
//   - No answer to a client names a host path (the yard, IMPYARD_HOME,
//     the owner's home); the record and the log keep the detail.
//
// Origin-form requests on a listener are the gateway's own control API;
// it serves GET /v1/health and nothing from the file system.
package gateway

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"os"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/impyard/impyard/lib/ca"
	"github.com/impyard/impyard/lib/cli"
	"github.com/impyard/impyard/lib/dial"
	"github.com/impyard/impyard/lib/http1"
	"github.com/impyard/impyard/lib/judge"
	"github.com/impyard/impyard/lib/rate"
	"github.com/impyard/impyard/lib/stale"
	"github.com/impyard/impyard/lib/store"
	"github.com/impyard/impyard/lib/yard"
)

// Limits bound what one client can make the gateway hold.
type Limits struct {
	MaxHeaderBytes    int           // request line and header block (431)
	MaxBodyBytes      int64         // request body (413)
	BodyBudget        int64         // request body bytes held at once over all connections (503 beyond)
	ReadHeaderTimeout time.Duration // from accept (later: a request's first byte) to its last header (408)
	ReadBodyTimeout   time.Duration // to read a whole request body (408)
	IdleTimeout       time.Duration // between requests, and per write or tunnel read
	MaxConns          int           // concurrent client connections per listener (503 beyond)
	DNSTimeout        time.Duration
	DialTimeout       time.Duration
	UpstreamTimeout   time.Duration // from request sent to response headers (504)
}

// DefaultLimits are the limits impgw serve uses unless told otherwise.
func DefaultLimits() Limits {
	return Limits{
		MaxHeaderBytes:    64 << 10,
		MaxBodyBytes:      10 << 20,
		BodyBudget:        64 << 20,
		ReadHeaderTimeout: 10 * time.Second,
		ReadBodyTimeout:   60 * time.Second,
		IdleTimeout:       120 * time.Second,
		MaxConns:          1024,
		DNSTimeout:        5 * time.Second,
		DialTimeout:       10 * time.Second,
		UpstreamTimeout:   120 * time.Second,
	}
}

// Config is what a Gateway needs.
type Config struct {
	PolicyPath string
	// ReadPolicy reads the policy file; nil is store.ReadFile. An error
	// wrapping yard.ErrUnsafe leaves the last good policy in force, and
	// at start makes New fail.
	ReadPolicy    func(path string) ([]byte, error)
	UpstreamCA    string // optional PEM bundle trusted in addition to the system roots
	DecisionsPath string // the audit log records are appended to
	Home          string // IMPYARD_HOME; secrets are read from Home/secrets/<name>
	Root          string // the yard; like Home, never named in an answer to a client
	Minter        *ca.Minter
	Limits        Limits
	// Authenticate names the subject of the requests on a connection from
	// the connection and its Proxy-Authorization value, and the task its
	// credentials were issued for ("" for none); an error is answered
	// 407. Nil makes every request anonymous (subject "").
	Authenticate func(c net.Conn, proxyAuthorization string) (subject, task string, err error)
	// Control serves the control API: origin-form requests under /v1/
	// other than /v1/health. Nil answers them 404. A request's context
	// gives its connection (Conn) and the policy in force (PolicyOf).
	Control http.Handler
	// Meter hears what each authenticated subject spent through the
	// gateway, after its record is written: the body bytes it moved and
	// the model usage of a response a metering rule allowed. Nil meters
	// nothing.
	Meter func(Spend)
	// Admit is asked before a request a metering rule allows is
	// forwarded, with the subject, its task and the request's body; an
	// error refuses the request with 429 Too Many Requests and is the
	// reason given, with a Retry-After when it was made by RetryAt, or
	// with 503 when it wraps ErrUnmetered. A nil error with an end
	// admits a call that has a reservation to settle: its Spend (whether
	// it was forwarded or not) names it in Spend.Call, and end is called
	// once that Spend was handed to Meter. Nil admits every request.
	Admit func(c Call) (end func(), err error)
	// Paused is asked for every request of an authenticated subject, and
	// for every CONNECT, before anything is judged: a non-empty answer
	// refuses it with 403 and is the reason given and recorded. Nil
	// pauses nothing.
	Paused func(subject string) string
	// Door serves requests to DoorHost once judged, in place of an
	// upstream. Nil leaves DoorHost an ordinary name, which resolves
	// nowhere.
	Door Door
	// Log receives diagnostics, one "impgw: ..." line each.
	Log io.Writer
	// Lookup resolves host names; nil means the system resolver.
	Lookup dial.LookupFunc
	// Dial connects to a checked upstream address; nil means TCP.
	Dial func(ctx context.Context, addr netip.AddrPort) (net.Conn, error)
	// SyncLog makes a batch of decision records durable; nil is
	// fdatasync(2). Tests hold or fail it.
	SyncLog func(f *os.File) error
	// Unsynced leaves decision records in the page cache, so a power cut
	// can lose the record of a request already forwarded: only for
	// measuring what the sync costs (impgw serve's hidden benchmark flag).
	Unsynced bool
	// Now is the clock a request is judged at, so that a rule stops
	// applying when its expires time comes; nil is time.Now.
	Now func() time.Time
}

// Gateway is a running proxy.
type Gateway struct {
	cfg      Config
	lim      Limits
	policy   *policySource
	resolver *dial.Resolver
	bodies   bodyBudget
	hidden   []hiddenPath

	mu        sync.Mutex
	listeners []netip.AddrPort
	conns     map[net.Conn]*connState

	// rates counts the requests of each subject that rules with a rate
	// allowed; it lives as long as the gateway, as a rule's rate is a
	// bound on a loop, not a budget (budgets are in the ledger).
	rates rate.Window

	audit     *store.Log
	auditDown atomic.Bool // the last append failed
	logMu     sync.Mutex
	lastLog   string
	wg        sync.WaitGroup
}

// New checks cfg and returns a Gateway. The policy is read now and then
// whenever it changes; a broken one is logged and denies everything.
func New(cfg Config) (*Gateway, error) {
	if cfg.PolicyPath == "" || cfg.DecisionsPath == "" || cfg.Minter == nil {
		return nil, errors.New("gateway: policy path, decisions path and minter are required")
	}
	if cfg.Log == nil {
		cfg.Log = io.Discard
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	lim := cfg.Limits
	if lim == (Limits{}) {
		lim = DefaultLimits()
	}
	if lim.BodyBudget < lim.MaxBodyBytes {
		// A body the size limit allows must be able to pass alone.
		lim.BodyBudget = lim.MaxBodyBytes
	}
	g := &Gateway{
		cfg:      cfg,
		lim:      lim,
		resolver: dial.NewResolver(lim.DNSTimeout, 5*time.Second, cfg.Lookup),
		conns:    make(map[net.Conn]*connState),
		hidden:   hiddenPaths(&cfg),
	}
	g.bodies.max = lim.BodyBudget
	g.audit = store.NewLogWith(cfg.DecisionsPath, g.audited, store.LogOptions{Sync: cfg.SyncLog, Unsynced: cfg.Unsynced})
	g.policy = &policySource{
		path:       cfg.PolicyPath,
		flag:       stale.Watch(cfg.PolicyPath),
		flagBundle: cfg.UpstreamCA,
		opts: dial.Options{
			DialTimeout:           lim.DialTimeout,
			ResponseHeaderTimeout: lim.UpstreamTimeout,
			IdleConnTimeout:       90 * time.Second,
			// Many boxes calling the same API at once each keep an
			// upstream connection: with fewer kept per host, every request
			// beyond them paid a TLS handshake upstream (at 256 boxes on
			// one host, a third of the throughput). The pool's total
			// bound (dial's maxIdleTotal) still holds.
			MaxIdlePerHost: lim.MaxConns,
			Dial:           cfg.Dial,
		},
		logf: g.logf,
		read: cfg.ReadPolicy,
	}
	if g.policy.read == nil {
		g.policy.read = store.ReadFile
	}
	// A gateway that starts on a policy a writer of the yard could have
	// written has nothing to judge by: fail closed, naming it.
	if l := g.policy.get(); errors.Is(l.broken, yard.ErrUnsafe) {
		l.upstream.Close()
		return nil, l.broken
	}
	return g, nil
}

// Policy is the policy in force now; a broken one denies everything.
func (g *Gateway) Policy() *judge.Policy { return g.policy.get().policy }

// logf writes one line of the gateway's log; what it quotes of a box's
// request or an upstream's answer is shown Printable, on that line.
func (g *Gateway) logf(format string, a ...any) {
	fmt.Fprintf(g.cfg.Log, "impgw: %s\n", cli.Printable(fmt.Sprintf(format, a...)))
}

// Serve accepts connections on ln until ctx ends, then closes ln, gives
// open connections up to grace to finish and closes the rest.
func (g *Gateway) Serve(ctx context.Context, ln net.Listener, grace time.Duration) error {
	if err := g.accept(ctx, ln, nil); err != nil {
		return err
	}
	return g.drain(grace)
}

// Attach serves one more listener, such as one inside a box's network
// namespace, until ctx ends; then it closes the listener and every
// connection accepted on it, and leaves the rest of the gateway serving.
func (g *Gateway) Attach(ctx context.Context, ln net.Listener) error {
	var mu sync.Mutex
	own := map[net.Conn]bool{}
	err := g.accept(ctx, ln, func(c net.Conn, open bool) {
		mu.Lock()
		defer mu.Unlock()
		if open {
			own[c] = true
		} else {
			delete(own, c)
		}
	})
	mu.Lock()
	for c := range own {
		c.Close()
	}
	mu.Unlock()
	return err
}

// accept serves connections from ln until ctx ends (nil) or ln fails;
// track, if set, hears each connection open and close. Each listener has
// slots of its own, so connections on one (a box's) can never take those
// of another (the host's, another box's).
func (g *Gateway) accept(ctx context.Context, ln net.Listener, track func(c net.Conn, open bool)) error {
	if err := g.addListener(ln.Addr()); err != nil {
		return err
	}
	slots := make(chan struct{}, g.lim.MaxConns)
	stop := context.AfterFunc(ctx, func() { ln.Close() })
	defer stop()
	var tempDelay time.Duration
	for {
		c, err := ln.Accept()
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() || errors.Is(err, syscall.EMFILE) || errors.Is(err, syscall.ENFILE) {
				// Out of descriptors or similar: back off rather than spin.
				tempDelay = min(max(2*tempDelay, 5*time.Millisecond), time.Second)
				g.logf("error: accept: %v; retrying in %s", err, tempDelay)
				time.Sleep(tempDelay)
				continue
			}
			return err
		}
		tempDelay = 0
		accepted := time.Now()
		select {
		case slots <- struct{}{}:
			st := g.track(c)
			if track != nil {
				track(c, true)
			}
			g.wg.Add(1)
			go func() {
				defer g.wg.Done()
				// The slot is free before the connection leaves the
				// tracked set, so the set never counts one that holds none.
				defer g.untrack(c)
				defer func() { <-slots }()
				if track != nil {
					defer track(c, false)
				}
				g.serveConn(c, st, accepted)
			}()
		default:
			go g.overloaded(c)
		}
	}
}

// connState tells a connection waiting for its next request, which
// shutdown may close at once, from one in the middle of an exchange.
type connState struct{ idle atomic.Bool }

func (g *Gateway) track(c net.Conn) *connState {
	st := &connState{}
	g.mu.Lock()
	defer g.mu.Unlock()
	g.conns[c] = st
	return st
}

func (g *Gateway) untrack(c net.Conn) {
	g.mu.Lock()
	defer g.mu.Unlock()
	delete(g.conns, c)
}

// drain closes idle connections, waits up to grace for the busy ones to
// finish their exchange, then closes what is left.
func (g *Gateway) drain(grace time.Duration) error {
	done := make(chan struct{})
	go func() { g.wg.Wait(); close(done) }()
	closeConns := func(onlyIdle bool) {
		g.mu.Lock()
		defer g.mu.Unlock()
		for c, st := range g.conns {
			if !onlyIdle || st.idle.Load() {
				c.Close()
			}
		}
	}
	// Records of exchanges already answered may still be queued.
	defer g.audit.Sync()
	closeConns(true)
	timer := time.NewTimer(grace)
	defer timer.Stop()
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-done:
			return nil
		case <-tick.C:
			// An exchange that finished since is now idle.
			closeConns(true)
		case <-timer.C:
			closeConns(false)
			<-done
			return nil
		}
	}
}

// Own marks a that another listener of this process serves (the inbound
// relay's) as the gateway's own: a request to it, by any local address
// on its port, is refused as a loop, as one to the gateway's listeners.
func (g *Gateway) Own(a net.Addr) error { return g.addListener(a) }

// addListener remembers a listening address so requests to it are
// refused as loops.
func (g *Gateway) addListener(a net.Addr) error {
	ap, err := netip.ParseAddrPort(a.String())
	if err != nil {
		return fmt.Errorf("gateway: listener address %s: %w", a, err)
	}
	ap = netip.AddrPortFrom(ap.Addr().Unmap(), ap.Port())
	g.mu.Lock()
	defer g.mu.Unlock()
	// Every box's listener has the same address, in its own namespace.
	if !slices.Contains(g.listeners, ap) {
		g.listeners = append(g.listeners, ap)
	}
	return nil
}

// isSelf reports whether dialing a could reach one of our listeners: any
// address of this host (loopback, unspecified, which the kernel takes
// for this host, or an interface's) on a port one of them listens on,
// whatever address that listener is bound to. A listener bound to one
// address is not reachable through another, but telling the two apart
// would rest on the kernel's routing; refusing the port on every local
// address costs only upstreams on this host sharing a gateway port.
func (g *Gateway) isSelf(a netip.AddrPort) bool {
	ip := a.Addr().Unmap().WithZone("")
	g.mu.Lock()
	listening := false
	for _, l := range g.listeners {
		if l.Port() == a.Port() {
			if l.Addr() == ip {
				g.mu.Unlock()
				return true
			}
			listening = true
		}
	}
	g.mu.Unlock()
	if !listening {
		return false
	}
	return ip.IsLoopback() || ip.IsUnspecified() || localAddr(ip)
}

// localAddr reports whether ip is an address of one of this host's
// interfaces now: they come and go, so it is asked each time (only for
// a destination on a listener's port, which is rare).
func localAddr(ip netip.Addr) bool {
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		// Unknown: call it ours, as refusing is the safe side.
		return true
	}
	for _, ia := range addrs {
		if p, err := netip.ParsePrefix(ia.String()); err == nil && p.Addr().Unmap() == ip {
			return true
		}
	}
	return false
}

// record appends the record of a request not forwarded. With wait it
// returns once the record is written (a refusal is recorded before it is
// answered); else at once. A failed write is logged, once per distinct
// error.
func (g *Gateway) record(r *Record, wait bool) {
	if r.ID == "" {
		r.ID = newID()
	}
	line := append(r.appendJSON(make([]byte, 0, 1024)), '\n')
	if err := g.audit.Append(line, wait); err != nil {
		g.audited(err)
	}
	g.meter(r)
}

// decision appends the record of a request about to be forwarded and
// returns once it is written and synced, with the error if it was not:
// nothing goes upstream unrecorded, even across a power cut. A record
// that failed is not left in the log (its batch is cut back), so the
// refusal the caller then records under the same id is the request's
// only record. Its bytes are metered with its outcome.
func (g *Gateway) decision(r *Record) error {
	line := append(r.appendJSON(make([]byte, 0, 1024)), '\n')
	err := g.audit.Append(line, true)
	if err != nil {
		g.audited(err)
	}
	return err
}

// outcome appends the line completing the record of a forwarded exchange,
// already written, once the exchange is over.
func (g *Gateway) outcome(r *Record) {
	line := append(r.appendOutcomeJSON(make([]byte, 0, 256), time.Now()), '\n')
	if err := g.audit.Append(line, false); err != nil {
		g.audited(err)
	}
	g.meter(r)
}

// Call is a request a metering rule allows, as Admit is asked about it.
type Call struct {
	Subject string
	Task    string
	// ID is the request's decision record id, which Spend.Call repeats.
	ID string
	// Path is the request's path, which names the model of some APIs.
	Path string
	// Body is the request body as judged: decoded, when it was sent
	// with a Content-Encoding.
	Body []byte
}

// Spend is what one exchange of a subject cost.
type Spend struct {
	Subject string
	Task    string
	Bytes   int64
	Usage   *Usage // nil unless a metering rule allowed the request
	// Call is the Call.ID of an exchange Admit admitted with an end, ""
	// for any other: its reservation is settled by this Spend.
	Call string
}

func (g *Gateway) meter(r *Record) {
	if n := r.BytesIn + r.BytesOut; g.cfg.Meter != nil && r.Request.Imp != "" && (n > 0 || r.Usage != nil || r.call != "") {
		g.cfg.Meter(Spend{Subject: r.Request.Imp, Task: r.task, Bytes: n, Usage: r.Usage, Call: r.call})
	}
}

// ErrUnmetered marks an Admit refusal of a request whose spend could not
// be recorded (the ledger cannot be written): it is answered 503, as the
// gateway, not the budget, is what fails.
var ErrUnmetered = errors.New("its spend cannot be recorded")

// retryErr is a refusal that will pass at a known time.
type retryErr struct {
	err error
	at  time.Time
}

func (e *retryErr) Error() string { return e.err.Error() }
func (e *retryErr) Unwrap() error { return e.err }

// RetryAt marks an Admit refusal that will pass at at (a budget's next
// day, say): the 429 carries Retry-After, so a client backs off until
// then instead of hammering the cap.
func RetryAt(err error, at time.Time) error { return &retryErr{err, at} }

// RetryTime is when a refusal RetryAt made will pass; false for any
// other error.
func RetryTime(err error) (time.Time, bool) {
	var r *retryErr
	if !errors.As(err, &r) {
		return time.Time{}, false
	}
	return r.at, true
}

// retryAfter is the Retry-After value for a refusal, "" for none: whole
// seconds until it passes, at least 1.
func retryAfter(err error, now time.Time) string {
	at, ok := RetryTime(err)
	if !ok {
		return ""
	}
	return http1.RetryAfter(at, now)
}

// takeRates counts a request of subject against each rule that allowed
// it at a rate, or says which it would pass and the Retry-After until it
// would not. Counts are taken rule by rule: a request refused by its
// second rule has spent a request of its first, as a loop's retries
// should.
func (g *Gateway) takeRates(subject string, rated []judge.Rated, now time.Time) (why, retry string) {
	for _, r := range rated {
		if ok, wait := g.rates.Take(subject+"\x00"+r.Rule, r.Rate, now); !ok {
			who := "subject " + strconv.Quote(subject)
			if subject == "" {
				who = "the anonymous subject"
			}
			return fmt.Sprintf("rule %q allows %s per subject and %s has reached it", r.Rule, r.Rate, who), http1.RetryAfter(now.Add(wait), now)
		}
	}
	return "", ""
}

// unrecorded is the reason given when a decision record is not accepted.
const unrecorded = "the decision log cannot be written; nothing is forwarded unrecorded"

// audited hears the outcome of every write to the audit log.
func (g *Gateway) audited(err error) {
	if g.auditDown.Load() == (err != nil) {
		return
	}
	g.auditDown.Store(err != nil)
	g.logMu.Lock()
	defer g.logMu.Unlock()
	switch {
	case err != nil && err.Error() != g.lastLog:
		g.lastLog = err.Error()
		g.logf("error: decision record not written; nothing is forwarded until one is: %v", err)
	case err == nil && g.lastLog != "":
		g.lastLog = ""
		g.logf("decision records are written again")
	}
}
