package inbound_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/impyard/impyard/lib/config"
	"github.com/impyard/impyard/lib/inbound"
)

// serve runs r's relay, rebuilt from r.in with edit applied, on a real
// loopback listener through Serve (the listener's bounds live there), and
// returns it and its host:port.
func serve(t *testing.T, r *relay, edit func(*config.Inbound)) (*inbound.Relay, string) {
	t.Helper()
	in := r.in
	if edit != nil {
		edit(&in)
	}
	rel, err := inbound.New(r.y, r.home, in, t.Logf)
	if err != nil {
		t.Fatal(err)
	}
	return rel, serveRelay(t, rel)
}

// serveRelay runs rel through Serve on a loopback listener until the test
// ends, and returns its host:port.
func serveRelay(t *testing.T, rel *inbound.Relay) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- rel.Serve(ctx, ln, time.Second) }()
	t.Cleanup(func() { cancel(); <-done })
	return ln.Addr().String()
}

// dialFrom connects to addr from the loopback address from, so a test
// can be several clients.
func dialFrom(t *testing.T, from, addr string) net.Conn {
	t.Helper()
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(from)}, Timeout: 5 * time.Second}
	c, err := d.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// waitFor polls cond, the relay's own state, until it holds.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(20 * time.Second); !cond(); <-time.After(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("waited 20s for %s", what)
		}
	}
}

// closed reports whether the relay closed c (EOF or reset) within wait,
// reading past any answer it wrote first.
func closed(c net.Conn, wait time.Duration) bool {
	c.SetReadDeadline(time.Now().Add(wait))
	_, err := io.Copy(io.Discard, c)
	return !errors.Is(err, os.ErrDeadlineExceeded)
}

// signedFrom posts a signed delivery from the loopback address from and
// returns its status and how long it took.
func signedFrom(t *testing.T, from, addr, delivery string) (int, time.Duration) {
	t.Helper()
	body := []byte(`{"delivery":"` + delivery + `"}`)
	d := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(from)}}
	c := &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{DialContext: d.DialContext}}
	req, _ := http.NewRequest("POST", "http://"+addr+inbound.Prefix+"github", strings.NewReader(string(body)))
	req.Header.Set("X-Hub-Signature-256", sign(body))
	req.Header.Set("X-GitHub-Delivery", delivery)
	start := time.Now()
	resp, err := c.Do(req)
	took := time.Since(start)
	if err != nil {
		t.Fatalf("delivery %s: %v", delivery, err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode, took
}

// TestConnsPerClient: one address holds conns_per_client connections;
// the next is closed as it is accepted, before anything is read, while
// another address is served; a connection closed gives its place back.
func TestConnsPerClient(t *testing.T) {
	r := newRelay(t)
	rel, addr := serve(t, r, func(in *config.Inbound) { in.ConnsPerClient = 2 })
	var held []net.Conn
	for range 2 {
		c := dialFrom(t, "127.0.0.3", addr)
		io.WriteString(c, "POST "+inbound.Prefix+"github HTTP/1.1\r\nHost: relay\r\n")
		held = append(held, c)
	}
	waitFor(t, "two connections of 127.0.0.3", func() bool { n, _ := inbound.ClientConns(rel, "127.0.0.3"); return n == 2 })
	third := dialFrom(t, "127.0.0.3", addr)
	if !closed(third, 10*time.Second) {
		t.Fatal("a third connection of 127.0.0.3 was kept open")
	}
	if _, refused := inbound.ClientConns(rel, "127.0.0.3"); refused != 1 {
		t.Errorf("%d connections refused, want 1", refused)
	}
	if code, _ := signedFrom(t, "127.0.0.4", addr, "other"); code != http.StatusAccepted {
		t.Errorf("another address: %d", code)
	}
	held[0].Close()
	waitFor(t, "the closed connection's place given back", func() bool { n, _ := inbound.ClientConns(rel, "127.0.0.3"); return n == 1 })
	if code, _ := signedFrom(t, "127.0.0.3", addr, "back"); code != http.StatusAccepted {
		t.Errorf("127.0.0.3 after closing one: %d", code)
	}
	if n := len(r.tasks(t)); n != 2 {
		t.Errorf("%d tasks filed, want 2", n)
	}
}

// TestSlowBodyLosesItsSlot: a body trickled below min_body_rate is cut
// off within the grace and its rate, long before the body timeout, with
// 408 and a record naming the rate; one arriving in pieces at a normal
// pace is filed.
func TestSlowBodyLosesItsSlot(t *testing.T) {
	r := newRelay(t)
	rel, addr := serve(t, r, func(in *config.Inbound) { in.MinBodyRate = 1000 })
	inbound.SetBodyGrace(rel, 200*time.Millisecond)
	c := dialFrom(t, "127.0.0.1", addr)
	fmt.Fprintf(c, "POST %sgithub HTTP/1.1\r\nHost: relay\r\nContent-Length: 5000\r\nX-GitHub-Delivery: slow\r\n\r\n", inbound.Prefix)
	start := time.Now()
	stop := make(chan struct{})
	go func() {
		// Ten bytes a second, until the relay hangs up.
		for {
			select {
			case <-stop:
				return
			case <-time.After(100 * time.Millisecond):
			}
			if _, err := io.WriteString(c, "x"); err != nil {
				return
			}
		}
	}()
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	close(stop)
	took := time.Since(start)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusRequestTimeout {
		t.Errorf("a trickled body: %d, want 408", resp.StatusCode)
	}
	// The body timeout is 10s; the rate cut it after the 200ms grace.
	if took > 5*time.Second {
		t.Errorf("the trickled body held its slot for %v", took)
	}
	t.Logf("a body at 10 bytes a second was cut after %v", took)
	rec := r.lastRecord(t)
	if rec.Verdict != inbound.Refused || rec.Status != http.StatusRequestTimeout || !strings.HasPrefix(rec.Reason, inbound.ErrSlow.Error()) || !strings.Contains(rec.Reason, "below 1000 bytes a second") {
		t.Errorf("record %+v", rec)
	}
	waitFor(t, "the slot given back", func() bool { return inbound.SlotsHeld(rel) == 0 })

	// 2000 bytes in four pieces 50ms apart: 40 kB a second.
	body := []byte(`{"pad":"` + strings.Repeat("p", 1990) + `"}`)
	c = dialFrom(t, "127.0.0.1", addr)
	fmt.Fprintf(c, "POST %sgithub HTTP/1.1\r\nHost: relay\r\nContent-Length: %d\r\nX-Hub-Signature-256: %s\r\nX-GitHub-Delivery: paced\r\n\r\n", inbound.Prefix, len(body), sign(body))
	for i := 0; i < len(body); i += 500 {
		time.Sleep(50 * time.Millisecond) // the sender's pace, not a wait for the relay
		c.Write(body[i:min(i+500, len(body))])
	}
	resp, err = http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil || resp.StatusCode != http.StatusAccepted {
		t.Fatalf("a body at a normal pace: %v %v", resp, err)
	}
}

// TestHeaderTimeout: headers not finished within header_timeout lose the
// connection.
func TestHeaderTimeout(t *testing.T) {
	r := newRelay(t)
	_, addr := serve(t, r, func(in *config.Inbound) { in.HeaderTimeout.Duration = 300 * time.Millisecond })
	c := dialFrom(t, "127.0.0.1", addr)
	io.WriteString(c, "POST "+inbound.Prefix+"github HTTP/1.1\r\nHost: relay\r\n")
	start := time.Now()
	if !closed(c, 10*time.Second) {
		t.Fatal("a connection that never finished its headers was kept 10s")
	}
	t.Logf("unfinished headers were cut after %v", time.Since(start))
}

// TestSlowSendersCannotBlockSignedDeliveries is issue 24's scenario:
// seventeen unsigned connections from one address trickle their bodies
// just above the minimum rate and are renewed every 8s, before the body
// timeout would cut them. The address holds conns_per_client of them, so
// signed deliveries from elsewhere are served at once, before and after
// the renewal. Without the bound the seventeen hold all sixteen slots and
// a signed delivery is refused 503.
func TestSlowSendersCannotBlockSignedDeliveries(t *testing.T) {
	r := newRelay(t)
	rel, addr := serve(t, r, nil)
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	t.Cleanup(func() { cancel(); wg.Wait() })
	var renewed atomic.Int64
	chunk := strings.Repeat("x", 256)
	for range 17 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP("127.0.0.2")}}
			for ctx.Err() == nil {
				c, err := d.DialContext(ctx, "tcp", addr)
				if err != nil {
					select {
					case <-ctx.Done():
					case <-time.After(100 * time.Millisecond):
					}
					continue
				}
				renew := time.Now().Add(8 * time.Second)
				_, err = fmt.Fprintf(c, "POST %sgithub HTTP/1.1\r\nHost: relay\r\nContent-Length: 500000\r\nX-Hub-Signature-256: sha256=00\r\nX-GitHub-Delivery: slow\r\n\r\n", inbound.Prefix)
				// 2 KiB a second, twice the default minimum.
				tick := time.NewTicker(125 * time.Millisecond)
				for err == nil && ctx.Err() == nil {
					select {
					case <-ctx.Done():
					case now := <-tick.C:
						if now.After(renew) {
							renewed.Add(1)
							err = io.EOF
						} else {
							_, err = io.WriteString(c, chunk)
						}
					}
				}
				tick.Stop()
				c.Close()
				if err != nil && err != io.EOF {
					// Refused: try again soon, as an attacker would.
					select {
					case <-ctx.Done():
					case <-time.After(100 * time.Millisecond):
					}
				}
			}
		}()
	}
	attacked := func() bool {
		held, refused := inbound.ClientConns(rel, "127.0.0.2")
		slots := inbound.SlotsHeld(rel)
		return slots == inbound.InFlight || held == config.DefaultConnsPerClient && refused >= 13 && slots == held
	}
	waitFor(t, "the seventeen to hold what they can", attacked)
	held, refused := inbound.ClientConns(rel, "127.0.0.2")
	t.Logf("127.0.0.2 holds %d connections and %d slots; %d connections refused", held, inbound.SlotsHeld(rel), refused)
	code, took := signedFrom(t, "127.0.0.1", addr, "during")
	if code != http.StatusAccepted {
		t.Fatalf("a signed delivery while the slow senders held their connections: %d after %v, want 202", code, took)
	}
	t.Logf("signed delivery served in %v while 17 slow connections were tried", took)
	waitFor(t, "the slow connections to renew", func() bool { return renewed.Load() >= 1 })
	waitFor(t, "the seventeen to hold what they can again", attacked)
	code, took = signedFrom(t, "127.0.0.1", addr, "after-renewal")
	if code != http.StatusAccepted {
		t.Fatalf("a signed delivery after the renewal: %d after %v, want 202", code, took)
	}
	t.Logf("signed delivery served in %v after the renewal", took)
	if n := len(r.tasks(t)); n != 2 {
		t.Errorf("%d tasks filed, want the 2 signed deliveries", n)
	}
}
