package boxnet

import (
	"bufio"
	"context"
	"encoding/base64"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/impyard/impyard/lib/ca"
	"github.com/impyard/impyard/lib/control"
	"github.com/impyard/impyard/lib/gateway"
	"github.com/impyard/impyard/lib/netns"
	"github.com/impyard/impyard/lib/run"
	"github.com/impyard/impyard/lib/token"
	"github.com/impyard/impyard/lib/yard/yardtest"
)

// dialIn connects to addr from inside the namespace at ns, as the box
// would.
func dialIn(t *testing.T, ns, addr string) net.Conn {
	t.Helper()
	type res struct {
		c   net.Conn
		err error
	}
	ch := make(chan res, 1)
	go func() {
		runtime.LockOSThread() // the thread dies with the namespace it entered
		fd, err := unix.Open(ns, unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err == nil {
			err = unix.Setns(fd, unix.CLONE_NEWNET)
			unix.Close(fd)
		}
		if err != nil {
			ch <- res{nil, err}
			return
		}
		c, err := net.DialTimeout("tcp", addr, 2*time.Second)
		ch <- res{c, err}
	}()
	r := <-ch
	if r.err != nil {
		t.Fatalf("dial %s inside %s: %v", addr, ns, r.err)
	}
	return r.c
}

// ask sends one raw request on a new connection from inside ns and
// returns the status line.
func ask(t *testing.T, ns, request string) string {
	t.Helper()
	c := dialIn(t, ns, run.BoxGateway)
	defer c.Close()
	c.SetDeadline(time.Now().Add(5 * time.Second))
	fmt.Fprint(c, request)
	line, err := bufio.NewReader(c).ReadString('\n')
	if err != nil {
		t.Fatalf("no answer: %v", err)
	}
	return strings.TrimSpace(line)
}

func basic(name, tok string) string {
	return "Basic " + base64.StdEncoding.EncodeToString([]byte(name+":"+tok))
}

// TestBoxListener: the gateway serves a live run inside its namespace and
// answers gateway.json; a box must use its own run's token, to the proxy
// and to the control API; the listener closes when the run ends.
func TestBoxListener(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root for network namespaces")
	}
	netns.Dir = filepath.Join(t.TempDir(), "netns")
	defer unix.Unmount(netns.Dir, unix.MNT_DETACH)
	y := yardtest.New(t)
	home := t.TempDir()
	os.MkdirAll(y.Path("policies"), 0o750)
	os.WriteFile(y.PolicyPath(), []byte(`{"schema":"impyard.policy/1","rules":[]}`), 0o640)
	authority, err := ca.Init(home)
	if err != nil {
		t.Fatal(err)
	}
	minter, _ := ca.NewMinter(authority, 0, 0)
	decisions, _ := y.DecisionsPath()
	api := &control.API{Yard: y, Home: home, Policy: gateway.PolicyOf, RunOf: func(r *http.Request) (string, bool) {
		runID, _, ok := Identity(gateway.Conn(r.Context()))
		return runID, ok
	}}
	g, err := gateway.New(gateway.Config{PolicyPath: y.PolicyPath(), DecisionsPath: decisions, Home: home, Minter: minter,
		Authenticate: Authenticate(home), Control: api})
	if err != nil {
		t.Fatal(err)
	}
	s := &Server{Yard: y, Gateway: g, Logf: t.Logf}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go s.Run(ctx)

	ns, err := netns.New("r-0000000000000001")
	if err != nil {
		t.Fatal(err)
	}
	defer netns.Remove(ns)
	r := &run.Run{ID: "r-0000000000000001", Imp: "yuko", Task: "t-0000000000000001", State: run.Starting, NetNS: ns, Created: time.Now()}
	if err := run.Write(y, r); err != nil {
		t.Fatal(err)
	}
	if err := run.WaitReady(y, r.ID, 5*time.Second); err != nil {
		t.Fatal(err)
	}
	own, _ := token.Issue(home, "yuko", r.ID, r.Task)
	other, _ := token.Issue(home, "yuko", "r-0000000000000002", "")
	for _, tc := range []struct{ req, want string }{
		{"GET /v1/health HTTP/1.1\r\nHost: x\r\n\r\n", "200"},
		{"GET http://example.com/ HTTP/1.1\r\nHost: example.com\r\n\r\n", "407"},
		{"GET http://example.com/ HTTP/1.1\r\nHost: example.com\r\nProxy-Authorization: " + basic("yuko", other) + "\r\n\r\n", "407"},
		{"GET http://example.com/ HTTP/1.1\r\nHost: example.com\r\nProxy-Authorization: " + basic("yuko", own) + "\r\n\r\n", "403"},
		{"GET /v1/gates HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " + other + "\r\n\r\n", "403"},
		{"GET /v1/gates HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " + own + "\r\n\r\n", "200"},
	} {
		if got := ask(t, ns, tc.req); !strings.Contains(got, " "+tc.want+" ") {
			t.Errorf("%q: got %q, want %s", strings.SplitN(tc.req, "\r\n", 2)[0], got, tc.want)
		}
	}
	// The run ends: its listener goes away.
	r.State = run.Exited
	run.Write(y, r)
	deadline := time.Now().Add(5 * time.Second)
	for {
		c := make(chan error, 1)
		go func() {
			runtime.LockOSThread()
			fd, _ := unix.Open(ns, unix.O_RDONLY|unix.O_CLOEXEC, 0)
			unix.Setns(fd, unix.CLONE_NEWNET)
			unix.Close(fd)
			conn, err := net.DialTimeout("tcp", run.BoxGateway, time.Second)
			if err == nil {
				conn.Close()
			}
			c <- err
		}()
		if <-c != nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the listener of an ended run still answers")
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestBoxShares: connections that send nothing fill one box's share of
// slots; the other box and the host listener still answer at once, and
// the idle connections are closed when the header timeout runs out.
func TestBoxShares(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root for network namespaces")
	}
	netns.Dir = filepath.Join(t.TempDir(), "netns")
	defer unix.Unmount(netns.Dir, unix.MNT_DETACH)
	y := yardtest.New(t)
	home := t.TempDir()
	os.MkdirAll(y.Path("policies"), 0o750)
	os.WriteFile(y.PolicyPath(), []byte(`{"schema":"impyard.policy/1","rules":[]}`), 0o640)
	authority, err := ca.Init(home)
	if err != nil {
		t.Fatal(err)
	}
	minter, _ := ca.NewMinter(authority, 0, 0)
	decisions, _ := y.DecisionsPath()
	lim := gateway.DefaultLimits()
	const share, timeout = 3, 1500 * time.Millisecond
	lim.MaxConns, lim.ReadHeaderTimeout = share, timeout
	g, err := gateway.New(gateway.Config{PolicyPath: y.PolicyPath(), DecisionsPath: decisions, Home: home, Minter: minter,
		Authenticate: Authenticate(home), Limits: lim})
	if err != nil {
		t.Fatal(err)
	}
	s := &Server{Yard: y, Gateway: g, Logf: t.Logf}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go s.Run(ctx)
	host, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	served := make(chan struct{})
	go func() { g.Serve(ctx, host, time.Second); close(served) }()
	defer func() { cancel(); <-served }()

	var nss []string
	for i, id := range []string{"r-0000000000000001", "r-0000000000000002"} {
		ns, err := netns.New(id)
		if err != nil {
			t.Fatal(err)
		}
		defer netns.Remove(ns)
		r := &run.Run{ID: id, Imp: "yuko", Task: fmt.Sprintf("t-000000000000000%d", i+1), State: run.Starting, NetNS: ns, Created: time.Now()}
		if err := run.Write(y, r); err != nil {
			t.Fatal(err)
		}
		if err := run.WaitReady(y, r.ID, 5*time.Second); err != nil {
			t.Fatal(err)
		}
		nss = append(nss, ns)
	}
	start := time.Now()
	var idle []net.Conn
	for range share + 2 {
		c := dialIn(t, nss[0], run.BoxGateway)
		defer c.Close()
		idle = append(idle, c)
	}
	for _, c := range idle[share:] {
		c.SetReadDeadline(time.Now().Add(5 * time.Second))
		if line, err := bufio.NewReader(c).ReadString('\n'); err != nil || !strings.Contains(line, " 503 ") {
			t.Fatalf("over the first box's share: %q %v", line, err)
		}
	}
	health := "GET /v1/health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
	if got := ask(t, nss[1], health); !strings.Contains(got, " 200 ") {
		t.Fatalf("the other box, with the first one's share full: %q", got)
	}
	hc, err := net.Dial("tcp", host.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer hc.Close()
	hc.SetDeadline(time.Now().Add(5 * time.Second))
	fmt.Fprint(hc, health)
	if line, _ := bufio.NewReader(hc).ReadString('\n'); !strings.Contains(line, " 200 ") {
		t.Fatalf("the host listener, with a box's share full: %q", line)
	}
	if time.Since(start) >= timeout {
		t.Skipf("too slow to tell the share from the timeout (%s)", time.Since(start))
	}
	for _, c := range idle[:share] {
		c.SetReadDeadline(time.Now().Add(10 * time.Second))
		if n, err := c.Read(make([]byte, 1)); n != 0 || err == nil || strings.Contains(err.Error(), "timeout") {
			t.Fatalf("an idle connection: read %d, %v; want it closed", n, err)
		}
	}
}
