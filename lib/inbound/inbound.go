// Package inbound is the relay that turns signed deliveries from outside
// the yard into tasks whose text is untrusted data: GitHub-style webhooks
// signed with HMAC-SHA256 and Discord interactions signed with Ed25519,
// posted to POST /v1/inbound/<source> on a listener of their own.
//
// A delivery's signature is checked over its raw body, in constant time,
// before anything in it is read. A verified delivery files one task for
// its source's imp, the content fenced as untrusted data with the source
// recorded (lib/queue's source field); it is never a command to anyone.
// inbound/<source>/seen/ remembers the deliveries filed, so a replay
// files nothing twice, across restarts; every delivery, accepted or
// refused, is one line of the audit log (runs/decisions.jsonl).
package inbound

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/impyard/impyard/lib/config"
	"github.com/impyard/impyard/lib/home"
	"github.com/impyard/impyard/lib/queue"
	"github.com/impyard/impyard/lib/store"
	"github.com/impyard/impyard/lib/yard"
)

// Limits of the public listener: it may face the internet, so nothing
// a client sends is held without bound.
const (
	// MaxBody bounds a delivery's body (413 beyond).
	MaxBody = 1 << 20
	// InFlight bounds the deliveries read at once (503 beyond), so bodies
	// held together stay under InFlight*MaxBody. One client address
	// holds at most [inbound] conns_per_client of them (at most half),
	// and a body below min_body_rate loses its slot, so a slow sender
	// leaves the rest to deliveries arriving at a normal pace.
	InFlight    = 16
	readTimeout = 30 * time.Second
	// bodyTimeout bounds the read of a body once it holds a slot, however
	// fast it comes: a sender keeping just above the minimum rate would
	// otherwise keep the slot for all of readTimeout.
	bodyTimeout    = 10 * time.Second
	writeTimeout   = 30 * time.Second
	maxHeaderBytes = 16 << 10
)

// Prefix is the path under which each source is served.
const Prefix = "/v1/inbound/"

// Sentinels of a refused delivery; the record's reason names one.
var (
	ErrUnknownSource = errors.New("no such inbound source")
	ErrMethod        = errors.New("only POST is served")
	ErrTooLarge      = errors.New("body over the limit")
	ErrSlow          = errors.New("body arrived too slowly")
	ErrBusy          = errors.New("too many deliveries at once")
	ErrSignature     = errors.New("bad or missing signature")
	ErrStale         = errors.New("timestamp outside the window")
	ErrReplay        = errors.New("delivery already filed")
	ErrNotOwner      = errors.New("not an owner")
	ErrMalformed     = errors.New("malformed delivery")
	ErrFile          = errors.New("could not file the task")
)

// Relay serves the inbound sources of one yard.
type Relay struct {
	yard    *yard.Yard
	sources map[string]*source
	slots   chan struct{}
	logf    func(format string, a ...any)
	// now is the clock that stamps records and judges Discord's window.
	now func() time.Time
	// bodyTimeout is bodyTimeout, shorter in tests.
	bodyTimeout time.Duration
	// bodyGrace is bodyGrace, shorter in tests.
	bodyGrace time.Duration
	// The limits on slow senders, from [inbound].
	connsPerClient int
	minBodyRate    int64
	headerTimeout  time.Duration
	// clients is the listener's bound per client, once Serve runs.
	clients atomic.Pointer[clientLimit]
	// tls, when set, is the certificate the listener serves HTTPS with.
	tls *certFiles

	mu sync.Mutex
	// pruned is when each source's markers were last pruned.
	pruned map[string]time.Time
}

// source is a configured source with its verifying key.
type source struct {
	config.InboundSource
	key []byte // HMAC key or Ed25519 public key
}

// New builds the relay of in's sources, reading each HMAC secret from
// IMPYARD_HOME/secrets now: a source that cannot verify anything is an
// error at start, naming it, not a 401 for every sender later.
func New(y *yard.Yard, h string, in config.Inbound, logf func(format string, a ...any)) (*Relay, error) {
	if logf == nil {
		logf = func(string, ...any) {}
	}
	r := &Relay{yard: y, sources: map[string]*source{}, slots: make(chan struct{}, InFlight), logf: logf, now: time.Now, bodyTimeout: bodyTimeout, bodyGrace: bodyGrace, pruned: map[string]time.Time{},
		connsPerClient: in.ConnsPerClient, minBodyRate: in.MinBodyRate, headerTimeout: in.HeaderTimeout.Duration}
	// A configuration not read from org.toml (a test's) has no defaults.
	if r.connsPerClient <= 0 {
		r.connsPerClient = config.DefaultConnsPerClient
	}
	if r.minBodyRate <= 0 {
		r.minBodyRate = config.DefaultMinBodyRate
	}
	if r.headerTimeout <= 0 {
		r.headerTimeout = config.DefaultInboundHeaderTimeout
	}
	if in.TLSCert != "" {
		c, err := tlsFiles(h, in.TLSCert, in.TLSKey, logf)
		if err != nil {
			return nil, err
		}
		r.tls = c
	}
	for _, s := range in.Sources {
		// An imp without imp.toml would only collect tasks no box runs.
		// One whose imp.toml does not load is the supervisor's to report:
		// the gateway does not stop over it.
		if err := queue.Runnable(y, queue.AddOptions{Imp: s.Imp}); errors.Is(err, queue.ErrNotRunnable) {
			return nil, fmt.Errorf("inbound source %s: %w", s.Name, err)
		}
		src := &source{InboundSource: s}
		switch s.Kind {
		case config.InboundHMAC:
			k, err := secret(home.Dir(h), s.Secret)
			if err != nil {
				return nil, fmt.Errorf("inbound source %s: %w", s.Name, err)
			}
			src.key = k
		case config.InboundDiscord:
			k, err := discordKey(s.PublicKey)
			if err != nil {
				return nil, fmt.Errorf("inbound source %s: %w", s.Name, err)
			}
			src.key = k
		default:
			return nil, fmt.Errorf("inbound source %s: unknown kind %q", s.Name, s.Kind)
		}
		r.sources[s.Name] = src
	}
	return r, nil
}

// secret reads the HMAC key IMPYARD_HOME/secrets/<name>, less a trailing
// newline; the error names the file, never its content.
func secret(h home.Dir, name string) ([]byte, error) {
	p := h.Secret(name)
	b, err := store.ReadFile(p)
	if err != nil {
		return nil, fmt.Errorf("secret %q: %w", name, err)
	}
	b = []byte(strings.TrimRight(string(b), "\r\n"))
	if len(b) == 0 {
		return nil, fmt.Errorf("secret %q: %s is empty", name, p)
	}
	return b, nil
}

// Sources names the configured sources, sorted.
func (r *Relay) Sources() []string { return slices.Sorted(maps.Keys(r.sources)) }

// Serve serves the relay on ln until ctx ends, then gives open
// deliveries up to grace to finish; over TLS when [inbound] names a
// certificate. Each client address holds at most conns_per_client
// connections, counted before the TLS handshake, which like the headers
// must be over within header_timeout.
func (r *Relay) Serve(ctx context.Context, ln net.Listener, grace time.Duration) error {
	cl := limitClients(ln, r.connsPerClient)
	r.clients.Store(cl)
	ln = cl
	srv := &http.Server{
		Handler:           r,
		ReadHeaderTimeout: r.headerTimeout,
		ReadTimeout:       readTimeout,
		WriteTimeout:      writeTimeout,
		MaxHeaderBytes:    maxHeaderBytes,
		BaseContext:       func(net.Listener) context.Context { return context.WithoutCancel(ctx) },
	}
	// One connection, one delivery: an idle kept-alive connection would
	// count against its sender's conns_per_client while holding nothing,
	// and webhook senders gain little from reuse.
	srv.SetKeepAlivesEnabled(false)
	if r.tls != nil {
		ln = tls.NewListener(ln, r.tls.config())
	}
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ln) }()
	select {
	case err := <-done:
		return fmt.Errorf("inbound relay on %s: %w", ln.Addr(), err)
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.Background(), grace)
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil {
		srv.Close()
	}
	<-done
	return nil
}

// ServeHTTP answers one delivery and records it, whatever the outcome.
func (r *Relay) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	rec := &Record{Client: req.RemoteAddr}
	d := r.deliver(w, req, rec)
	rec.Status = d.status
	if d.err != nil {
		rec.Verdict, rec.Reason = Refused, d.err.Error()
	}
	if err := r.record(rec); err != nil {
		r.logf("error: inbound %s: recording the delivery: %v", rec.Source, err)
	}
	if d.err != nil {
		// Refusals are in the audit log only: anyone on the network can
		// make them, and the daemon's log is not for them to fill.
		http.Error(w, d.shown(), d.status)
		return
	}
	r.logf("inbound %s: %s %s %s", rec.Source, rec.Verdict, rec.Delivery, rec.Task)
	w.Header().Set("Content-Type", d.contentType)
	w.WriteHeader(d.status)
	w.Write(d.body)
}

// answer is what deliver decided: a refusal (err set) or a response.
type answer struct {
	status      int
	err         error
	contentType string
	body        []byte
}

func refuse(status int, err error) answer { return answer{status: status, err: err} }

// shown is a refusal as the sender hears it: the sentinel's text, never
// the detail (a file name, a lock) the record keeps.
func (a answer) shown() string {
	for _, s := range []error{ErrUnknownSource, ErrMethod, ErrTooLarge, ErrSlow, ErrBusy, ErrSignature, ErrStale, ErrReplay, ErrNotOwner, ErrMalformed, ErrFile} {
		if errors.Is(a.err, s) {
			return s.Error()
		}
	}
	return http.StatusText(a.status)
}

func (r *Relay) deliver(w http.ResponseWriter, req *http.Request, rec *Record) answer {
	name, ok := strings.CutPrefix(req.URL.Path, Prefix)
	rec.Source = name
	src := r.sources[name]
	if !ok || src == nil {
		return refuse(http.StatusNotFound, fmt.Errorf("%w: %q", ErrUnknownSource, req.URL.Path))
	}
	rec.Kind, rec.Imp = src.Kind, src.Imp
	if req.Method != http.MethodPost {
		w.Header().Set("Allow", http.MethodPost)
		return refuse(http.StatusMethodNotAllowed, fmt.Errorf("%w, not %s", ErrMethod, req.Method))
	}
	select {
	case r.slots <- struct{}{}:
		defer func() { <-r.slots }()
	default:
		return refuse(http.StatusServiceUnavailable, ErrBusy)
	}
	paced := newPaced(req.Body, w, time.Now(), r.bodyGrace, r.bodyTimeout, r.minBodyRate)
	body, err := io.ReadAll(http.MaxBytesReader(w, io.NopCloser(paced), MaxBody))
	rec.Bytes = int64(len(body))
	var tooLarge *http.MaxBytesError
	switch {
	case errors.As(err, &tooLarge):
		return refuse(http.StatusRequestEntityTooLarge, fmt.Errorf("%w of %d bytes", ErrTooLarge, MaxBody))
	case errors.Is(err, os.ErrDeadlineExceeded):
		return refuse(http.StatusRequestTimeout, fmt.Errorf("%w: %d bytes in %s, below %d bytes a second or past %s: %v", ErrSlow, len(body), time.Since(paced.start).Round(time.Millisecond), r.minBodyRate, r.bodyTimeout, err))
	case err != nil:
		return refuse(http.StatusBadRequest, fmt.Errorf("%w: reading the body: %v", ErrMalformed, err))
	}
	if src.Kind == config.InboundDiscord {
		return r.discord(src, req, body, rec)
	}
	return r.hmac(src, req, body, rec)
}
