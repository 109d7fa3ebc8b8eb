package gateway

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// heldSync is a decision log's sync that a test can hold, to see what
// the gateway does before its record is on stable storage, or fail once.
type heldSync struct {
	mu      sync.Mutex
	hold    chan struct{} // when set, the next sync waits for it to close
	held    chan string   // hears the log's content as a held sync begins
	fail    error         // the next sync's error, once
	synced  int
	content string // the log as last synced
}

func (s *heldSync) sync(f *os.File) error {
	b, err := os.ReadFile(f.Name())
	if err != nil {
		return err
	}
	s.mu.Lock()
	hold, fail := s.hold, s.fail
	s.hold, s.fail = nil, nil
	s.mu.Unlock()
	if hold != nil {
		s.held <- string(b)
		<-hold
	}
	if fail != nil {
		return fail
	}
	if err := unix.Fdatasync(int(f.Fd())); err != nil {
		return err
	}
	s.mu.Lock()
	s.synced++
	s.content = string(b)
	s.mu.Unlock()
	return nil
}

// holdNext makes the next sync wait until the returned func is called.
func (s *heldSync) holdNext() (release func()) {
	s.mu.Lock()
	defer s.mu.Unlock()
	hold := make(chan struct{})
	s.hold, s.held = hold, make(chan string, 1)
	return sync.OnceFunc(func() { close(hold) })
}

// The gateway forwards a request, and opens a tunnel, only once its
// decision record is synced: while the sync is held, the upstream has
// seen nothing, though the record is written.
func TestForwardedOnlyAfterItsRecordIsSynced(t *testing.T) {
	var hits atomic.Int64
	_, port := newPlainUpstream(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		io.WriteString(w, "hello")
	}))
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	var dialed atomic.Int64
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			dialed.Add(1)
			go func() { io.Copy(c, c); c.Close() }()
		}
	}()
	tport := ln.Addr().(*net.TCPAddr).Port
	hs := &heldSync{}
	h := startGateway(t, policy(
		`{"name": "local", "match": {"host": "127.0.0.1", "network": "127.0.0.0/8"}, "verdict": "allow"}`,
		`{"name": "pinned", "match": {"host": "pinned.test", "network": "127.0.0.0/8"}, "verdict": "tunnel"}`,
	), func(c *Config) { c.SyncLog = hs.sync })
	h.resolve("pinned.test", "127.0.0.1")

	t.Run("request", func(t *testing.T) {
		release := hs.holdNext()
		defer release()
		done := make(chan int, 1)
		go func() {
			resp, err := h.client().Get(fmt.Sprintf("http://127.0.0.1:%d/x", port))
			if err != nil {
				done <- 0
				return
			}
			resp.Body.Close()
			done <- resp.StatusCode
		}()
		var content string
		select {
		case content = <-hs.held:
		case code := <-done:
			t.Fatalf("answered %d without a sync", code)
		}
		if n := hits.Load(); n != 0 {
			t.Fatalf("the upstream saw %d request(s) before the record was synced", n)
		}
		if !strings.Contains(content, `"verdict":"allow"`) {
			t.Fatalf("the sync held is not of the decision: %q", content)
		}
		release()
		if code := <-done; code != 200 || hits.Load() != 1 {
			t.Fatalf("after the sync: %d, upstream saw %d", code, hits.Load())
		}
	})

	t.Run("tunnel", func(t *testing.T) {
		release := hs.holdNext()
		defer release()
		c, err := net.Dial("tcp", h.addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		fmt.Fprintf(c, "CONNECT pinned.test:%d HTTP/1.1\r\nHost: pinned.test:%d\r\n\r\n", tport, tport)
		c.SetDeadline(time.Now().Add(10 * time.Second))
		want := "HTTP/1.1 200 Connection established\r\n\r\n"
		answer := make(chan string, 1)
		go func() {
			buf := make([]byte, len(want))
			n, _ := io.ReadFull(c, buf)
			answer <- string(buf[:n])
		}()
		var content string
		select {
		case content = <-hs.held:
		case got := <-answer:
			t.Fatalf("answered %q without a sync", got)
		}
		if n := dialed.Load(); n != 0 {
			t.Fatalf("the tunnel's upstream was dialed %d time(s) before the record was synced", n)
		}
		if !strings.Contains(content, `"verdict":"tunnel"`) {
			t.Fatalf("the sync held is not of the tunnel's decision: %q", content)
		}
		release()
		if got := <-answer; got != want {
			t.Fatalf("after the sync: %q", got)
		}
		// The upstream counts its connection when it accepts it, which may
		// come after the gateway's dial returned: a round trip through the
		// tunnel's echo waits for that.
		echo := make([]byte, 4)
		if _, err := io.WriteString(c, "ping"); err != nil {
			t.Fatal(err)
		}
		if _, err := io.ReadFull(c, echo); err != nil || string(echo) != "ping" {
			t.Fatalf("through the tunnel: %q %v", echo, err)
		}
		if dialed.Load() != 1 {
			t.Fatalf("tunnel dialed %d times", dialed.Load())
		}
	})
}

// A request whose record cannot be synced is answered 503 and never
// forwarded, and what stays in the log says so: the record that would
// have said allow is cut back with its batch, and the refusal, written
// once the log takes writes again, is the request's only record.
func TestRefusedWhenItsRecordCannotBeSynced(t *testing.T) {
	var hits atomic.Int64
	_, port := newPlainUpstream(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
	}))
	hs := &heldSync{fail: syscall.EIO}
	h := startGateway(t, policy(`{"name": "local", "match": {"host": "127.0.0.1", "network": "127.0.0.0/8"}, "verdict": "allow"}`),
		func(c *Config) { c.SyncLog = hs.sync })
	resp, body := h.do(h.client(), "GET", fmt.Sprintf("http://127.0.0.1:%d/x", port), "", nil)
	if resp.StatusCode != http.StatusServiceUnavailable || !strings.Contains(body, unrecorded) {
		t.Fatalf("got %d %q, want 503 saying the log cannot be written", resp.StatusCode, body)
	}
	if hits.Load() != 0 {
		t.Fatal("a request whose record was not synced went upstream")
	}
	raw, _ := os.ReadFile(h.decisions)
	if strings.Contains(string(raw), `"verdict":"allow"`) {
		t.Errorf("the log says allow for a request answered 503: %s", raw)
	}
	recs := h.records()
	if len(recs) != 1 {
		t.Fatalf("%d records, want the refusal alone: %s", len(recs), raw)
	}
	r := recs[0]
	if r.ID != resp.Header.Get("X-Impgw-Decision") || r.Verdict != VerdictDeny || r.Status != http.StatusServiceUnavailable ||
		r.RefusedBy != RefusedByGateway || r.Reason != unrecorded {
		t.Errorf("record %+v, want the 503 refusal of decision %s", r, resp.Header.Get("X-Impgw-Decision"))
	}
	if !strings.Contains(h.log.String(), "input/output error") {
		t.Errorf("the failed sync was not logged: %q", h.log.String())
	}
}
