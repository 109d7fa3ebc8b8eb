package sdnotify

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// listen opens a unixgram socket named name and returns a func that reads
// the next datagram, failing after a second.
func listen(t *testing.T, name string) func() string {
	t.Helper()
	c, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: name, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return func() string {
		c.SetReadDeadline(time.Now().Add(time.Second))
		buf := make([]byte, 4096)
		n, err := c.Read(buf)
		if err != nil {
			t.Fatalf("no datagram: %v", err)
		}
		return string(buf[:n])
	}
}

func TestSendPath(t *testing.T) {
	name := filepath.Join(t.TempDir(), "notify")
	next := listen(t, name)
	t.Setenv(Env, name)
	if sent, err := Send(Ready); !sent || err != nil {
		t.Fatalf("Send: %v %v", sent, err)
	}
	if got := next(); got != Ready {
		t.Fatalf("got %q, want %q", got, Ready)
	}
}

func TestSendAbstract(t *testing.T) {
	name := fmt.Sprintf("@impyard-sdnotify-%d-%d", os.Getpid(), time.Now().UnixNano())
	next := listen(t, name)
	t.Setenv(Env, name)
	if sent, err := Send("READY=1\nSTATUS=serving"); !sent || err != nil {
		t.Fatalf("Send: %v %v", sent, err)
	}
	if got := next(); got != "READY=1\nSTATUS=serving" {
		t.Fatalf("got %q", got)
	}
}

func TestSendWithoutSocket(t *testing.T) {
	t.Setenv(Env, "")
	if sent, err := Send(Ready); sent || err != nil {
		t.Fatalf("Send without %s: %v %v, want false <nil>", Env, sent, err)
	}
}

func TestSendErrors(t *testing.T) {
	t.Setenv(Env, "relative/notify")
	if sent, err := Send(Ready); !sent || err == nil {
		t.Errorf("relative name: %v %v, want an error", sent, err)
	}
	t.Setenv(Env, filepath.Join(t.TempDir(), "nobody-listens"))
	if sent, err := Send(Ready); !sent || err == nil {
		t.Errorf("missing socket: %v %v, want an error", sent, err)
	}
}

func TestStoppingOn(t *testing.T) {
	name := filepath.Join(t.TempDir(), "notify")
	next := listen(t, name)
	t.Setenv(Env, name)
	ctx, cancel := context.WithCancel(context.Background())
	logged := make(chan struct{})
	defer StoppingOn(ctx, func(err error) { t.Error(err) }, func() { close(logged) })()
	cancel()
	if got := next(); got != Stopping {
		t.Fatalf("got %q, want %q", got, Stopping)
	}
	select {
	case <-logged:
	default:
		t.Error("Stopping sent before the before funcs ran")
	}

	// Cancelled first, it sends nothing.
	ctx2, cancel2 := context.WithCancel(context.Background())
	StoppingOn(ctx2, nil)()
	cancel2()
	Send("X=1")
	if got := next(); got != "X=1" {
		t.Fatalf("got %q after a cancelled StoppingOn, want only X=1", got)
	}
}

// TestStoppingOnWaits: once ctx has ended, cancel returns only after the
// notice is sent, so a daemon cannot exit between the signal and it.
func TestStoppingOnWaits(t *testing.T) {
	name := filepath.Join(t.TempDir(), "notify")
	next := listen(t, name)
	t.Setenv(Env, name)
	for range 100 {
		ctx, cancel := context.WithCancel(context.Background())
		logged := false
		done := StoppingOn(ctx, func(err error) { t.Error(err) }, func() { time.Sleep(time.Microsecond); logged = true })
		cancel()
		done()
		if !logged {
			t.Fatal("cancel returned before the notice was sent")
		}
		done() // a second call neither blocks nor sends
		if got := next(); got != Stopping {
			t.Fatalf("got %q, want %q", got, Stopping)
		}
	}
}
