package gateway

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"
)

// TestBodyBudgetEdges: a reservation that fills the budget exactly fits,
// a byte more does not, and what is given back can be taken again.
func TestBodyBudgetEdges(t *testing.T) {
	b := &bodyBudget{max: 100}
	steps := []struct {
		op   string
		n    int64
		want bool
	}{
		{"take", 0, true}, {"take", -5, true},
		{"take", 60, true}, {"take", 41, false}, {"take", 40, true}, {"take", 1, false},
		{"give", 0, true}, {"give", -5, true}, {"take", 1, false},
		{"give", 60, true}, {"take", 61, false}, {"take", 60, true},
		{"give", 100, true}, {"take", 100, true}, {"give", 100, true},
	}
	for i, s := range steps {
		got := true
		if s.op == "take" {
			got = b.take(s.n)
		} else {
			b.give(s.n)
		}
		if got != s.want {
			t.Fatalf("step %d: %s(%d) = %v, want %v (used %d)", i, s.op, s.n, got, s.want, b.used)
		}
	}
	if b.used != 0 {
		t.Errorf("used %d after every reservation was given back", b.used)
	}
}

// budgetConn is one client connection to the gateway carrying requests
// in turn: the gateway reads the next only once the last is done, so
// what it gave back of the budget is given back by then.
type budgetConn struct {
	t  *testing.T
	c  net.Conn
	br *bufio.Reader
}

func dialBudget(t *testing.T, h *harness) *budgetConn {
	t.Helper()
	c, err := net.Dial("tcp", h.addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	c.SetDeadline(time.Now().Add(20 * time.Second))
	return &budgetConn{t: t, c: c, br: bufio.NewReader(c)}
}

func (b *budgetConn) send(s string) {
	b.t.Helper()
	if _, err := io.WriteString(b.c, s); err != nil {
		b.t.Fatal(err)
	}
}

func (b *budgetConn) status() int {
	b.t.Helper()
	resp, err := http.ReadResponse(b.br, nil)
	if err != nil {
		b.t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode
}

// TestBodyBudgetAccounting sends real bodies through a gateway whose
// budget is one largest body: each body's bytes are given back once it is
// done, a chunked body's reservation of the size limit shrinks to what it
// held, a body refused gives back all it reserved, and a body held keeps
// the next one out (503) until it is done.
func TestBodyBudgetAccounting(t *testing.T) {
	var up seen
	_, port := newPlainUpstream(t, up.handler("ok"))
	h := startGateway(t, policy(`{"name": "local", "match": {"host": "127.0.0.1", "network": "127.0.0.0/8"}, "verdict": "allow"}`), func(c *Config) {
		c.Limits.MaxBodyBytes, c.Limits.BodyBudget = 1000, 1000
	})
	head := fmt.Sprintf("POST http://127.0.0.1:%d/p HTTP/1.1\r\nHost: 127.0.0.1:%d\r\n", port, port)
	full := head + "Content-Length: 1000\r\n\r\n" + strings.Repeat("a", 1000)
	chunked := func(n int) string {
		return head + fmt.Sprintf("Transfer-Encoding: chunked\r\n\r\n%x\r\n%s\r\n0\r\n\r\n", n, strings.Repeat("c", n))
	}

	c := dialBudget(t, h)
	for i := range 3 {
		c.send(full)
		if got := c.status(); got != 200 {
			t.Fatalf("body %d of the whole budget: %d, want 200 (the last one's bytes not given back?)", i+1, got)
		}
	}
	c.send(chunked(10))
	if got := c.status(); got != 200 {
		t.Fatalf("chunked body: %d", got)
	}
	c.send(full)
	if got := c.status(); got != 200 {
		t.Fatalf("body after a chunked one: %d, want 200 (its reservation not shrunk to its size?)", got)
	}
	// Over the size limit: refused, and the connection with it.
	c.send(chunked(1001))
	if got := c.status(); got != http.StatusRequestEntityTooLarge {
		t.Fatalf("chunked body over the limit: %d, want 413", got)
	}
	c = dialBudget(t, h)
	c.send(full)
	if got := c.status(); got != 200 {
		t.Fatalf("body after a refused one: %d, want 200 (its reservation not given back?)", got)
	}

	// A body being read holds its bytes: the 100 Continue says the
	// gateway has reserved them. On the same connection, so the last
	// body's bytes are given back before this one asks.
	held := c
	held.send(head + "Content-Length: 1000\r\nExpect: 100-continue\r\n\r\n")
	if line, err := held.br.ReadString('\n'); err != nil || !strings.HasPrefix(line, "HTTP/1.1 100 ") {
		t.Fatalf("waiting for 100 Continue: %q %v", line, err)
	}
	held.br.ReadString('\n')
	other := dialBudget(t, h)
	other.send(head + "Content-Length: 1\r\n\r\nx")
	if got := other.status(); got != http.StatusServiceUnavailable {
		t.Fatalf("a body while the budget is held: %d, want 503", got)
	}
	held.send(strings.Repeat("a", 1000))
	if got := held.status(); got != 200 {
		t.Fatalf("the held body: %d", got)
	}
	held.send(full)
	if got := held.status(); got != 200 {
		t.Fatalf("a body once the held one is done: %d, want 200", got)
	}
}
