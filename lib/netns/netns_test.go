package netns

import (
	"errors"
	"io"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"testing"

	"golang.org/x/sys/unix"
)

func root(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("netns: needs root for unshare, setns and mount")
	}
	Dir = filepath.Join(t.TempDir(), "netns")
	// New made Dir a mount point; the temporary directory can only go once
	// it is not.
	t.Cleanup(func() { unix.Unmount(Dir, unix.MNT_DETACH) })
}

// inside runs fn with the calling thread in the namespace at path, the way
// a box process sees the world.
func inside(t *testing.T, path string, fn func()) {
	t.Helper()
	err := onThread(func() error {
		if err := enter(path); err != nil {
			return err
		}
		fn()
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

func TestNewHasOnlyLoopbackUp(t *testing.T) {
	root(t)
	path, err := New("a")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { Remove(path) })
	inside(t, path, func() {
		ifs, err := net.Interfaces()
		if err != nil {
			t.Error(err)
			return
		}
		if len(ifs) != 1 || ifs[0].Name != "lo" || ifs[0].Flags&net.FlagUp == 0 {
			t.Errorf("interfaces in new namespace = %+v, want only lo, up", ifs)
		}
		if _, err := net.Dial("udp", "192.0.2.1:80"); err == nil {
			t.Error("a route out exists: udp dial to 192.0.2.1 succeeded")
		}
	})
	if _, err := New("a"); err == nil {
		t.Error("New of an existing name succeeded")
	}
	if _, err := New("../x"); err == nil {
		t.Error("New(\"../x\") succeeded")
	}
}

func TestListenServesOnlyInside(t *testing.T) {
	root(t)
	path, err := New("b")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { Remove(path) })
	l, err := Listen(path, "tcp", "127.0.0.1:0")
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
			io.WriteString(c, "inside")
			c.Close()
		}
	}()
	addr := l.Addr().String()
	inside(t, path, func() {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Errorf("dial %s inside the namespace: %v", addr, err)
			return
		}
		b, _ := io.ReadAll(c)
		c.Close()
		if string(b) != "inside" {
			t.Errorf("read %q, want %q", b, "inside")
		}
	})
	// The test's own thread is still in the host namespace, where nothing
	// listens on that port.
	if c, err := net.Dial("tcp", addr); err == nil {
		c.Close()
		t.Errorf("dial %s from the host reached the namespace's listener", addr)
	}
	runtime.GC()
}

func TestRemoveIsIdempotent(t *testing.T) {
	root(t)
	path, err := New("c")
	if err != nil {
		t.Fatal(err)
	}
	if err := Remove(path); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(path); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("stat %s after Remove: %v, want not exist", path, err)
	}
	if err := Remove(path); err != nil {
		t.Errorf("second Remove: %v", err)
	}
	if _, err := Listen(path, "tcp", "127.0.0.1:0"); err == nil {
		t.Error("Listen in a removed namespace succeeded")
	}
}
