package tests

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/impyard/impyard/lib/gate"
	"github.com/impyard/impyard/lib/mailbox"
	"github.com/impyard/impyard/lib/mcpserv"
	"github.com/impyard/impyard/lib/queue"
	runrec "github.com/impyard/impyard/lib/run"
	"github.com/impyard/impyard/lib/state"
	"github.com/impyard/impyard/lib/store"
)

// mcpProxy is loaded into the boxed server's node before the server: it
// sends the server's fetches through the gateway, as HTTPS_PROXY says,
// trusting the gateway's CA. Node's own fetch reads no proxy variable.
const mcpProxy = `import { readFileSync } from "node:fs";
import { ProxyAgent, fetch as ufetch } from "undici";
const agent = new ProxyAgent({ uri: process.env.HTTPS_PROXY, requestTls: { ca: readFileSync(process.env.NODE_EXTRA_CA_CERTS) } });
globalThis.fetch = (url, init) => ufetch(url, { ...init, dispatcher: agent });
`

// boxedOrg adds the boxed server every, with its secret, to b's
// org.toml, and a policy: the door's rules for yuko (its gzip of
// gated.gz gated), and the server's own
// fetches from the mail API's /allowed/ as subject mcp:every.
func boxedOrg(t *testing.T, b *boxYard, rootfs string) {
	t.Helper()
	os.WriteFile(filepath.Join(b.home, "secrets", "every-token"), []byte(mcpSecret+"\n"), 0o600)
	org, _ := os.ReadFile(b.y.Path("org.toml"))
	org = fmt.Appendf(org, `
[mcp.every]
command = ["node", "--import", "/opt/mcp/proxy.mjs", "/opt/mcp/node_modules/@modelcontextprotocol/server-everything/dist/index.js", "stdio"]
rootfs = %q
imps = ["yuko"]
env = { EVERY_TOKEN = "every-token" }
idle = "1h"
`, rootfs)
	os.WriteFile(b.y.Path("org.toml"), org, 0o640)
	raw, _ := os.ReadFile(b.y.PolicyPath())
	door := `"protocol":"https","host":"mcp.impyard","subject":"yuko"`
	// Before the yard's own rule, which org.toml's [[trust]] entry names:
	// without it no proposal, a gated call's included, is decided.
	rules := fmt.Sprintf(`"rules":[
	 {"name":"every-gated","match":{%[1]s,"mcp":{"method":"tools/call","tool":"gzip-file-as-resource","arguments":{"/name":"gated.gz"}}},"verdict":"gate"},
	 {"name":"mcp-session","match":{%[1]s,"mcp":{"method":["initialize","notifications/initialized","tools/list","ping"]}},"verdict":"allow"},
	 {"name":"mcp-tools","match":{%[1]s,"mcp":{"method":"tools/call","tool":["echo","get-env","gzip-file-as-resource"]}},"verdict":"allow"},
	 {"name":"every-fetch","match":{"protocol":"https","host":"127.0.0.1","method":"GET","pathPrefix":"/allowed/","network":"127.0.0.0/8","subject":"mcp:every"},"verdict":"allow"},`, door)
	pol := strings.Replace(string(raw), `"rules":[`, rules, 1)
	if !strings.Contains(pol, "every-gated") {
		t.Fatalf("the yard's policy has no rules list:\n%s", raw)
	}
	if err := store.WriteAtomic(b.y.PolicyPath(), []byte(pol), filepath.Dir(b.y.PolicyPath())); err != nil {
		t.Fatal(err)
	}
}

// boxedGateway is an impgw serve of b's yard that the test stops or
// kills itself.
type boxedGateway struct {
	cmd    *exec.Cmd
	listen string
	mu     sync.Mutex
	log    strings.Builder
	done   chan struct{}
}

func startBoxedGateway(t *testing.T, b *boxYard) *boxedGateway {
	t.Helper()
	g := &boxedGateway{cmd: exec.Command(filepath.Join(bin, "impgw"), "serve", "--listen", "127.0.0.1:0"), done: make(chan struct{})}
	g.cmd.Env = append(os.Environ(), b.env...)
	pr, pw, _ := os.Pipe()
	g.cmd.Stderr = pw
	if err := g.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	pw.Close()
	addr := make(chan string, 1)
	go func() {
		defer close(g.done)
		sc := bufio.NewScanner(pr)
		for sc.Scan() {
			g.mu.Lock()
			g.log.WriteString(sc.Text() + "\n")
			g.mu.Unlock()
			if _, rest, ok := strings.Cut(sc.Text(), " serving on "); ok {
				a, _, _ := strings.Cut(rest, " ")
				select {
				case addr <- a:
				default:
				}
			}
		}
	}()
	t.Cleanup(func() {
		g.cmd.Process.Kill()
		g.cmd.Wait()
		if t.Failed() {
			t.Logf("impgw stderr:\n%s", g.logged())
		}
	})
	select {
	case g.listen = <-addr:
	case <-g.done:
		t.Fatalf("impgw ended:\n%s", g.logged())
	}
	return g
}

func (g *boxedGateway) logged() string {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.log.String()
}

// stop ends impgw with sig and waits for its end.
func (g *boxedGateway) stop(t *testing.T, sig os.Signal) {
	t.Helper()
	g.cmd.Process.Signal(sig)
	g.cmd.Wait()
	<-g.done
}

// serverBoxes lists the containers of boxed MCP servers in namespace ns
// and the shims that serve them.
func serverBoxes(t *testing.T, ns string) (ids, shims []string) {
	t.Helper()
	out, err := exec.Command("ctr", "--address", boxes.Sock, "-n", ns, "containers", "ls", "-q").Output()
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range strings.Fields(string(out)) {
		if strings.HasPrefix(id, "mcp-every-") {
			ids = append(ids, id)
		}
	}
	cmdlines, _ := filepath.Glob("/proc/[0-9]*/cmdline")
	for _, f := range cmdlines {
		b, _ := os.ReadFile(f)
		if strings.Contains(string(b), "containerd-shim") && strings.Contains(string(b), "\x00"+ns+"\x00") {
			shims = append(shims, f)
		}
	}
	return ids, shims
}

// TestMCPServerBoxed is a boxed stdio MCP server end to end: the
// reference server-everything from npm in a box rootfs with node, called
// through the door by the official SDK client with an imp's token; its
// own fetches judged and recorded as subject mcp:every, allowed and
// denied; a gated call whose tool fetches, approved and made by the
// gateway for impexec once, that fetch judged as mcp:every too, and left
// approved (exit 111) while no gateway runs; its credential in no
// record, no file containerd keeps and no imp's box; its box gone when the gateway stops, and removed by the
// next gateway when the last one was killed.
func TestMCPServerBoxed(t *testing.T) {
	peers := mcpPeers(t)
	b := newBoxYard(t)
	t.Cleanup(func() { removeBoxes(b.ns) })
	rootfs := needMCPRootfs(t)
	boxedOrg(t, b, rootfs)
	gw := startBoxedGateway(t, b)
	spineListen := b.listen
	b.listen = gw.listen
	tok := b.token(t, "yuko")
	c := startMCPClient(t, b.spine, peers, tok, "https://mcp.impyard/every")
	b.listen = spineListen

	t.Run("Call", func(t *testing.T) {
		a := c.do(t, `{"op":"call","name":"echo","arguments":{"message":"hello box"}}`)
		if a.Error != nil || !strings.Contains(string(a.OK), "Echo: hello box") {
			t.Fatalf("echo: %s %+v", a.OK, a.Error)
		}
		st := serverState(t, b.spine, func(st mcpserv.State) bool { return st.State == mcpserv.StateRunning })
		if st.Isolation != "box" || st.Imp != "yuko" || st.PID == 0 {
			t.Fatalf("state: %+v", st)
		}
		ids, _ := serverBoxes(t, b.ns)
		if len(ids) != 1 {
			t.Fatalf("server boxes: %v", ids)
		}
	})
	t.Run("OutboundJudged", func(t *testing.T) {
		base := b.mail.srv.URL
		for _, tc := range []struct{ path, verdict string }{{"/allowed/page", "allow"}, {"/secret/page", "deny"}} {
			a := c.do(t, fmt.Sprintf(`{"op":"call","name":"gzip-file-as-resource","arguments":{"name":"p.gz","data":%q,"outputType":"resource"}}`, base+tc.path))
			if a.Error != nil {
				t.Fatalf("gzip %s: %+v", tc.path, a.Error)
			}
			rec := findRecord(t, b.spine, func(r map[string]any) bool {
				q, _ := r["request"].(map[string]any)
				return q != nil && q["path"] == tc.path
			})
			q := rec["request"].(map[string]any)
			if q["imp"] != "mcp:every" || rec["verdict"] != tc.verdict {
				t.Fatalf("record of the server's fetch of %s: %v", tc.path, rec)
			}
		}
		b.mail.mu.Lock()
		keys := len(b.mail.keys)
		b.mail.mu.Unlock()
		if keys != 1 {
			t.Fatalf("the mail API saw %d requests, want the allowed one only", keys)
		}
	})
	// Two gated calls whose tool fetches: the first approved and made by
	// the gateway for impexec, its fetch judged as mcp:every; the second
	// approved and left for a gateway that is down (GatewayStops).
	var later string
	t.Run("GatedCallNetwork", func(t *testing.T) {
		gated := func(path string) string {
			a := c.do(t, fmt.Sprintf(`{"op":"call","name":"gzip-file-as-resource","arguments":{"name":"gated.gz","data":%q,"outputType":"resource"}}`, b.mail.srv.URL+path))
			if a.Error == nil || !strings.Contains(a.Error.Message, "pending approval g-") {
				t.Fatalf("gated gzip of %s: want pending approval, got %s %+v", path, a.OK, a.Error)
			}
			return strings.TrimSuffix(strings.Fields(strings.SplitN(a.Error.Message, "pending approval ", 2)[1])[0], ":")
		}
		gid := gated("/allowed/gated")
		later = gated("/allowed/later")
		// Approved is not executing: the gateway makes no call of it.
		approveOnly(t, b, gid)
		if status, body := askSocket(t, b.home, gid); status != http.StatusForbidden || !strings.Contains(body, "is approved, not executing") {
			t.Fatalf("socket call of approved gate %s: %d %s", gid, status, body)
		}
		if out, err := b.run(t, "impexec", "once", gid); err != nil {
			t.Fatalf("impexec once %s: %v\n%s", gid, err, out)
		}
		if g := b.waitState(t, gid, state.Executed, state.Failed); g.State != state.Executed {
			t.Fatalf("gate %s: %s %s", gid, g.State, g.Result)
		}
		rec := findRecord(t, b.spine, func(r map[string]any) bool {
			q, _ := r["request"].(map[string]any)
			return q != nil && q["path"] == "/allowed/gated"
		})
		if q := rec["request"].(map[string]any); q["imp"] != "mcp:every" || rec["verdict"] != "allow" {
			t.Fatalf("record of the approved call's fetch: %v", rec)
		}
		msgs, err := mailbox.Undelivered(b.y, "yuko")
		if err != nil || len(msgs) != 1 || !strings.Contains(msgs[0].Text, gid) || !strings.Contains(msgs[0].Text, "gated.gz") {
			t.Fatalf("mailbox: %+v %v", msgs, err)
		}
		// Executed is not executing either.
		if status, body := askSocket(t, b.home, gid); status != http.StatusForbidden || !strings.Contains(body, "is executed, not executing") {
			t.Fatalf("socket call of executed gate %s: %d %s", gid, status, body)
		}
		approveOnly(t, b, later)
	})
	t.Run("Secret", func(t *testing.T) {
		a := c.do(t, `{"op":"call","name":"get-env"}`)
		if a.Error != nil || !strings.Contains(string(a.OK), `EVERY_TOKEN\": \"[redacted]`) || strings.Contains(string(a.OK), mcpSecret) {
			t.Fatalf("get-env: want EVERY_TOKEN given and redacted, got %s %+v", a.OK, a.Error)
		}
		ids, _ := serverBoxes(t, b.ns)
		info, err := exec.Command("ctr", "--address", boxes.Sock, "-n", b.ns, "containers", "info", ids[0]).Output()
		if err != nil || strings.Contains(string(info), mcpSecret) || !strings.Contains(string(info), "IFS= read -r EVERY_TOKEN") {
			t.Fatalf("the box's spec: want the preamble and no secret: %v\n%s", err, info)
		}
		// containerd's root and state (its metadata, the bundle's
		// config.json) and the yard hold it nowhere.
		for _, dir := range []string{boxes.Dir, b.y.Root} {
			filepath.Walk(dir, func(p string, fi os.FileInfo, err error) error {
				if err == nil && fi.Mode().IsRegular() && !strings.HasPrefix(p, rootfs+"/") {
					if content, _ := os.ReadFile(p); strings.Contains(string(content), mcpSecret) {
						t.Errorf("%s holds the server's credential", p)
					}
				}
				return nil
			})
		}
	})
	t.Run("NotInImpsBox", func(t *testing.T) {
		// The imp's box looks at every process it can see, its
		// environment and command line; the secret is spelled in two
		// halves so that no command line holds it whole.
		half := len(mcpSecret) / 2
		script := fmt.Sprintf(`a=%s; b=%s; echo "$a$b" > /tmp/needle; n=0; for f in /proc/[0-9]*; do n=$((n+1)); grep -qF -f /tmp/needle $f/environ $f/cmdline 2>/dev/null && echo "found in $f"; done; echo "scanned $n"`, mcpSecret[:half], mcpSecret[half:])
		b.imp(t, "yuko", map[string]string{"command": fmt.Sprintf(`["/bin/sh", "-c", %q]`, script)})
		task := b.task(t, b.add(t, "yuko", "look around"))
		b.once(t)
		deadline := time.Now().Add(30 * time.Second)
		for {
			task = b.task(t, task.ID)
			if log := b.boxLogMaybe(task); strings.Contains(log, "scanned") {
				if strings.Contains(log, "found") || strings.Contains(log, mcpSecret) {
					t.Fatalf("the imp's box sees the server's credential:\n%s", log)
				}
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("the imp's box never scanned: %s %s", task.State, task.Reason)
			}
			time.Sleep(100 * time.Millisecond)
		}
	})
	t.Run("StatusSaysBox", func(t *testing.T) {
		out, err := b.run(t, "impsup", "status")
		if err != nil || !regexp.MustCompile(`every\s+yuko\s+box\s+running`).MatchString(out) {
			t.Errorf("impsup status: want server every boxed and running: %v\n%s", err, out)
		}
	})
	t.Run("GatewayStops", func(t *testing.T) {
		ids, _ := serverBoxes(t, b.ns)
		gw.stop(t, os.Interrupt)
		if left, shims := serverBoxes(t, b.ns); len(left) != 0 || len(shims) != 0 {
			t.Fatalf("after impgw stopped: boxes %v, shims %v", left, shims)
		}
		if _, err := os.Stat(filepath.Join("/run/impyard/netns", ids[0])); err == nil {
			t.Fatalf("the namespace of %s is left", ids[0])
		}
		// With no gateway to make it, an approved call is not begun: the
		// gate stays approved, to be tried again (exit 111).
		out, err := b.run(t, "impexec", "once", later)
		var ee *exec.ExitError
		if !errors.As(err, &ee) || ee.ExitCode() != 111 || !strings.Contains(out, "gateway unreachable") {
			t.Fatalf("impexec once %s with the gateway down: want exit 111, gateway unreachable: %v\n%s", later, err, out)
		}
		if g, err := gate.Get(b.y, later); err != nil || g.State != state.Approved {
			t.Fatalf("gate %s after impexec once with the gateway down: %+v %v", later, g, err)
		}
		b.mail.mu.Lock()
		keys := len(b.mail.keys)
		b.mail.mu.Unlock()
		if keys != 2 {
			t.Fatalf("the mail API saw %d requests, want the two allowed before only", keys)
		}
	})
	t.Run("GatewayKilled", func(t *testing.T) {
		gw := startBoxedGateway(t, b)
		b.listen = gw.listen
		c := startMCPClient(t, b.spine, peers, tok, "https://mcp.impyard/every")
		b.listen = spineListen
		if a := c.do(t, `{"op":"call","name":"echo","arguments":{"message":"again"}}`); a.Error != nil {
			t.Fatalf("echo: %+v", a.Error)
		}
		gw.stop(t, syscall.SIGKILL)
		orphans, _ := serverBoxes(t, b.ns)
		if len(orphans) != 1 {
			t.Fatalf("after SIGKILL: boxes %v, want the orphan", orphans)
		}
		// The next gateway removes it before it boxes anything.
		next := startBoxedGateway(t, b)
		if !strings.Contains(next.logged(), "removed the box "+orphans[0]) {
			t.Fatalf("the next impgw did not say it removed %s:\n%s", orphans[0], next.logged())
		}
		if left, shims := serverBoxes(t, b.ns); len(left) != 0 || len(shims) != 0 {
			t.Fatalf("after the next impgw started: boxes %v, shims %v", left, shims)
		}
		if _, err := os.Stat(filepath.Join("/run/impyard/netns", orphans[0])); err == nil {
			t.Fatalf("the namespace of %s is left", orphans[0])
		}
		next.stop(t, os.Interrupt)
	})
}

// approveOnly approves gate gid at impgate, leaving its execution to the
// test.
func approveOnly(t *testing.T, b *boxYard, gid string) {
	t.Helper()
	if out, err := b.run(t, "impgate", "approve", gid); err != nil {
		t.Fatalf("impgate approve %s: %v\n%s", gid, err, out)
	}
}

// askSocket asks the gateway's socket in homeDir, as impexec does, to
// make the call of gate gid, and returns its answer.
func askSocket(t *testing.T, homeDir, gid string) (int, string) {
	t.Helper()
	c := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "unix", filepath.Join(homeDir, "sock", "impgw"))
	}}}
	defer c.CloseIdleConnections()
	resp, err := c.Post("http://impgw/v1/mcp/call", "application/json", strings.NewReader(fmt.Sprintf(`{"gate":%q}`, gid)))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body)
}

// boxLogMaybe is the box log of task's last run, "" before it has one.
func (b *boxYard) boxLogMaybe(task *queue.Task) string {
	if len(task.Runs) == 0 {
		return ""
	}
	log, _ := os.ReadFile(runrec.Path(b.y, task.Runs[len(task.Runs)-1], "box.log"))
	return string(log)
}
