package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"runtime/debug"
	"strings"
	"time"

	"github.com/impyard/impyard/lib/approval"
	"github.com/impyard/impyard/lib/ca"
	"github.com/impyard/impyard/lib/cli"
	"github.com/impyard/impyard/lib/config"
	"github.com/impyard/impyard/lib/gateway"
	"github.com/impyard/impyard/lib/gatewayd"
	"github.com/impyard/impyard/lib/inbound"
	"github.com/impyard/impyard/lib/yard"
)

const serveUsage = `usage: impgw serve [--listen ADDR]... [--policy FILE] [--root DIR] [flags]

Run the gateway until SIGINT or SIGTERM. Absolute-form requests and CONNECT
are judged against the policy (default policies/gateway.json in the yard),
re-read whenever the file changes; an unreadable or invalid policy denies
everything until it is fixed. Each decision is appended to the yard's
runs/decisions.jsonl. Origin-form requests are the control API: GET
/v1/health.

With [inbound] listen in org.toml, the inbound relay serves POST
/v1/inbound/<source> on that address alone: each [[inbound.source]]'s
signed deliveries become tasks for its imp, as untrusted data.

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

// unsyncedEnv, set to 1, turns off the sync of decision records, so that
// scripts/bench-gateway can measure what the sync costs in the same run.
const unsyncedEnv = "IMPYARD_BENCH_UNSYNCED"

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
	cli.AtLeastIntVar(fs, &lim.MaxHeaderBytes, "max-header-bytes", 1024, lim.MaxHeaderBytes, "largest request line and header block, `BYTES` (431 beyond)")
	cli.NonNegativeInt64Var(fs, &lim.MaxBodyBytes, "max-body-bytes", lim.MaxBodyBytes, "largest request body, `BYTES` (413 beyond)")
	cli.NonNegativeInt64Var(fs, &lim.BodyBudget, "body-budget", lim.BodyBudget, "request body `BYTES` held at once over all connections (503 beyond)")
	cli.PositiveDurationVar(fs, &lim.ReadHeaderTimeout, "read-header-timeout", lim.ReadHeaderTimeout, "`DURATION` from accept to a request's head, then from each request's first byte; also for a TLS handshake (408 beyond)")
	cli.PositiveDurationVar(fs, &lim.ReadBodyTimeout, "read-body-timeout", lim.ReadBodyTimeout, "`DURATION` to receive a whole request body (408 beyond)")
	cli.PositiveDurationVar(fs, &lim.IdleTimeout, "idle-timeout", lim.IdleTimeout, "close a connection idle this `DURATION`; also bounds each write")
	cli.PositiveIntVar(fs, &lim.MaxConns, "max-conns", lim.MaxConns, "`N` concurrent client connections per listener (503 beyond)")
	cli.PositiveDurationVar(fs, &lim.UpstreamTimeout, "upstream-timeout", lim.UpstreamTimeout, "`DURATION` for an upstream to start answering (504 beyond)")
	leafLife := cli.PositiveDuration(fs, "leaf-lifetime", ca.DefaultLeafLifetime, "lifetime of minted leaf certificates, a `DURATION` (at most 4320h)")
	grace := cli.NonNegativeDuration(fs, "grace", 5*time.Second, "on shutdown, `DURATION` given to open connections to finish")
	if err := cli.Parse(fs, args); err != nil {
		return err
	}
	if fs.NArg() != 0 {
		return cli.Usagef("serve: unexpected argument %q", fs.Arg(0))
	}
	if *policy == cli.Stdin {
		return cli.Usagef("serve: --policy cannot be '-': the gateway re-reads its policy file whenever it changes")
	}
	y, err := yard.Open(*root)
	if err != nil {
		return err
	}
	org, err := config.LoadOrg(y)
	if err != nil {
		// A writer of the yard may have written it: nothing of it is
		// taken, not even its limits.
		if errors.Is(err, config.ErrUnsafe) || len(listen) == 0 {
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
	gcTarget(lim)
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
	// The daemon's own lines go through Logf: stamped with the time,
	// unless journald stamps them.
	logw := e.LogWriter()
	signer, err := approval.Ensure(home, approval.Gateway, logw, "impgw")
	if err != nil {
		return err
	}
	cfg := gatewayd.Config{Yard: y, Home: home, Minter: minter, Signer: signer,
		PolicyPath: *policy, UpstreamCA: *upstreamCA, Limits: lim, Log: logw, Ready: e.Ready,
		Unsynced: os.Getenv(unsyncedEnv) == "1"}
	if cfg.Unsynced {
		fmt.Fprintf(logw, "impgw: warning: %s=1: decision records are not synced; a power cut can lose the record of a request already forwarded (for benchmarks only)\n", unsyncedEnv)
	}
	if org.Inbound.Listen != "" {
		if cfg.Inbound, err = inbound.New(y, home, org.Inbound, e.Logf); err != nil {
			return cli.WithHint(err, "fix [[inbound.source]] in org.toml, or put the secret in IMPYARD_HOME/secrets")
		}
		listen = append(listen, org.Inbound.Listen)
	}
	lns, err := gatewayd.Listen(listen)
	if err != nil {
		return err
	}
	if cfg.Inbound != nil {
		// The relay's listener, last, serves the relay alone.
		cfg.InboundListener, lns = lns[len(lns)-1], lns[:len(lns)-1]
	}
	srv, err := gatewayd.New(cfg)
	if err != nil {
		for _, ln := range append(lns, cfg.InboundListener) {
			if ln != nil {
				ln.Close()
			}
		}
		return err
	}
	defer e.StoppingOn(ctx)()
	if err := srv.Serve(ctx, lns, *grace); err != nil {
		return err
	}
	e.Logf("stopped")
	return nil
}

// gcPercent and gcSlack set how far the daemon's heap may grow between
// collections: to five times its live data (Go's default is twice), but
// never past twice the body budget plus gcSlack, which Go's default
// reaches only when more than gcSlack/2 is live besides a full budget
// of bodies. The live heap is small (open connections' buffers, the
// policy) and the garbage is per request, so collecting less often is
// most of what collection costs the gateway, while a burst of bodies
// still costs it no more memory than before.
const (
	gcPercent = 400
	gcSlack   = 64 << 20
)

// gcTarget sets the collector's target and soft limit, unless GOGC or
// GOMEMLIMIT in the environment already did.
func gcTarget(lim gateway.Limits) {
	if os.Getenv("GOGC") == "" {
		debug.SetGCPercent(gcPercent)
	}
	if os.Getenv("GOMEMLIMIT") == "" {
		debug.SetMemoryLimit(gcSlack + 2*lim.BodyBudget)
	}
}
