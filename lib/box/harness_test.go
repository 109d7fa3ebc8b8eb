package box

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/impyard/impyard/internal/boxtest"
	"github.com/impyard/impyard/lib/netns"
)

// The harness: one private containerd (scripts/containerd-dev) and one
// busybox rootfs with the probe (scripts/mkrootfs) for the whole package,
// made on first use and torn down by TestMain.
var (
	harness = &boxtest.Env{Repo: "../..", Packages: []string{"./lib/box/testdata/probe"},
		// Namespaces live under the harness, apart from a real yard's.
		Prepare: func(dir string) {
			netns.Dir = filepath.Join(dir, "netns")
			RuntimeDir = filepath.Join(dir, "runtime")
		},
		Release: func() {
			unix.Unmount(netns.Dir, unix.MNT_DETACH)
			// runc leaves the namespace's parent cgroups; empty ones can go
			// (rmdir fails on those another test run still uses).
			cgroups, _ := filepath.Glob("/sys/fs/cgroup/*/" + testNS)
			for _, cg := range append(cgroups, "/sys/fs/cgroup/"+testNS) {
				unix.Rmdir(cg)
			}
		},
	}
	// janitor deletes test boxes, whichever Runner started them.
	janitor     *Runner
	janitorErr  error
	janitorOnce sync.Once
)

// testNS keeps test boxes apart from any real yard's.
const testNS = "impyard-test"

func TestMain(m *testing.M) {
	code := m.Run()
	harness.Stop()
	os.Exit(code)
}

// setup makes the harness once, or skips tb when this host cannot run
// boxes.
func setup(tb testing.TB) {
	tb.Helper()
	harness.Need(tb)
	janitorOnce.Do(func() { janitor, janitorErr = New(context.Background(), harness.Sock, testNS) })
	if janitorErr != nil {
		tb.Fatal(janitorErr)
	}
}

func runner(tb testing.TB) *Runner {
	tb.Helper()
	setup(tb)
	r, err := New(context.Background(), harness.Sock, testNS)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { r.Close() })
	return r
}

var seq atomic.Int64

// eachRuntime runs fn as a subtest per runtime, in parallel: every
// isolation probe holds under each. A runtime not installed here is
// skipped, saying which.
func eachRuntime(t *testing.T, fn func(t *testing.T, rt string)) {
	for _, rt := range Runtimes {
		t.Run(rt, func(t *testing.T) {
			t.Parallel()
			if _, err := LookRuntime(rt); errors.Is(err, ErrRuntimeMissing) {
				t.Skipf("runtime %s is not installed on this host: %v", rt, err)
			} else if err != nil {
				t.Fatal(err)
			}
			fn(t, rt)
		})
	}
}

// spec is a probe box spec under runtime rt with its own id, namespace
// and log, deleted with everything it holds when the test ends.
func spec(tb testing.TB, rt string, args ...string) Spec {
	tb.Helper()
	// Unique across processes too: runc's state and the cgroups are per
	// containerd namespace, shared by every containerd on the host.
	id := fmt.Sprintf("t%d-%d-%s", os.Getpid(), seq.Add(1), regexp.MustCompile(`[^a-zA-Z0-9]+`).ReplaceAllString(tb.Name(), "-"))
	if len(id) > 60 {
		id = id[:60]
	}
	ns, err := netns.New(id)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() {
		if err := janitor.Delete(context.Background(), id); err != nil {
			tb.Error(err)
		}
		netns.Remove(ns)
	})
	return Spec{
		ID:      id,
		Rootfs:  harness.Rootfs,
		Args:    args,
		Log:     filepath.Join(tb.TempDir(), "box.log"),
		NetNS:   ns,
		Ceiling: 20 * time.Second,
		Runtime: rt,
	}
}

// run starts s, waits for its end and returns its log.
func run(tb testing.TB, r *Runner, s Spec) (Exit, string) {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	b, err := r.Start(ctx, s)
	if err != nil {
		tb.Fatal(err)
	}
	exit, err := b.Wait(ctx)
	if err != nil {
		tb.Fatal(err)
	}
	return exit, deleted(tb, s)
}

// deleted deletes box s and returns its log, which is complete only now.
func deleted(tb testing.TB, s Spec) string {
	tb.Helper()
	if err := janitor.Delete(context.Background(), s.ID); err != nil {
		tb.Fatal(err)
	}
	log, err := os.ReadFile(s.Log)
	if err != nil {
		tb.Fatal(err)
	}
	return string(log)
}

// ready waits until box s has logged "ready".
func ready(t *testing.T, s Spec) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		if log, _ := os.ReadFile(s.Log); strings.Contains(string(log), "ready") {
			return
		}
		if time.Now().After(deadline) {
			t.Fatal("the box never got ready")
		}
	}
}

// probed parses probe output into "op arg" -> "ok …" or "error: …".
func probed(log string) map[string]string {
	m := map[string]string{}
	for _, line := range strings.Split(log, "\n") {
		if k, v, ok := strings.Cut(line, ": "); ok {
			m[k] = v
		}
	}
	return m
}

// expect checks probe results: each want maps "op arg" to a prefix of its
// result.
func expect(t *testing.T, log string, want map[string]string) {
	t.Helper()
	got := probed(log)
	for k, w := range want {
		if g, ok := got[k]; !ok || !strings.HasPrefix(g, w) {
			t.Errorf("probe %s: got %q, want %q…", k, g, w)
		}
	}
	if t.Failed() {
		t.Logf("box log:\n%s", log)
	}
}

// serve answers every HTTP request on l with body, until the test ends.
func serve(tb testing.TB, l net.Listener, body string) {
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		fmt.Fprint(w, body)
	})}
	go srv.Serve(l)
	tb.Cleanup(func() { srv.Close() })
}

// gateway listens at 127.0.0.1:7300 inside s's namespace, as impgw will,
// and answers with body.
func gateway(tb testing.TB, s Spec, body string) {
	tb.Helper()
	l, err := netns.Listen(s.NetNS, "tcp", "127.0.0.1:7300")
	if err != nil {
		tb.Fatal(err)
	}
	serve(tb, l, body)
}
