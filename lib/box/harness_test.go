package box

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/impyard/impyard/lib/netns"
)

// The harness: one private containerd (scripts/containerd-dev) and one
// busybox rootfs with the probe (scripts/mkrootfs) for the whole package,
// made on first use and torn down by TestMain.
var env struct {
	once   sync.Once
	skip   string // why the box tests cannot run here
	err    error  // why the harness broke
	dir    string
	sock   string
	rootfs string
	// janitor deletes test boxes, whichever Runner started them.
	janitor *Runner
}

// testNS keeps test boxes apart from any real yard's.
const testNS = "impyard-test"

func TestMain(m *testing.M) {
	code := m.Run()
	if env.dir != "" {
		if env.sock != "" {
			out, err := exec.Command("../../scripts/containerd-dev", "stop", filepath.Join(env.dir, "ctd")).CombinedOutput()
			if err != nil {
				fmt.Fprintf(os.Stderr, "containerd-dev stop: %v\n%s", err, out)
			}
		}
		unix.Unmount(netns.Dir, unix.MNT_DETACH)
		os.RemoveAll(env.dir)
		// runc leaves the namespace's parent cgroups; empty ones can go
		// (rmdir fails on those another test run still uses).
		cgroups, _ := filepath.Glob("/sys/fs/cgroup/*/" + testNS)
		for _, cg := range append(cgroups, "/sys/fs/cgroup/"+testNS) {
			unix.Rmdir(cg)
		}
	}
	os.Exit(code)
}

// setup makes the harness once, or skips tb when this host cannot run
// boxes.
func setup(tb testing.TB) {
	tb.Helper()
	env.once.Do(func() {
		if os.Geteuid() != 0 {
			env.skip = "box tests need root: containerd, runc, mounts and network namespaces"
			return
		}
		dir, err := os.MkdirTemp("", "impyard-box-")
		if err != nil {
			env.err = err
			return
		}
		env.dir = dir
		netns.Dir = filepath.Join(dir, "netns")
		out, err := exec.Command("../../scripts/containerd-dev", "start", filepath.Join(dir, "ctd")).Output()
		if err != nil {
			env.skip = fmt.Sprintf("containerd could not be started with scripts/containerd-dev: %v\n%s", err, exitStderr(err))
			return
		}
		env.sock = strings.TrimSpace(string(out))
		env.rootfs = filepath.Join(dir, "rootfs")
		cmd := exec.Command("scripts/mkrootfs", env.rootfs, "./lib/box/testdata/probe")
		cmd.Dir = "../.."
		if out, err := cmd.CombinedOutput(); err != nil {
			env.err = fmt.Errorf("scripts/mkrootfs: %v\n%s", err, out)
			return
		}
		env.janitor, env.err = New(context.Background(), env.sock, testNS)
	})
	if env.skip != "" {
		tb.Skip(env.skip)
	}
	if env.err != nil {
		tb.Fatal(env.err)
	}
}

func exitStderr(err error) string {
	if ee, ok := err.(*exec.ExitError); ok {
		return string(ee.Stderr)
	}
	return ""
}

func runner(tb testing.TB) *Runner {
	tb.Helper()
	setup(tb)
	r, err := New(context.Background(), env.sock, testNS)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { r.Close() })
	return r
}

var seq atomic.Int64

// spec is a probe box spec with its own id, namespace and log, deleted
// with everything it holds when the test ends.
func spec(tb testing.TB, args ...string) Spec {
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
		if err := env.janitor.Delete(context.Background(), id); err != nil {
			tb.Error(err)
		}
		netns.Remove(ns)
	})
	return Spec{
		ID:      id,
		Rootfs:  env.rootfs,
		Args:    args,
		Log:     filepath.Join(tb.TempDir(), "box.log"),
		NetNS:   ns,
		Ceiling: 20 * time.Second,
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
	if err := env.janitor.Delete(context.Background(), s.ID); err != nil {
		tb.Fatal(err)
	}
	log, err := os.ReadFile(s.Log)
	if err != nil {
		tb.Fatal(err)
	}
	return string(log)
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
