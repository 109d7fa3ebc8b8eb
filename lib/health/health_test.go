package health

import (
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/impyard/impyard/lib/temporary"
)

// A gateway that hangs up without an answer is down, with the temporary
// error that keeps tasks waiting and gates approved.
func TestGatewayDownIsTemporary(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
	err = GatewayUp(l.Addr().String())
	if !errors.Is(err, ErrGatewayDown) || !temporary.Is(err) {
		t.Errorf("GatewayUp: %v; want ErrGatewayDown, temporary", err)
	}
}

// A gateway that answers its health endpoint is up, and the check asked
// that endpoint.
func TestGatewayUp(t *testing.T) {
	asked := make(chan string, 1)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case asked <- r.Method + " " + r.URL.Path:
		default:
		}
		w.Write([]byte(`{"status":"ok"}`))
	}))
	defer srv.Close()
	if err := GatewayUp(srv.Listener.Addr().String()); err != nil {
		t.Fatalf("GatewayUp: %v", err)
	}
	if got := <-asked; got != "GET /v1/health" {
		t.Errorf("the check asked %q, want GET /v1/health", got)
	}
}
