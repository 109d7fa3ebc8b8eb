package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/impyard/impyard/lib/approval"
	"github.com/impyard/impyard/lib/boxnet"
	"github.com/impyard/impyard/lib/ca"
	"github.com/impyard/impyard/lib/cli"
	"github.com/impyard/impyard/lib/config"
	"github.com/impyard/impyard/lib/control"
	"github.com/impyard/impyard/lib/gateway"
	"github.com/impyard/impyard/lib/ledger"
	"github.com/impyard/impyard/lib/yard"
)

const serveUsage = `usage: impgw serve [--listen ADDR]... [--policy FILE] [--root DIR] [flags]

Run the gateway until SIGINT or SIGTERM. Absolute-form requests and CONNECT
are judged against the policy (default policies/gateway.json in the yard),
re-read whenever the file changes; an unreadable or invalid policy denies
everything until it is fixed. Each decision is appended to the yard's
runs/decisions.jsonl. Origin-form requests are the control API: GET
/v1/health.

The CA comes from IMPYARD_HOME/ca ('impgw ca init'); secrets for injection
from IMPYARD_HOME/secrets/<name>. Upstream TLS is verified against the
system roots (SSL_CERT_FILE, SSL_CERT_DIR), plus --upstream-ca and the
policy's upstreamCA. Trust auto-approvals are signed with the gateway's
key, IMPYARD_HOME/keys/gateway.key, created at the first start.

Examples:
  impgw serve
  impgw serve --listen 127.0.0.1:7300 --policy /etc/impyard/gateway.json
  curl --proxy http://127.0.0.1:7300 --cacert ~/.impyard/ca/ca.crt https://example.com/
`

type listValue []string

func (l *listValue) String() string     { return strings.Join(*l, ",") }
func (l *listValue) Set(s string) error { *l = append(*l, s); return nil }

func serve(ctx context.Context, e *cli.Env, args []string) error {
	fs := e.FlagSet("serve", serveUsage)
	root := cli.RootFlag(fs)
	var listen listValue
	fs.Var(&listen, "listen", "listen on `ADDR` (repeatable; default 127.0.0.1:7300)")
	policy := fs.String("policy", "", "the policy `FILE` (default policies/gateway.json in the yard)")
	upstreamCA := fs.String("upstream-ca", "", "PEM `FILE` of CAs trusted for upstream TLS besides the system roots")
	lim := gateway.DefaultLimits()
	fs.IntVar(&lim.MaxHeaderBytes, "max-header-bytes", lim.MaxHeaderBytes, "largest request line and header block, `BYTES` (431 beyond)")
	fs.Int64Var(&lim.MaxBodyBytes, "max-body-bytes", lim.MaxBodyBytes, "largest request body, `BYTES` (413 beyond)")
	fs.Int64Var(&lim.BodyBudget, "body-budget", lim.BodyBudget, "request body `BYTES` held at once over all connections (503 beyond)")
	fs.DurationVar(&lim.ReadHeaderTimeout, "read-header-timeout", lim.ReadHeaderTimeout, "time from accept to a request's head, then from each request's first byte; also for a TLS handshake (408 beyond)")
	fs.DurationVar(&lim.ReadBodyTimeout, "read-body-timeout", lim.ReadBodyTimeout, "time to receive a whole request body (408 beyond)")
	fs.DurationVar(&lim.IdleTimeout, "idle-timeout", lim.IdleTimeout, "close a connection idle this long; also bounds each write")
	fs.IntVar(&lim.MaxConns, "max-conns", lim.MaxConns, "concurrent client connections per listener (503 beyond)")
	fs.DurationVar(&lim.UpstreamTimeout, "upstream-timeout", lim.UpstreamTimeout, "time for an upstream to start answering (504 beyond)")
	leafLife := fs.Duration("leaf-lifetime", ca.DefaultLeafLifetime, "lifetime of minted leaf certificates (at most 4320h)")
	grace := fs.Duration("grace", 5*time.Second, "on shutdown, time given to open connections to finish")
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
		if len(listen) == 0 {
			return cli.WithHint(err, "fix org.toml, or name the address with --listen")
		}
		fmt.Fprintf(e.Stderr, "impgw: warning: %v; [gateway] limits at their defaults\n", err)
		org = config.Default()
	}
	if len(listen) == 0 {
		listen = listValue{org.Gateway.Listen}
	}
	// org.toml's [gateway] limits, unless a flag says otherwise.
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	if !set["read-header-timeout"] {
		lim.ReadHeaderTimeout = org.Gateway.HeaderTimeout.Duration
	}
	if !set["body-budget"] {
		lim.BodyBudget = max(org.Gateway.BodyBudget, lim.MaxBodyBytes)
	}
	if lim.MaxHeaderBytes < 1024 || lim.MaxBodyBytes < 0 || lim.MaxConns < 1 || lim.ReadHeaderTimeout <= 0 ||
		lim.ReadBodyTimeout <= 0 || lim.IdleTimeout <= 0 || lim.UpstreamTimeout <= 0 {
		return cli.Usagef("serve: limits must be positive (and --max-header-bytes at least 1024)")
	}
	if lim.BodyBudget < lim.MaxBodyBytes {
		return cli.Usagef("serve: --body-budget must be at least --max-body-bytes")
	}
	policyPath := *policy
	if policyPath == "" {
		policyPath = y.PolicyPath()
	}
	decisions, err := y.DecisionsPath()
	if err != nil {
		return err
	}
	home, err := yard.Home()
	if err != nil {
		return err
	}
	authority, err := ca.Load(home)
	if err != nil {
		return cli.WithHint(err, "'impgw ca init' creates the CA")
	}
	minter, err := ca.NewMinter(authority, *leafLife, 0)
	if err != nil {
		return cli.Usagef("serve: --leaf-lifetime: %v", err)
	}
	boxes := &boxnet.Server{Yard: y, Home: home, Logf: func(format string, a ...any) {
		fmt.Fprintf(e.Stderr, "impgw: "+format+"\n", a...)
	}}
	signer, err := approval.Ensure(home, approval.Gateway, e.Stderr, "impgw")
	if err != nil {
		return err
	}
	api := &control.API{Yard: y, Home: home, Signer: signer, RunOf: func(r *http.Request) (string, bool) {
		runID, _, ok := boxnet.Identity(gateway.Conn(r.Context()))
		return runID, ok
	}}
	meter := ledger.NewMeter(y, func(err error) { fmt.Fprintf(e.Stderr, "impgw: error: metering: %v\n", err) })
	defer meter.Sync()
	g, err := gateway.New(gateway.Config{
		PolicyPath:    policyPath,
		UpstreamCA:    *upstreamCA,
		DecisionsPath: decisions,
		Home:          home,
		Root:          y.Root,
		Minter:        minter,
		Limits:        lim,
		Log:           e.Stderr,
		Control:       api,
		Meter:         meter.Bytes,
		Authenticate:  boxes.Authenticate,
	})
	if err != nil {
		return err
	}
	api.Policy = g.Policy
	boxes.Gateway = g
	var lns []net.Listener
	for _, a := range listen {
		ln, err := net.Listen("tcp", a)
		if err != nil {
			for _, l := range lns {
				l.Close()
			}
			return err
		}
		lns = append(lns, ln)
	}
	// One listener failing stops them all: a gateway half up is a box
	// half cut off, which is harder to notice than one that is down.
	sctx, stop := context.WithCancel(ctx)
	defer stop()
	var wg sync.WaitGroup
	errs := make([]error, len(lns))
	for i, ln := range lns {
		fmt.Fprintf(e.Stderr, "impgw: serving on %s (policy %s, decisions %s)\n", ln.Addr(), policyPath, decisions)
		wg.Add(1)
		go func() {
			defer wg.Done()
			if errs[i] = g.Serve(sctx, ln, *grace); errs[i] != nil {
				stop()
			}
		}()
	}
	// Boxes are served inside their own namespaces, each listener
	// attached as its run starts and closed as it ends.
	wg.Add(1)
	go func() {
		defer wg.Done()
		if err := boxes.Run(sctx); err != nil {
			fmt.Fprintf(e.Stderr, "impgw: error: serving boxes: %v\n", err)
		}
	}()
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return err
	}
	fmt.Fprintln(e.Stderr, "impgw: stopped")
	return nil
}
