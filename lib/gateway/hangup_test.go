package gateway

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"
)

// A control request's context ends when its client hangs up, so a
// handler waiting on it (an auto-approved action waiting for its
// execution) stops at once instead of holding on for its whole wait.
func TestControlHangupEndsContext(t *testing.T) {
	entered := make(chan struct{})
	ended := make(chan error, 1)
	h := startGateway(t, policy(), func(c *Config) {
		c.Control = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			close(entered)
			select {
			case <-r.Context().Done():
				ended <- r.Context().Err()
			case <-time.After(30 * time.Second):
				ended <- nil
			}
		})
	})
	c, err := net.Dial("tcp", h.addr)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.WriteString(c, "POST /v1/actions HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\n{}"); err != nil {
		t.Fatal(err)
	}
	<-entered
	c.Close()
	select {
	case err := <-ended:
		if err == nil {
			t.Fatal("the handler waited its whole time for a client that was gone")
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the handler still waits for a client that hung up")
	}
}

// A client that sends its next request while the first is being handled
// is still there: the first is not cancelled, and both are answered in
// order on the one connection.
func TestControlPipelinedNotCancelled(t *testing.T) {
	entered := make(chan struct{}, 2)
	release := make(chan struct{})
	h := startGateway(t, policy(), func(c *Config) {
		c.Control = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			entered <- struct{}{}
			if r.URL.Path == "/v1/first" {
				<-release
			}
			if r.Context().Err() != nil {
				w.WriteHeader(http.StatusServiceUnavailable)
			}
			io.WriteString(w, `{"path":"`+r.URL.Path+`"}`)
		})
	})
	c, err := net.Dial("tcp", h.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := io.WriteString(c, "GET /v1/first HTTP/1.1\r\nHost: x\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	<-entered
	if _, err := io.WriteString(c, "GET /v1/second HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	// The second request's bytes reach the gateway while the first waits;
	// it answers once the first is let go.
	close(release)
	c.SetReadDeadline(time.Now().Add(10 * time.Second))
	br := bufio.NewReader(c)
	for _, want := range []string{"/v1/first", "/v1/second"} {
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatalf("%s: %v", want, err)
		}
		b, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != http.StatusOK || !strings.Contains(string(b), want) {
			t.Fatalf("%s: %d %s", want, resp.StatusCode, b)
		}
	}
}
