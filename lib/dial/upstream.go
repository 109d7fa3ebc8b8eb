package dial

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"strconv"
	"sync"
	"syscall"
	"time"
)

// Upstream sends HTTP/1.1 requests to checked addresses over kept-alive
// connections, one request at a time per connection, in the caller's
// goroutine: no background reader or writer per connection, nothing it
// does to a request that the caller did not ask for (no added encodings,
// no proxies from the environment, no HTTP/2).
type Upstream struct {
	opts Options
	tls  *tls.Config // the base; each connection gets a clone naming its host

	mu     sync.Mutex
	idle   map[poolKey][]*upConn
	nidle  int
	swept  time.Time
	closed bool
}

// poolKey is what a kept-alive connection may be reused for: the same
// scheme, host name (the TLS server name and the identity verified) and
// checked address.
type poolKey struct {
	scheme string
	host   string
	addr   netip.AddrPort
}

const (
	maxIdleTotal = 1024
	// maxResponseHead bounds what an upstream's response head may make us
	// hold: the status line and fields, with any interim responses.
	maxResponseHead = 1 << 20
)

// NewUpstream returns an Upstream that verifies TLS servers against roots.
func NewUpstream(roots *x509.CertPool, opts Options) *Upstream {
	if opts.MaxIdlePerHost <= 0 {
		opts.MaxIdlePerHost = 2
	}
	return &Upstream{
		opts: opts,
		tls: &tls.Config{
			RootCAs:            roots,
			MinVersion:         tls.VersionTLS12,
			NextProtos:         []string{"http/1.1"},
			ClientSessionCache: tls.NewLRUClientSessionCache(256),
		},
		idle: make(map[poolKey][]*upConn),
	}
}

// RoundTrip sends req, whose URL names the scheme, host and port, to addr
// and nothing else, and returns the response. The caller must close the
// body; the connection goes back to the pool once the body was read to
// its end. A 101 response's body is the connection itself, an
// io.ReadWriteCloser.
func (u *Upstream) RoundTrip(addr netip.AddrPort, req *http.Request) (*http.Response, error) {
	return u.RoundTripWithin(addr, req, 0)
}

// RoundTripWithin is RoundTrip waiting up to wait, not the Options'
// ResponseHeaderTimeout, from sending the request to the response head;
// 0 is the Options' timeout.
func (u *Upstream) RoundTripWithin(addr netip.AddrPort, req *http.Request, wait time.Duration) (*http.Response, error) {
	if wait <= 0 {
		wait = u.opts.ResponseHeaderTimeout
	}
	if p := req.URL.Port(); !samePort(p, addr.Port()) {
		return nil, fmt.Errorf("dial: URL port %q is not the checked address %s", p, addr)
	}
	if req.URL.Scheme != "http" && req.URL.Scheme != "https" {
		return nil, fmt.Errorf("dial: scheme %q is not http or https", req.URL.Scheme)
	}
	key := poolKey{scheme: req.URL.Scheme, host: req.URL.Hostname(), addr: addr}
	for retried := false; ; retried = true {
		c, reused, err := u.get(key)
		if err != nil {
			return nil, err
		}
		resp, err := u.send(c, req, wait)
		if err == nil {
			return resp, nil
		}
		c.Close()
		// A kept-alive connection the server closed while it idled fails
		// before any answer; the request never reached a server then, so
		// one more try on a new connection sends it once.
		if !reused || retried || !errors.Is(err, errStale) {
			return nil, err
		}
		if req.Body != nil {
			if req.GetBody == nil {
				return nil, err
			}
			if req.Body, err = req.GetBody(); err != nil {
				return nil, err
			}
		}
	}
}

// samePort reports whether p, a URL's port, is port in decimal, without
// formatting port to compare.
func samePort(p string, port uint16) bool {
	n, err := strconv.ParseUint(p, 10, 16)
	return err == nil && uint16(n) == port && (len(p) == 1 || p[0] != '0')
}

var errStale = errors.New("kept-alive connection closed by the server")

// send writes req on c and reads the response head.
func (u *Upstream) send(c *upConn, req *http.Request, wait time.Duration) (*http.Response, error) {
	c.idle = 0
	c.SetDeadline(time.Now().Add(wait))
	err := writeRequest(c.bw, req)
	if req.Body != nil {
		req.Body.Close()
	}
	if err != nil {
		return nil, staleIf(err)
	}
	if err := c.bw.Flush(); err != nil {
		return nil, staleIf(err)
	}
	c.headLeft = maxResponseHead
	if _, err := c.br.Peek(1); err != nil {
		return nil, staleIf(err)
	}
	var resp *http.Response
	for {
		var err error
		if resp, err = http.ReadResponse(c.br, req); err != nil {
			return nil, err
		}
		// Interim answers (103 Early Hints) go unseen; 101 is final.
		if resp.StatusCode >= 200 || resp.StatusCode == http.StatusSwitchingProtocols {
			break
		}
	}
	c.headLeft = -1
	c.SetDeadline(time.Time{})
	c.idle = u.opts.IdleConnTimeout
	if resp.StatusCode == http.StatusSwitchingProtocols {
		resp.Body = &upgraded{c}
		return resp, nil
	}
	resp.Body = &pooledBody{body: resp.Body, c: c, u: u, reuse: !resp.Close && !req.Close}
	return resp, nil
}

// staleIf marks the errors of a connection the server had closed.
func staleIf(err error) error {
	if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE) {
		return fmt.Errorf("%w: %w", errStale, err)
	}
	return err
}

// get returns an idle connection for key or dials a new one.
func (u *Upstream) get(key poolKey) (*upConn, bool, error) {
	now := time.Now()
	u.mu.Lock()
	for list := u.idle[key]; len(list) > 0; list = u.idle[key] {
		c := list[len(list)-1]
		u.idle[key] = list[:len(list)-1]
		u.nidle--
		u.mu.Unlock()
		// An idle connection with something to read was spoken to out of
		// turn; one idle too long is likely closed at the far end.
		if c.br.Buffered() == 0 && now.Sub(c.idleAt) < u.opts.IdleConnTimeout {
			return c, true, nil
		}
		c.Close()
		u.mu.Lock()
	}
	u.mu.Unlock()
	raw, err := u.opts.Conn(context.Background(), key.addr)
	if err != nil {
		return nil, false, err
	}
	conn := raw
	if key.scheme == "https" {
		cfg := u.tls.Clone()
		cfg.ServerName = key.host
		tc := tls.Client(raw, cfg)
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		err := tc.HandshakeContext(ctx)
		cancel()
		if err != nil {
			raw.Close()
			return nil, false, err
		}
		conn = tc
	}
	c := &upConn{Conn: conn, key: key, headLeft: -1}
	c.br = bufio.NewReaderSize(c.reader(), 16<<10)
	c.bw = bufio.NewWriterSize(conn, 8<<10)
	return c, false, nil
}

// put returns c to the pool, or closes it when the pool is full.
func (u *Upstream) put(c *upConn) {
	now := time.Now()
	var stale []*upConn
	u.mu.Lock()
	if u.closed || len(u.idle[c.key]) >= u.opts.MaxIdlePerHost || u.nidle >= maxIdleTotal {
		u.mu.Unlock()
		c.Close()
		return
	}
	c.idleAt = now
	u.idle[c.key] = append(u.idle[c.key], c)
	u.nidle++
	if now.Sub(u.swept) > u.opts.IdleConnTimeout/2 {
		// Connections to hosts no longer asked for would idle forever.
		u.swept = now
		for k, list := range u.idle {
			keep := list[:0]
			for _, ic := range list {
				if now.Sub(ic.idleAt) < u.opts.IdleConnTimeout {
					keep = append(keep, ic)
				} else {
					stale = append(stale, ic)
					u.nidle--
				}
			}
			if len(keep) == 0 {
				delete(u.idle, k)
			} else {
				u.idle[k] = keep
			}
		}
	}
	u.mu.Unlock()
	for _, ic := range stale {
		ic.Close()
	}
}

// Close closes the idle connections; requests in flight finish, and their
// connections close instead of returning to the pool.
func (u *Upstream) Close() {
	u.mu.Lock()
	idle := u.idle
	u.idle, u.nidle, u.closed = make(map[poolKey][]*upConn), 0, true
	u.mu.Unlock()
	for _, list := range idle {
		for _, c := range list {
			c.Close()
		}
	}
}

// upConn is one upstream connection.
type upConn struct {
	net.Conn
	br     *bufio.Reader
	bw     *bufio.Writer
	key    poolKey
	idleAt time.Time
	// idle, when set, keeps a read deadline that far ahead while a body
	// is read, moved at most every eighth of it.
	idle time.Duration
	set  time.Time
	// headLeft is what may still be read while a response head is read,
	// or -1 once it was.
	headLeft int64
}

var errHeadTooLong = errors.New("upstream response head over 1 MiB")

func (c *upConn) reader() io.Reader { return readerFunc(c.read) }

func (c *upConn) read(p []byte) (int, error) {
	if c.idle > 0 {
		if now := time.Now(); now.Sub(c.set) > c.idle/8 {
			c.Conn.SetReadDeadline(now.Add(c.idle))
			c.set = now
		}
	}
	if c.headLeft < 0 {
		return c.Conn.Read(p)
	}
	if c.headLeft == 0 {
		return 0, errHeadTooLong
	}
	if int64(len(p)) > c.headLeft {
		p = p[:c.headLeft]
	}
	n, err := c.Conn.Read(p)
	c.headLeft -= int64(n)
	return n, err
}

type readerFunc func([]byte) (int, error)

func (f readerFunc) Read(p []byte) (int, error) { return f(p) }

// pooledBody returns its connection to the pool once read to the end.
type pooledBody struct {
	body  io.ReadCloser
	c     *upConn
	u     *Upstream
	reuse bool
	done  bool // read to EOF
	freed bool
}

func (b *pooledBody) Read(p []byte) (int, error) {
	if b.freed {
		return 0, io.EOF
	}
	n, err := b.body.Read(p)
	if err == io.EOF {
		b.done = true
	}
	return n, err
}

func (b *pooledBody) Close() error {
	if b.freed {
		return nil
	}
	b.freed = true
	b.body.Close()
	if b.done && b.reuse {
		b.c.idle = 0
		b.u.put(b.c)
		return nil
	}
	// Unread bytes would be taken for the next response.
	return b.c.Close()
}

// upgraded is a connection after 101 Switching Protocols.
type upgraded struct{ c *upConn }

func (u *upgraded) Read(p []byte) (int, error)  { return u.c.br.Read(p) }
func (u *upgraded) Write(p []byte) (int, error) { return u.c.Conn.Write(p) }
func (u *upgraded) Close() error                { return u.c.Close() }
