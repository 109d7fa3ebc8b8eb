package mcpserv

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/impyard/impyard/lib/box"
	"github.com/impyard/impyard/lib/config"
	"github.com/impyard/impyard/lib/home"
	"github.com/impyard/impyard/lib/netns"
	"github.com/impyard/impyard/lib/run"
)

// Labels of a server's box, beside box.LabelRun: what Sweep finds them
// by, and what impsup's recovery leaves alone.
const (
	LabelServer = "impyard.mcp"
	LabelImp    = "impyard.mcp.imp" // "" for a shared server
	LabelYard   = "impyard.yard"    // the yard whose gateway started it
)

// SubjectPrefix names a boxed server as the gateway judges and records
// what it sends: subject mcp:<name>.
const SubjectPrefix = "mcp:"

// BoxCA is where a server's box finds the gateway's CA certificate, as an
// imp's box does.
const BoxCA = "/etc/impyard/ca.crt"

// rootfsPath is the PATH of a server in a rootfs folder.
const rootfsPath = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

// serverCeiling is a server box's ceiling: its lifetime is the idle
// stop's business, not a run's.
const serverCeiling = 10 * 365 * 24 * time.Hour

// ErrNoBoxes: a boxed server was asked of a launcher that has no
// containerd to run it in.
var ErrNoBoxes = errors.New("no containerd to run boxed MCP servers in")

// Boxes starts boxed servers (isolation = "box"): each in a containerd
// box of its own with an imp's hardening (lib/box), in a network
// namespace whose one peer is the gateway's listener, where everything
// the server sends is judged as subject mcp:<name>.
type Boxes struct {
	// Address and Namespace are containerd's, as [containerd] says.
	Address, Namespace string
	// Home is IMPYARD_HOME: the CA certificate every box trusts.
	Home string
	// Yard is the yard's root, which labels its servers' boxes.
	Yard string
	// Serve serves ln, a listener inside a server box's namespace, as the
	// gateway, every request on it subject's, until ctx ends. Nil leaves
	// the box with no peer at all.
	Serve func(ctx context.Context, ln net.Listener, subject string)

	mu sync.Mutex
	r  *box.Runner
}

// runner connects to containerd on first use, so a gateway starts while
// containerd is down and boxes its servers once it is up.
func (b *Boxes) runner(ctx context.Context) (*box.Runner, error) {
	if b == nil {
		return nil, ErrNoBoxes
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.r != nil {
		return b.r, nil
	}
	r, err := box.New(ctx, b.Address, b.Namespace)
	if err != nil {
		return nil, err
	}
	b.r = r
	return r, nil
}

// Close drops the connection to containerd.
func (b *Boxes) Close() {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.r != nil {
		b.r.Close()
		b.r = nil
	}
}

// Sweep removes every server box of this yard that containerd holds,
// with its network namespace: those of a gateway that was killed before
// it could stop them. A gateway sweeps as it starts, before it boxes a
// server, and as it stops, after it stopped its own.
func (b *Boxes) Sweep(ctx context.Context) (removed []string, err error) {
	r, err := b.runner(ctx)
	if err != nil {
		return nil, err
	}
	infos, err := r.List(ctx)
	if err != nil {
		return nil, err
	}
	var errs []error
	for _, in := range infos {
		if in.Labels[LabelServer] == "" || in.Labels[LabelYard] != b.Yard {
			continue
		}
		if err := r.Delete(ctx, in.ID); err != nil {
			errs = append(errs, err)
			continue
		}
		removed = append(removed, in.ID)
	}
	return removed, errors.Join(errs...)
}

// IsServerBox reports whether a container's labels are a server box's,
// which impsup's recovery leaves to the gateway.
func IsServerBox(labels map[string]string) bool { return labels[LabelServer] != "" }

// boxID is a fresh container (and namespace) id for name's server of
// imp: unique, so a box being deleted never holds up its successor.
func boxID(name, imp string) string {
	if imp == "" {
		imp = "shared"
	}
	var rnd [4]byte
	rand.Read(rnd[:])
	return "mcp-" + name + "-" + imp + "-" + hex.EncodeToString(rnd[:])
}

// preamble is the shell that takes the server's secrets from the first
// lines of its stdin, one per variable of names, and runs the command
// with them in its environment: so they travel through a pipe alone and
// are written in no file (not the box's OCI spec, not containerd's
// metadata or state directory). names are checked environment variable
// names, never values.
func preamble(names []string) string {
	var b strings.Builder
	for _, n := range names {
		fmt.Fprintf(&b, "IFS= read -r %s || exit 111; export %s; ", n, n)
	}
	b.WriteString(`exec "$@"`)
	return b.String()
}

// start starts name's server for imp in a new box, its stdio piped to
// the returned running, its secrets (env, as KEY=VALUE) written first on
// its stdin for the preamble to take.
func (b *Boxes) start(ctx context.Context, name, imp string, s *config.MCPServer, env []string, stderr io.Writer) (_ *running, err error) {
	r, err := b.runner(ctx)
	if err != nil {
		return nil, fmt.Errorf("[mcp.%s]: %w", name, err)
	}
	caPath := home.Dir(b.Home).CACert()
	if _, err := os.Stat(caPath); err != nil {
		return nil, fmt.Errorf("[mcp.%s]: no gateway CA at %s (impgw ca init): %w", name, caPath, err)
	}
	rootfs := s.Rootfs
	if rootfs != "" {
		if rootfs, err = box.CheckHome(b.Home, "[mcp."+name+"] rootfs", rootfs); err != nil {
			return nil, err
		}
	}
	id := boxID(name, imp)
	ns, err := netns.New(id)
	if err != nil {
		return nil, fmt.Errorf("[mcp.%s]: %w", name, err)
	}
	sctx, stopServing := context.WithCancel(context.WithoutCancel(ctx))
	defer func() {
		if err != nil {
			stopServing()
			netns.Remove(ns)
		}
	}()
	if b.Serve != nil {
		ln, err := netns.Listen(ns, "tcp", run.BoxGateway)
		if err != nil {
			return nil, fmt.Errorf("[mcp.%s]: %w", name, err)
		}
		go func() {
			<-sctx.Done()
			ln.Close()
		}()
		go b.Serve(sctx, ln, SubjectPrefix+name)
	}
	proxy := "http://" + run.BoxGateway
	boxEnv := []string{
		"HTTP_PROXY=" + proxy, "HTTPS_PROXY=" + proxy, "http_proxy=" + proxy, "https_proxy=" + proxy,
		"NODE_EXTRA_CA_CERTS=" + BoxCA, "CURL_CA_BUNDLE=" + BoxCA, "REQUESTS_CA_BUNDLE=" + BoxCA, "SSL_CERT_FILE=" + BoxCA,
		"HOME=/tmp",
	}
	if s.Image == "" {
		// An image brings its PATH; a rootfs folder has none, and a
		// command named without its path is looked up in it.
		boxEnv = append(boxEnv, "PATH="+rootfsPath)
	}
	args := s.Command
	var names []string
	for _, kv := range env {
		n, _, _ := strings.Cut(kv, "=")
		names = append(names, n)
	}
	if len(names) > 0 {
		args = append([]string{"/bin/sh", "-c", preamble(names), "mcp-" + name}, s.Command...)
	}
	stdinR, stdinW := io.Pipe()
	stdoutR, stdoutW := io.Pipe()
	bx, err := r.Start(ctx, box.Spec{
		ID:     id,
		Labels: map[string]string{LabelServer: name, LabelImp: imp, LabelYard: b.Yard},
		Rootfs: rootfs, Image: s.Image,
		Args: args, Env: boxEnv, Cwd: "/",
		Mounts:  []box.Mount{{Source: caPath, Target: BoxCA, ReadOnly: true}},
		Ceiling: serverCeiling,
		NetNS:   ns,
		Runtime: s.Runtime,
		// stdout is closed at its end, which ends the reading of it;
		// stderr is the gateway's, never closed.
		Stdin: stdinR, Stdout: stdoutW, Stderr: struct{ io.Writer }{stderr},
	})
	if err != nil {
		return nil, fmt.Errorf("[mcp.%s]: %w", name, err)
	}
	for _, kv := range env {
		_, v, _ := strings.Cut(kv, "=")
		if _, err := io.WriteString(stdinW, v+"\n"); err != nil {
			break // the box ended: its exit says why
		}
	}
	exited := make(chan struct{})
	var exit box.Exit
	var werr error
	go func() {
		exit, werr = bx.Wait(context.Background())
		close(exited)
	}()
	return &running{stdin: stdinW, stdout: stdoutR, pid: int(bx.Pid),
		wait: func() error {
			<-exited
			stopServing()
			derr := r.Delete(context.WithoutCancel(ctx), id)
			switch {
			case werr != nil:
				return errors.Join(werr, derr)
			case derr != nil:
				return derr
			case exit.Code != 0 || exit.Killed:
				return errors.New(exit.Reason)
			}
			return nil
		},
		kill: func(grace time.Duration) {
			kctx, cancel := context.WithTimeout(context.Background(), grace+box.DefaultGrace)
			defer cancel()
			bx.Kill(kctx)
		}}, nil
}

// checkBoxed is Check for a boxed server: its rootfs or runtime, and
// secrets the preamble can take (one line each).
func checkBoxed(homeDir, name string, s *config.MCPServer) error {
	if s.Rootfs != "" {
		if _, err := box.CheckHome(homeDir, "[mcp."+name+"] rootfs", s.Rootfs); err != nil {
			return err
		}
	}
	if _, err := box.LookRuntime(s.Runtime); err != nil {
		return fmt.Errorf("[mcp.%s] runtime: %w", name, err)
	}
	return nil
}
