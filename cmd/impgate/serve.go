package main

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"time"

	"github.com/impyard/impyard/lib/cli"
	"github.com/impyard/impyard/lib/config"
	"github.com/impyard/impyard/lib/deskd"
	"github.com/impyard/impyard/lib/inbound"
	"github.com/impyard/impyard/lib/yard"
)

const serveUsage = `usage: impgate serve [--listen ADDR]

Serve the desk as a small web application for the owner's phone: the
pending gates, newest first; each gate as 'impgate show' shows it; and
Approve and Deny. Signing in and every approval is a WebAuthn assertion
of a passkey enrolled with 'impgate desk enroll'; an approval's challenge
is the SHA-256 of the gate's approval message, so impexec verifies a
signature made on the phone over exactly the gate shown.

org.toml's [desk] configures it: listen (default 127.0.0.1:7400; --listen
overrides it), tls_cert and tls_key (PEM files, relative ones in
IMPYARD_HOME, read again when renewed) to serve HTTPS, and origin (as
https://desk.example.com), the WebAuthn origin whose host is the relying
party id every passkey is bound to. Without TLS the desk serves plain
HTTP on a loopback address only, at origin http://localhost:PORT unless
origin says otherwise (a reverse proxy that terminates TLS); any other
address is refused (exit 1).

It runs until SIGTERM or SIGINT, telling systemd when it is ready
(Type=notify).

Examples:
  impgate serve
  impgate serve --listen 127.0.0.1:7401
`

// ErrPlainAddress is a desk asked to serve plain HTTP beyond loopback.
var ErrPlainAddress = errors.New("the desk serves plain HTTP on a loopback address only")

func serve(ctx context.Context, e *cli.Env, args []string) error {
	fs := e.FlagSet("serve", serveUsage)
	root := cli.RootFlag(fs)
	listen := fs.String("listen", "", "listen on `ADDR` instead of [desk] listen")
	if err := cli.Parse(fs, args); err != nil {
		return err
	}
	if fs.NArg() != 0 {
		return cli.Usagef("serve: unexpected argument %q", fs.Arg(0))
	}
	y, err := yard.Open(*root)
	if err != nil {
		return err
	}
	org, err := config.LoadOrg(y)
	if err != nil {
		return cli.WithHint(err, "fix org.toml's [desk]")
	}
	home, err := yard.Home()
	if err != nil {
		return err
	}
	d := org.Desk
	if *listen != "" {
		d.Listen = *listen
	}
	addr := d.DeskListen()
	var tlsConf *tls.Config
	if d.TLSCert != "" {
		if tlsConf, err = inbound.TLSConfig(home, d.TLSCert, d.TLSKey, "desk", e.Logf); err != nil {
			return err
		}
	} else if host, _, err := net.SplitHostPort(addr); err != nil || !loopback(host) {
		return cli.WithHint(fmt.Errorf("[desk] listen %s: %w", addr, ErrPlainAddress), "set [desk] tls_cert and tls_key, or put a TLS reverse proxy before 127.0.0.1")
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return err
	}
	defer ln.Close()
	origin := d.Origin
	if origin == "" {
		d.Origin = "http://localhost:" + strconv.Itoa(ln.Addr().(*net.TCPAddr).Port)
		origin = d.Origin
	}
	srv, err := deskd.New(deskd.Config{Yard: y, Home: home, Origin: d.DeskOrigin(), RPID: d.RPID(), Secure: tlsConf != nil, Logf: e.Logf})
	if err != nil {
		return err
	}
	hs := &http.Server{Handler: srv.Handler(), TLSConfig: tlsConf, ReadHeaderTimeout: 10 * time.Second,
		ReadTimeout: 30 * time.Second, WriteTimeout: 30 * time.Second, IdleTimeout: 2 * time.Minute}
	if tlsConf != nil {
		ln = tls.NewListener(ln, tlsConf)
	}
	done := make(chan error, 1)
	go func() { done <- hs.Serve(ln) }()
	e.Logf("desk serving on %s origin %s", ln.Addr(), origin)
	e.Ready()
	stopping := e.StoppingOn(ctx)
	defer stopping()
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	return hs.Shutdown(sctx)
}

func loopback(host string) bool {
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}
