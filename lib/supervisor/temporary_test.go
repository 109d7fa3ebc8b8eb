package supervisor

import (
	"errors"
	"net"
	"testing"

	"github.com/impyard/impyard/lib/temporary"
	"github.com/impyard/impyard/lib/yard"
)

// A second supervisor on a yard is told to try again, not refused.
func TestLockHeldIsTemporary(t *testing.T) {
	y, err := yard.Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	unlock, err := Lock(y)
	if err != nil {
		t.Fatal(err)
	}
	_, err = Lock(y)
	if !errors.Is(err, ErrRunning) || !temporary.Is(err) {
		t.Errorf("second Lock: %v; want ErrRunning, temporary", err)
	}
	unlock()
	again, err := Lock(y)
	if err != nil {
		t.Fatalf("Lock after unlock: %v", err)
	}
	again()
}

// A gateway that hangs up without an answer keeps tasks waiting with a
// temporary error.
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
	err = gatewayUp(l.Addr().String())
	if !errors.Is(err, ErrGatewayDown) || !temporary.Is(err) {
		t.Errorf("gatewayUp: %v; want ErrGatewayDown, temporary", err)
	}
}
