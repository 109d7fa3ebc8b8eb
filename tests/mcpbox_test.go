package tests

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/impyard/impyard/lib/mcpserv"
	"github.com/impyard/impyard/lib/queue"
	runrec "github.com/impyard/impyard/lib/run"
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
// org.toml, and a policy: the door's rules for yuko, and the server's own
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
	var pol struct {
		UpstreamCA string `json:"upstreamCA"`
	}
	raw, _ := os.ReadFile(b.y.PolicyPath())
	json.Unmarshal(raw, &pol)
	door := `"protocol":"https","host":"mcp.impyard","subject":"yuko"`
	rules := fmt.Sprintf(`{"schema":"impyard.policy/1","upstreamCA":%q,"rules":[
	 {"name":"mcp-session","match":{%[2]s,"mcp":{"method":["initialize","notifications/initialized","tools/list","ping"]}},"verdict":"allow"},
	 {"name":"mcp-tools","match":{%[2]s,"mcp":{"method":"tools/call","tool":["echo","get-env","gzip-file-as-resource"]}},"verdict":"allow"},
	 {"name":"every-fetch","match":{"protocol":"https","host":"127.0.0.1","method":"GET","pathPrefix":"/allowed/","network":"127.0.0.0/8","subject":"mcp:every"},"verdict":"allow"}]}`,
		pol.UpstreamCA, door)
	if err := store.WriteAtomic(b.y.PolicyPath(), []byte(rules), filepath.Dir(b.y.PolicyPath())); err != nil {
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
// denied; its credential in no record, no file containerd keeps and no
// imp's box; its box gone when the gateway stops, and removed by the
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

// boxLogMaybe is the box log of task's last run, "" before it has one.
func (b *boxYard) boxLogMaybe(task *queue.Task) string {
	if len(task.Runs) == 0 {
		return ""
	}
	log, _ := os.ReadFile(runrec.Path(b.y, task.Runs[len(task.Runs)-1], "box.log"))
	return string(log)
}
