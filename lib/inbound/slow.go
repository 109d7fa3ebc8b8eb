package inbound

import (
	"io"
	"net"
	"net/http"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"
)

// bodyGrace is how long a body may take to start before the relay's
// minimum body rate applies to it: a sender's first bytes may follow its
// headers after a round trip or two.
const bodyGrace = 2 * time.Second

// clientLimit is a listener that holds at most max connections of one
// client at once (see clientKey); a connection past that is closed as
// it is accepted, before a byte of it is read. It keeps the relay's
// slots for more than one sender: a sender's deliveries each hold a
// connection, so one address holds at most max of them.
type clientLimit struct {
	net.Listener
	max int

	mu    sync.Mutex
	conns map[netip.Prefix]int
	// refused counts the connections closed for their client's bound.
	refused atomic.Int64
}

func limitClients(ln net.Listener, max int) *clientLimit {
	return &clientLimit{Listener: ln, max: max, conns: map[netip.Prefix]int{}}
}

// Accept returns the next connection whose client is within its bound,
// closing those that are not. An error of the listener itself is
// returned as it is, for http.Server to judge.
func (l *clientLimit) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		key, ok := clientKey(c.RemoteAddr())
		if !ok {
			// Not an IP connection (a test's pipe): nothing to count by.
			return c, nil
		}
		l.mu.Lock()
		if l.conns[key] >= l.max {
			l.mu.Unlock()
			l.refused.Add(1)
			c.Close()
			continue
		}
		l.conns[key]++
		l.mu.Unlock()
		return &clientConn{Conn: c, release: func() { l.release(key) }}, nil
	}
}

func (l *clientLimit) release(key netip.Prefix) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.conns[key]--; l.conns[key] <= 0 {
		delete(l.conns, key)
	}
}

// held is how many connections of key are open.
func (l *clientLimit) held(key netip.Prefix) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.conns[key]
}

// clientKey is what connections are counted by: an IPv4 address, or the
// /64 of an IPv6 one, since one IPv6 host is given a whole /64 and could
// open each connection from another address in it.
func clientKey(a net.Addr) (netip.Prefix, bool) {
	tcp, ok := a.(*net.TCPAddr)
	if !ok {
		return netip.Prefix{}, false
	}
	ip, ok := netip.AddrFromSlice(tcp.IP)
	if !ok {
		return netip.Prefix{}, false
	}
	ip = ip.Unmap()
	bits := 32
	if ip.Is6() {
		bits = 64
	}
	p, _ := ip.Prefix(bits)
	return p, true
}

// clientConn gives its client's place back once, however often it is
// closed.
type clientConn struct {
	net.Conn
	once    sync.Once
	release func()
}

func (c *clientConn) Close() error {
	c.once.Do(c.release)
	return c.Conn.Close()
}

// paced reads a body that must keep up a minimum rate: after each read
// the connection's read deadline moves to when the bytes read so far
// would have been due, at rate bytes a second after bodyGrace, and
// never past limit. A sender that trickles its body to hold a slot loses
// it within bodyGrace of falling behind, not at the body timeout.
type paced struct {
	r     io.Reader
	rc    *http.ResponseController
	start time.Time
	grace time.Duration
	limit time.Time
	rate  int64
	n     int64
}

func newPaced(r io.Reader, w http.ResponseWriter, start time.Time, grace, timeout time.Duration, rate int64) *paced {
	p := &paced{r: r, rc: http.NewResponseController(w), start: start, grace: grace, limit: start.Add(timeout), rate: rate}
	p.extend()
	return p
}

func (p *paced) Read(b []byte) (int, error) {
	n, err := p.r.Read(b)
	p.n += int64(n)
	p.extend()
	return n, err
}

func (p *paced) extend() {
	due := p.limit
	if p.rate > 0 {
		// Whole seconds first: n/rate in nanoseconds overflows no sooner
		// than a body of 9 EB.
		at := p.start.Add(p.grace + time.Duration(p.n/p.rate)*time.Second + time.Duration(p.n%p.rate)*time.Second/time.Duration(p.rate))
		if at.Before(due) {
			due = at
		}
	}
	// A connection without deadlines (a test's recorder) reads as before.
	_ = p.rc.SetReadDeadline(due)
}
