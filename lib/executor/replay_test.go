package executor

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime/debug"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/impyard/impyard/lib/gate"
	"github.com/impyard/impyard/lib/home"
	"github.com/impyard/impyard/lib/state"
)

// smallTmpfs mounts a tmpfs with opts at dir, made if need be, until the
// test ends. Mounting needs root.
func smallTmpfs(t *testing.T, dir, opts string) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("mounting a tmpfs needs root")
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mount("tmpfs", dir, "tmpfs", 0, opts); err != nil {
		t.Fatalf("mount a tmpfs (%s) on %s: %v", opts, dir, err)
	}
	t.Cleanup(func() {
		// Detached, so a file left open cannot keep it mounted.
		if err := syscall.Unmount(dir, syscall.MNT_DETACH); err != nil {
			t.Errorf("unmount %s: %v", dir, err)
		}
	})
}

// useUpInodes creates empty files in dir until its file system has no
// inode left for another.
func useUpInodes(t *testing.T, dir string) {
	t.Helper()
	for i := 0; i < 1000; i++ {
		f, err := os.Create(filepath.Join(dir, fmt.Sprintf("filler-%d", i)))
		if errors.Is(err, syscall.ENOSPC) {
			return
		}
		if err != nil {
			t.Fatal(err)
		}
		f.Close()
	}
	t.Fatalf("%s never ran out of inodes", dir)
}

// useUpBlocks writes into dir until its file system has no byte left.
func useUpBlocks(t *testing.T, dir string) {
	t.Helper()
	f, err := os.Create(filepath.Join(dir, "filler"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.Write(make([]byte, 1<<20)); !errors.Is(err, syscall.ENOSPC) {
		t.Fatalf("filling %s: %v, want ENOSPC", dir, err)
	}
}

// The replay marker, IMPYARD_HOME/executed/<gate>, is written and synced
// before anything is sent. When it cannot be, the execution stops there
// with the file system's error: the upstream receives nothing, and the
// gate, already moved to executing but never begun, waits for the marker
// to be written and is then sent once.
func TestMarkerNotWrittenNothingSent(t *testing.T) {
	for _, c := range []struct {
		name string
		opts string
		fill func(*testing.T, string)
	}{
		// No inode for the marker: creating its temp file fails.
		{"no inode", "size=64k,nr_inodes=8", useUpInodes},
		// No room for its time. Written atomically, the marker is never
		// left half made: there is none, or a whole one.
		{"no space", "size=64k", useUpBlocks},
	} {
		t.Run(c.name, func(t *testing.T) {
			u := newRetryUpstream(t, false, 200)
			r := setup(t, fmt.Sprintf("[gateway]\nlisten = %q\n[executors.email-send]\nkind = \"http\"\nurl = \"http://mail.test/emails\"\n",
				u.srv.Listener.Addr().String()))
			g := approved(t, r, "email-send", `{"to":["a@b.example"]}`)
			marker := home.Dir(r.Home).Executed(g.ID)
			smallTmpfs(t, filepath.Dir(marker), c.opts)
			c.fill(t, filepath.Dir(marker))

			_, err := r.Execute(context.Background(), g.ID)
			if at, _ := u.log(); len(at) != 0 {
				t.Errorf("the upstream received %d requests though the marker was not written", len(at))
			}
			if want := "gate " + g.ID + " not executed, nothing sent: write " + marker + ": no space left on device"; err == nil || err.Error() != want {
				t.Fatalf("got %v, want %q", err, want)
			}
			left, _ := os.ReadDir(filepath.Dir(marker))
			for _, e := range left {
				if !strings.HasPrefix(e.Name(), "filler") {
					t.Errorf("executed/ holds %s: want no marker and no temp file, only the fillers", e.Name())
				}
			}
			got, err := gate.Get(r.Yard, g.ID)
			if err != nil || got.State != state.Executing {
				t.Fatalf("gate %v %v, want executing", got, err)
			}
			// Taken up again while the marker still cannot be written, the
			// gate, which never began, stays executing and is not sent.
			if _, err := r.Execute(context.Background(), g.ID); err == nil || !strings.HasPrefix(err.Error(), "gate "+g.ID+" not executed, nothing sent: ") {
				t.Errorf("taken up again: %v, want not executed, nothing sent", err)
			}
			if got, _ := gate.Get(r.Yard, g.ID); got.State != state.Executing {
				t.Errorf("gate %s, want executing", got.State)
			}
			if at, _ := u.log(); len(at) != 0 {
				t.Errorf("the upstream received %d requests", len(at))
			}
			// With room again it is begun, and sent once.
			fillers, _ := filepath.Glob(filepath.Join(filepath.Dir(marker), "filler*"))
			for _, f := range fillers {
				os.Remove(f)
			}
			out, err := r.Execute(context.Background(), g.ID)
			if err != nil || out.State != state.Executed {
				t.Errorf("with room again: %v %v, want executed", out, err)
			}
			if at, _ := u.log(); len(at) != 1 {
				t.Errorf("the upstream received %d requests, want 1", len(at))
			}
		})
	}
}

// openPaths lists what this process's file descriptors point to.
func openPaths(t *testing.T) map[string]bool {
	t.Helper()
	fds, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]bool{}
	for _, fd := range fds {
		if p, err := os.Readlink(filepath.Join("/proc/self/fd", fd.Name())); err == nil {
			out[p] = true
		}
	}
	return out
}

// A successful execution leaves a marker that holds when the gate was
// taken to executing, and no file open on it or on its directory.
func TestMarkerHoldsItsTimeAndIsClosed(t *testing.T) {
	// A collection could close a leaked file before it is looked for.
	defer debug.SetGCPercent(debug.SetGCPercent(-1))
	r := setup(t, messageUser)
	g := approved(t, r, "message-user", `{"text":"hi"}`)
	marker := home.Dir(r.Home).Executed(g.ID)
	before := time.Now()
	out, err := r.Execute(context.Background(), g.ID)
	after := time.Now()
	if err != nil || out.State != state.Executed {
		t.Fatalf("%v %v", out, err)
	}
	open := openPaths(t)
	for _, p := range []string{marker, filepath.Dir(marker)} {
		if open[p] {
			t.Errorf("%s is still open after the execution", p)
		}
	}
	b, err := os.ReadFile(marker)
	if err != nil {
		t.Fatal(err)
	}
	at, err := time.Parse(time.RFC3339Nano, strings.TrimSuffix(string(b), "\n"))
	if err != nil || !strings.HasSuffix(string(b), "Z\n") || at.Before(before.Add(-time.Second)) || at.After(after.Add(time.Second)) {
		t.Errorf("marker holds %q (%v), want one UTC time between %v and %v", b, err, before, after)
	}
}

// TestMarkRefusesSymlinkedDir: IMPYARD_HOME/executed replaced by a symlink
// is refused before anything is sent, and nothing is written where it
// points.
func TestMarkRefusesSymlinkedDir(t *testing.T) {
	u := newRetryUpstream(t, false, 200)
	r := setup(t, fmt.Sprintf("[gateway]\nlisten = %q\n[executors.email-send]\nkind = \"http\"\nurl = \"http://mail.test/emails\"\n",
		u.srv.Listener.Addr().String()))
	g := approved(t, r, "email-send", `{"to":["a@b.example"]}`)
	elsewhere := t.TempDir()
	dir := filepath.Dir(home.Dir(r.Home).Executed(g.ID))
	os.RemoveAll(dir)
	if err := os.Symlink(elsewhere, dir); err != nil {
		t.Fatal(err)
	}
	_, err := r.Execute(context.Background(), g.ID)
	if err == nil || !strings.Contains(err.Error(), "not a directory (a symlink is not followed)") {
		t.Errorf("Execute: %v, want the symlink refused", err)
	}
	if at, _ := u.log(); len(at) != 0 {
		t.Errorf("the upstream received %d requests", len(at))
	}
	if entries, _ := os.ReadDir(elsewhere); len(entries) != 0 {
		t.Errorf("a mark was written through the symlink: %v", entries)
	}
}
