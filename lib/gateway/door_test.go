package gateway

import (
	"bufio"
	"context"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
)

// stepStream is a door's stream whose second event waits for release.
type stepStream struct {
	r    *io.PipeReader
	done chan struct{}
}

func (s *stepStream) Read(b []byte) (int, error) { return s.r.Read(b) }

func (s *stepStream) End() string {
	s.r.Close()
	<-s.done
	return "the stream's own error"
}

type stepDoor struct {
	release chan struct{}
	creds   chan string
}

func (d *stepDoor) Serve(_ context.Context, r *DoorRequest) *DoorReply {
	d.creds <- r.Credentials
	pr, pw := io.Pipe()
	s := &stepStream{r: pr, done: make(chan struct{})}
	go func() {
		defer close(s.done)
		defer pw.Close()
		pw.Write([]byte("event: message\ndata: first\n\n"))
		<-d.release
		pw.Write([]byte("event: message\ndata: second\n\n"))
	}()
	return &DoorReply{Status: http.StatusOK, Header: http.Header{"Content-Type": {"text/event-stream"}}, Stream: s}
}

// A door's stream reaches the client as it comes, each part flushed,
// not once it ends; the exchange is recorded when it ends, with the
// stream's error and its bytes. The door learns the CONNECT's
// credentials, which name the run.
func TestDoorStream(t *testing.T) {
	d := &stepDoor{release: make(chan struct{}), creds: make(chan string, 1)}
	h := startGateway(t, policy(`{"name": "door", "match": {"host": "mcp.impyard"}, "verdict": "allow"}`), func(c *Config) {
		c.Door = d
		c.Authenticate = func(net.Conn, string) (string, string, error) { return "yuko", "t-1", nil }
	})
	released := false
	release := func() {
		if !released {
			released = true
			close(d.release)
		}
	}
	// Before the gateway's own cleanup: a gateway that waits for the
	// whole stream must not hang the test that finds it out.
	t.Cleanup(release)
	c := h.client()
	c.Transport.(*http.Transport).ProxyConnectHeader = http.Header{"Proxy-Authorization": {"Basic eXVrbzp0b2s="}}
	resp, err := c.Post("https://mcp.impyard/every", "application/json", strings.NewReader(`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"slow"}}`))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if got := <-d.creds; got != "Basic eXVrbzp0b2s=" {
		t.Errorf("the door got credentials %q, want the CONNECT's", got)
	}
	br := bufio.NewReader(resp.Body)
	var first strings.Builder
	for !strings.HasSuffix(first.String(), "\n\n") {
		line, err := br.ReadString('\n')
		if err != nil {
			t.Fatalf("reading the first event: %v (so far %q)", err, first.String())
		}
		first.WriteString(line)
	}
	if first.String() != "event: message\ndata: first\n\n" || resp.Header.Get("Content-Type") != "text/event-stream" {
		t.Fatalf("first event %q, type %s", first.String(), resp.Header.Get("Content-Type"))
	}
	release()
	rest, _ := io.ReadAll(br)
	if string(rest) != "event: message\ndata: second\n\n" {
		t.Fatalf("rest %q", rest)
	}
	r := h.last()
	if r.Status != http.StatusOK || r.Error != "the stream's own error" || r.BytesOut != int64(len(first.String())+len(rest)) {
		t.Errorf("record: status %d error %q bytes out %d", r.Status, r.Error, r.BytesOut)
	}
}
