package tests

import (
	"bufio"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
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
	"github.com/impyard/impyard/lib/store"
)

// mcpSecret is the credential the server is given; it must reach no box,
// record, gate or mailbox.
const mcpSecret = "mcp_tok_9f2c_never_in_a_box"

// mcpPeers installs the pinned npm packages of testdata/mcp (the
// reference server, the SDK client) once per version set, in a cache
// directory this test owns, and returns it.
func mcpPeers(t *testing.T) string {
	t.Helper()
	pkg, err := os.ReadFile("testdata/mcp/package.json")
	if err != nil {
		t.Fatal(err)
	}
	client, err := os.ReadFile("testdata/mcp/client.mjs")
	if err != nil {
		t.Fatal(err)
	}
	cache, err := os.UserCacheDir()
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(pkg)
	dir := filepath.Join(cache, "impyard-tests", "mcp-"+hex.EncodeToString(sum[:6]))
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	// Two test processes may install at once: one does, under the lock.
	unlock, err := store.Lock(filepath.Join(dir, ".lock"))
	if err != nil {
		t.Fatal(err)
	}
	defer unlock()
	done := filepath.Join(dir, ".installed")
	if _, err := os.Stat(done); err != nil {
		os.WriteFile(filepath.Join(dir, "package.json"), pkg, 0o644)
		cmd := exec.Command("npm", "install", "--no-audit", "--no-fund", "--no-save")
		cmd.Dir = dir
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("npm install in %s: %v\n%s", dir, err, out)
		}
		os.WriteFile(done, pkg, 0o644)
	}
	if err := os.WriteFile(filepath.Join(dir, "client.mjs"), client, 0o644); err != nil {
		t.Fatal(err)
	}
	return dir
}

// mcpClient is the SDK client, one process, driven a command at a time.
type mcpClient struct {
	in  io.WriteCloser
	out *bufio.Scanner
}

type mcpAnswer struct {
	OK    json.RawMessage `json:"ok"`
	Error *struct {
		Code    *int   `json:"code"`
		Message string `json:"message"`
	} `json:"error"`
}

func (c *mcpClient) do(t *testing.T, cmd string) mcpAnswer {
	t.Helper()
	if _, err := io.WriteString(c.in, cmd+"\n"); err != nil {
		t.Fatal(err)
	}
	return c.read(t)
}

func (c *mcpClient) read(t *testing.T) mcpAnswer {
	t.Helper()
	if !c.out.Scan() {
		t.Fatalf("client ended: %v", c.out.Err())
	}
	var a mcpAnswer
	if err := json.Unmarshal(c.out.Bytes(), &a); err != nil {
		t.Fatalf("client said %s: %v", c.out.Bytes(), err)
	}
	return a
}

func startMCPClient(t *testing.T, s *spine, peers, tok, url string) *mcpClient {
	t.Helper()
	cmd := exec.Command("node", filepath.Join(peers, "client.mjs"), url)
	cmd.Env = append(os.Environ(), "HTTPS_PROXY=http://yuko:"+tok+"@"+s.listen, "NODE_EXTRA_CA_CERTS="+filepath.Join(s.home, "ca", "ca.crt"))
	in, _ := cmd.StdinPipe()
	out, _ := cmd.StdoutPipe()
	var errOut strings.Builder
	cmd.Stderr = &errOut
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		in.Close()
		cmd.Process.Kill()
		cmd.Wait()
		if t.Failed() {
			t.Logf("client stderr:\n%s", errOut.String())
		}
	})
	c := &mcpClient{in: in, out: bufio.NewScanner(out)}
	c.out.Buffer(nil, 4<<20)
	if a := c.read(t); a.Error != nil {
		t.Fatalf("connect: %s", a.Error.Message)
	}
	return c
}

// mcpBase holds each spine's policy as it was before mcpPolicy first
// wrote it: its rules (email-send's, which org.toml's trust entry
// names) stay in force beside the door's.
var mcpBase sync.Map

// mcpPolicy is the spine's policy with the door's rules; extra rules
// come first.
func mcpPolicy(t *testing.T, s *spine, extra string) {
	t.Helper()
	b, err := os.ReadFile(s.y.PolicyPath())
	if err != nil {
		t.Fatal(err)
	}
	v, _ := mcpBase.LoadOrStore(s, string(b))
	base := v.(string)
	door := `"protocol":"https","host":"mcp.impyard","subject":"yuko"`
	rules := extra + `
	 {"name":"mcp-session","match":{` + door + `,"mcp":{"method":["initialize","notifications/initialized","notifications/cancelled","tools/list","ping"]}},"verdict":"allow"},
	 {"name":"mcp-read","match":{` + door + `,"mcp":{"method":"tools/call","tool":["echo","get-env","trigger-long-running-operation","toggle-simulated-logging"]}},"verdict":"allow"},
	 {"name":"mcp-sum","match":{` + door + `,"mcp":{"method":"tools/call","tool":"get-sum"}},"verdict":"gate"},`
	pol := strings.Replace(base, `"rules":[`, `"rules":[`+rules, 1)
	// Written whole and renamed, as an owner's editor does: the gateway
	// takes up the new policy at its next request.
	if err := store.WriteAtomic(s.y.PolicyPath(), []byte(pol), filepath.Dir(s.y.PolicyPath())); err != nil {
		t.Fatal(err)
	}
}

// waitFile waits until the file at path holds want, as fsnotify-free
// polling of a file another process appends to.
func waitFile(t *testing.T, path, want string) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		b, _ := os.ReadFile(path)
		if strings.Contains(string(b), want) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s never held %q:\n%s", path, want, b)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// hostEvery adds to s's org.toml the server every, the npm
// server-everything of peers run on the host for yuko with its secret,
// every line it reads logged to the file it returns.
func hostEvery(t *testing.T, s *spine, peers string) (calls string) {
	t.Helper()
	os.WriteFile(filepath.Join(s.home, "secrets", "every-token"), []byte(mcpSecret+"\n"), 0o600)
	calls = filepath.Join(t.TempDir(), "calls.log")
	org, _ := os.ReadFile(s.y.Path("org.toml"))
	org = fmt.Appendf(org, `
[mcp.every]
command = ["sh", "-c", "tee -a \"$0\" | exec node \"$1\" stdio", %q, %q]
isolation = "host"
imps = ["yuko"]
env = { EVERY_TOKEN = "every-token" }
idle = "1h"
`, calls, filepath.Join(peers, "node_modules", "@modelcontextprotocol", "server-everything", "dist", "index.js"))
	os.WriteFile(s.y.Path("org.toml"), org, 0o640)
	return calls
}

// serverState reads the gateway's state of the every server, waiting
// until ok accepts it.
func serverState(t *testing.T, s *spine, ok func(mcpserv.State) bool) mcpserv.State {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		st, err := mcpserv.ReadStatus(s.y)
		if err == nil {
			for _, sv := range st.Servers {
				if sv.Server == "every" && ok(sv) {
					return sv
				}
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("server state never came: %+v %v", st, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestMCPServer is a host-side stdio MCP server behind the door, end to
// end with peers nobody here wrote: the reference server-everything from
// npm, run by impgw, called by the official SDK client through impgw
// with an imp's token, as a box calls; a gated call approved at impgate,
// made by impexec, its result in the imp's mailbox.
func TestMCPServer(t *testing.T) {
	peers := mcpPeers(t)
	s := newSpine(t, false, bin)
	s.daemon(t, bin, "impexec", "run", "--rescan", "1s")
	calls := hostEvery(t, s, peers)
	mcpPolicy(t, s, "")
	tok := s.token(t, "yuko")
	c := startMCPClient(t, s, peers, tok, "https://mcp.impyard/every")

	t.Run("ListTools", func(t *testing.T) {
		a := c.do(t, `{"op":"list"}`)
		if a.Error != nil || !strings.Contains(string(a.OK), `"name":"echo"`) || !strings.Contains(string(a.OK), `"name":"get-sum"`) {
			t.Fatalf("tools/list: %s %+v", a.OK, a.Error)
		}
	})
	t.Run("AllowedCall", func(t *testing.T) {
		a := c.do(t, `{"op":"call","name":"echo","arguments":{"message":"hello door"}}`)
		if a.Error != nil || !strings.Contains(string(a.OK), "Echo: hello door") {
			t.Fatalf("echo: %s %+v", a.OK, a.Error)
		}
		rec := findRecord(t, s, func(r map[string]any) bool { return r["rule"] == "mcp-read" })
		if rec["verdict"] != "allow" {
			t.Fatalf("record: %v", rec)
		}
	})
	t.Run("DeniedCall", func(t *testing.T) {
		a := c.do(t, `{"op":"call","name":"get-tiny-image"}`)
		if a.Error == nil || a.Error.Code == nil || *a.Error.Code != mcpserv.CodeDenied || !strings.Contains(a.Error.Message, "no rule matched") {
			t.Fatalf("get-tiny-image: want JSON-RPC error %d, got %s %+v", mcpserv.CodeDenied, a.OK, a.Error)
		}
		// The echo after it is the server's proof of order: it saw that,
		// and never the denied call.
		c.do(t, `{"op":"call","name":"echo","arguments":{"message":"after deny"}}`)
		waitFile(t, calls, "after deny")
		if b, _ := os.ReadFile(calls); strings.Contains(string(b), "get-tiny-image") {
			t.Fatalf("the denied call reached the server:\n%s", b)
		}
	})
	t.Run("Credential", func(t *testing.T) {
		a := c.do(t, `{"op":"call","name":"get-env"}`)
		if a.Error != nil || !strings.Contains(string(a.OK), `EVERY_TOKEN\": \"[redacted]`) {
			t.Fatalf("get-env: want EVERY_TOKEN given and redacted, got %s %+v", a.OK, a.Error)
		}
		if strings.Contains(string(a.OK), mcpSecret) {
			t.Fatal("the server's credential reached the client")
		}
	})
	t.Run("GatedCall", func(t *testing.T) {
		a := c.do(t, `{"op":"call","name":"get-sum","arguments":{"a":2,"b":3}}`)
		if a.Error == nil || a.Error.Code == nil || *a.Error.Code != mcpserv.CodePending || !strings.Contains(a.Error.Message, "pending approval g-") {
			t.Fatalf("get-sum: want pending approval, got %s %+v", a.OK, a.Error)
		}
		gid := "g-" + strings.Fields(strings.SplitN(a.Error.Message, "pending approval g-", 2)[1])[0]
		gid = strings.TrimRight(gid, ":")
		g, err := gate.Get(s.y, gid)
		if err != nil {
			t.Fatal(err)
		}
		var p map[string]any
		json.Unmarshal(g.Payload, &p)
		if g.Intent != "mcp.every" || g.Imp != "yuko" || fmt.Sprint(p) != "map[arguments:map[a:2 b:3] server:every tool:get-sum]" {
			t.Fatalf("gate %s: intent %s imp %s payload %s", gid, g.Intent, g.Imp, g.Payload)
		}
		if b, _ := os.ReadFile(calls); strings.Contains(string(b), "get-sum") {
			t.Fatalf("the gated call reached the server before approval:\n%s", b)
		}
		if rec := findRecord(t, s, func(r map[string]any) bool { return r["rule"] == "mcp-sum" }); rec["verdict"] != "gate" {
			t.Fatalf("record of the gated call: %v", rec)
		}
		s.approveExecuted(t, gid)
		msgs, err := mailbox.Undelivered(s.y, "yuko")
		if err != nil {
			t.Fatal(err)
		}
		if len(msgs) != 1 || !strings.Contains(msgs[0].Text, "The sum of 2 and 3 is 5") || !strings.Contains(msgs[0].Text, gid) {
			t.Fatalf("mailbox: %+v", msgs)
		}
	})
	t.Run("Notifications", func(t *testing.T) {
		// Progress of a long call reaches the client while it runs.
		a := c.do(t, `{"op":"call","name":"trigger-long-running-operation","arguments":{"duration":1,"steps":3},"progress":true}`)
		if a.Error != nil || strings.Count(string(a.OK), `"total":3`) != 3 || !strings.Contains(string(a.OK), "Long running operation completed") {
			t.Fatalf("long call: want its result after 3 progress notifications, got %s %+v", a.OK, a.Error)
		}
		// The server's log messages too: server-everything sends one as
		// its simulated logging starts, during the call that starts it.
		a = c.do(t, `{"op":"call","name":"toggle-simulated-logging"}`)
		if a.Error != nil {
			t.Fatalf("toggle-simulated-logging: %+v", a.Error)
		}
		c.do(t, `{"op":"call","name":"toggle-simulated-logging"}`)
		if a = c.do(t, `{"op":"logs"}`); !strings.Contains(string(a.OK), `"level":`) {
			t.Fatalf("log messages at the client: %s %+v", a.OK, a.Error)
		}
	})
	t.Run("CrashMidCall", func(t *testing.T) {
		before := serverState(t, s, func(st mcpserv.State) bool { return st.State == mcpserv.StateRunning })
		if _, err := io.WriteString(c.in, `{"op":"call","name":"trigger-long-running-operation","arguments":{"duration":60,"steps":60}}`+"\n"); err != nil {
			t.Fatal(err)
		}
		// The call of this subtest, not the short one before: killed
		// before this one is written, the server never saw it, and it
		// is rightly made again on the next process.
		waitFile(t, calls, `"duration":60`)
		if err := syscall.Kill(-before.PID, syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
		a := c.read(t)
		if a.Error == nil || a.Error.Code == nil || *a.Error.Code != mcpserv.CodeServer {
			t.Fatalf("the call the crash cut: want JSON-RPC error %d, got %s %+v", mcpserv.CodeServer, a.OK, a.Error)
		}
		a = c.do(t, `{"op":"call","name":"echo","arguments":{"message":"back again"}}`)
		if a.Error != nil || !strings.Contains(string(a.OK), "Echo: back again") {
			t.Fatalf("echo after the crash: %s %+v", a.OK, a.Error)
		}
		after := serverState(t, s, func(st mcpserv.State) bool { return st.State == mcpserv.StateRunning && st.PID != before.PID })
		if after.Restarts < 1 || !strings.Contains(after.LastError, "exited") {
			t.Fatalf("state after the crash: %+v", after)
		}
	})
	t.Run("ArgumentsOutsideRule", func(t *testing.T) {
		// Needs the judge's "arguments" match: the echo rule allows one
		// message only, and the door asks the judge about each call.
		door := `"protocol":"https","host":"mcp.impyard","subject":"yuko"`
		mcpPolicy(t, s, `{"name":"echo-hello","match":{`+door+`,"mcp":{"method":"tools/call","tool":"echo","arguments":{"/message":"hello"}}},"verdict":"allow"},
		 {"name":"echo-other","match":{`+door+`,"mcp":{"method":"tools/call","tool":"echo"}},"verdict":"deny"},`)
		t.Cleanup(func() { mcpPolicy(t, s, "") })
		a := c.do(t, `{"op":"call","name":"echo","arguments":{"message":"hello"}}`)
		if a.Error != nil || !strings.Contains(string(a.OK), "Echo: hello") {
			t.Fatalf("echo inside its rule: %s %+v", a.OK, a.Error)
		}
		a = c.do(t, `{"op":"call","name":"echo","arguments":{"message":"exfiltrate"}}`)
		if a.Error == nil || a.Error.Code == nil || *a.Error.Code != mcpserv.CodeDenied {
			t.Fatalf("echo outside its rule: want JSON-RPC error %d, got %s %+v", mcpserv.CodeDenied, a.OK, a.Error)
		}
		if b, _ := os.ReadFile(calls); strings.Contains(string(b), "exfiltrate") {
			t.Fatalf("the refused call reached the server:\n%s", b)
		}
	})

	t.Run("TrustAuto", func(t *testing.T) {
		// An owner's [[trust]] entry approves a gated call by its server,
		// tool and arguments, as it approves any proposal.
		org, _ := os.ReadFile(s.y.Path("org.toml"))
		os.WriteFile(s.y.Path("org.toml"), append(org, `
[[trust]]
intent = "mcp.every"
imp = "yuko"
match = { server = "every", tool = "get-sum", "arguments.a" = "40", "arguments.b" = "*" }
level = "auto"
`...), 0o640)
		t.Cleanup(func() { os.WriteFile(s.y.Path("org.toml"), org, 0o640) })
		a := c.do(t, `{"op":"call","name":"get-sum","arguments":{"a":40,"b":2}}`)
		if a.Error == nil || a.Error.Code == nil || *a.Error.Code != mcpserv.CodePending || !strings.Contains(a.Error.Message, "approved g-") {
			t.Fatalf("get-sum 40+2: want approved by trust, got %s %+v", a.OK, a.Error)
		}
		gid := strings.Fields(strings.SplitN(a.Error.Message, "approved ", 2)[1])[0]
		waitGate(t, s, gid, "executed")
		msgs, _ := mailbox.Undelivered(s.y, "yuko")
		if len(msgs) == 0 || !strings.Contains(msgs[len(msgs)-1].Text, "The sum of 40 and 2 is 42") {
			t.Fatalf("mailbox: %+v", msgs)
		}
		// Arguments outside the entry: gated for a human.
		a = c.do(t, `{"op":"call","name":"get-sum","arguments":{"a":41,"b":2}}`)
		if a.Error == nil || !strings.Contains(a.Error.Message, "pending approval g-") {
			t.Fatalf("get-sum 41+2: want pending approval, got %s %+v", a.OK, a.Error)
		}
	})
	t.Run("GateCap", func(t *testing.T) {
		// The door's gates count against the token's gates_per_run like
		// any proposal's: three are filed above.
		org, _ := os.ReadFile(s.y.Path("org.toml"))
		os.WriteFile(s.y.Path("org.toml"), append(org, "\n[budget.yuko]\ngates_per_run = 3\n"...), 0o640)
		t.Cleanup(func() { os.WriteFile(s.y.Path("org.toml"), org, 0o640) })
		before, _ := gate.List(s.y, gate.Filter{All: true})
		a := c.do(t, `{"op":"call","name":"get-sum","arguments":{"a":7,"b":7}}`)
		if a.Error == nil || a.Error.Code == nil || *a.Error.Code != mcpserv.CodeDenied || !strings.Contains(a.Error.Message, "gates_per_run") {
			t.Fatalf("a gate past the cap: want refused, got %s %+v", a.OK, a.Error)
		}
		if after, _ := gate.List(s.y, gate.Filter{All: true}); len(after) != len(before) {
			t.Fatalf("%d gates after the refusal, %d before", len(after), len(before))
		}
	})
	t.Run("Paused", func(t *testing.T) {
		if code, out := s.exitCode(t, "impsup", "pause", "yuko", "--reason", "owner away"); code != 0 && code != 111 {
			t.Fatalf("impsup pause: exit %d\n%s", code, out)
		}
		t.Cleanup(func() { s.run(t, "impsup", "resume", "yuko") })
		a := c.do(t, `{"op":"call","name":"echo","arguments":{"message":"while paused"}}`)
		if a.Error == nil || !strings.Contains(a.Error.Message, "owner away") {
			t.Fatalf("a paused imp's call: want refused naming the pause, got %s %+v", a.OK, a.Error)
		}
		if b, _ := os.ReadFile(calls); strings.Contains(string(b), "while paused") {
			t.Fatalf("a paused imp's call reached the server:\n%s", b)
		}
	})

	// The credential is in no record, gate or mailbox message.
	for _, dir := range []string{s.y.Path("runs"), s.y.Path("gates"), s.y.Path("mailbox"), s.y.Path("journal"), s.y.Path("mcp")} {
		filepath.Walk(dir, func(p string, fi os.FileInfo, err error) error {
			if err == nil && fi.Mode().IsRegular() {
				if b, _ := os.ReadFile(p); strings.Contains(string(b), mcpSecret) {
					t.Errorf("%s holds the server's credential", p)
				}
			}
			return nil
		})
	}
	out, err := s.run(t, "impsup", "doctor")
	if !strings.Contains(out, "ok    mcp.every") || !strings.Contains(out, "for yuko running") {
		t.Errorf("impsup doctor: want mcp.every checked and running: %v\n%s", err, out)
	}
	out, err = s.run(t, "impsup", "status")
	if err != nil || !regexp.MustCompile(`every\s+yuko\s+host\s+running`).MatchString(out) {
		t.Errorf("impsup status: want server every listed running: %v\n%s", err, out)
	}
}

// mcpRootfs is a box rootfs with node and the MCP peers in /opt/mcp,
// made once per test binary beside the box harness's own: imps run the
// SDK client in it, and boxed servers run server-everything.
var mcpRootfs struct {
	once sync.Once
	dir  string
	err  error
}

// needMCPRootfs makes it: scripts/mkrootfs's busybox, the host's node
// with the libraries it is linked against (on the PATH a boxed server's
// command is looked up in, /usr/local/bin), testdata/mcp's packages,
// box.mjs, the SDK client's script, and proxy.mjs, the preload that
// sends a server's fetches through the gateway.
func needMCPRootfs(t *testing.T) string {
	t.Helper()
	boxes.Need(t)
	peers := mcpPeers(t)
	mcpRootfs.once.Do(func() {
		mcpRootfs.dir = filepath.Join(boxes.Dir, "mcp-rootfs")
		script := `set -eu
dir=$1 peers=$2
scripts/mkrootfs "$dir" >/dev/null
node=$(command -v node)
install -D -m 0755 "$node" "$dir/usr/local/bin/node"
for lib in $(ldd "$node" | grep -o '/[^ ]*'); do
  mkdir -p "$dir$(dirname "$lib")"
  cp -L "$lib" "$dir$lib"
done
rm -rf "$dir/opt/mcp"
mkdir -p "$dir/opt/mcp"
cp -a "$peers/node_modules" "$dir/opt/mcp/"
cp tests/testdata/mcp/box.mjs "$dir/opt/mcp/box.mjs"
mkdir -p "$dir/etc/impyard"`
		cmd := exec.Command("bash", "-c", script, "mkrootfs", mcpRootfs.dir, peers)
		cmd.Dir = ".."
		if out, err := cmd.CombinedOutput(); err != nil {
			mcpRootfs.err = fmt.Errorf("making the MCP rootfs: %v\n%s", err, out)
			return
		}
		mcpRootfs.err = os.WriteFile(filepath.Join(mcpRootfs.dir, "opt", "mcp", "proxy.mjs"), []byte(mcpProxy), 0o644)
	})
	if mcpRootfs.err != nil {
		t.Fatal(mcpRootfs.err)
	}
	return mcpRootfs.dir
}

// boxStep is one step of box.mjs, as its box's log has it.
type boxStep struct {
	Step  string          `json:"step"`
	OK    json.RawMessage `json:"ok"`
	Error *struct {
		Code    *int   `json:"code"`
		Message string `json:"message"`
	} `json:"error"`
}

func (st boxStep) code() int {
	if st.Error == nil || st.Error.Code == nil {
		return 0
	}
	return *st.Error.Code
}

// TestMCPFromBox is the door as an imp meets it: the official SDK
// client, run by node in a real box, reaches the reference server
// through impgw with its run's token and the yard's CA. tools/list; an
// allowed call; a denied one and one whose arguments are outside its
// rule, both JSON-RPC errors that never reach the server; a gated call,
// filed for the run, approved, its result in the imp's mailbox; a
// long call's progress reaching the client while it runs; a call the
// client cancels, the server told; a server killed mid-call, the caller
// told at once, and the next call served by its restart.
func TestMCPFromBox(t *testing.T) {
	rootfs := needMCPRootfs(t)
	peers := mcpPeers(t)
	b := newBoxYard(t)
	b.daemon(t, bin, "impexec", "run", "--rescan", "1s")
	calls := hostEvery(t, b.spine, peers)
	door := `"protocol":"https","host":"mcp.impyard","subject":"yuko"`
	mcpPolicy(t, b.spine, `{"name":"echo-hello","match":{`+door+`,"mcp":{"method":"tools/call","tool":"echo","arguments":{"/message":"hello*"}}},"verdict":"allow"},
	 {"name":"echo-other","match":{`+door+`,"mcp":{"method":"tools/call","tool":"echo"}},"verdict":"deny"},`)
	b.imp(t, "yuko", map[string]string{
		"rootfs":  fmt.Sprintf("%q", rootfs),
		"command": `["/usr/local/bin/node", "/opt/mcp/box.mjs", "https://mcp.impyard/every"]`,
		"ceiling": `"180s"`, "memory": `"1G"`,
	})
	taskID := b.add(t, "yuko", "use the door")

	// The crash: once the server has the call box.mjs marks with a
	// duration of 59, its process group is killed.
	killed := make(chan string, 1)
	stop := make(chan struct{})
	defer close(stop)
	go func() {
		for {
			select {
			case <-stop:
				killed <- "the test ended first"
				return
			default:
			}
			data, _ := os.ReadFile(calls)
			if strings.Contains(string(data), `"duration":59`) {
				st, err := mcpserv.ReadStatus(b.y)
				if err == nil {
					for _, sv := range st.Servers {
						if sv.Server == "every" && sv.State == mcpserv.StateRunning {
							killed <- fmt.Sprint(syscall.Kill(-sv.PID, syscall.SIGKILL))
							return
						}
					}
				}
			}
			// The server is another process writing a file: there is no
			// event of ours to wait on.
			time.Sleep(20 * time.Millisecond)
		}
	}()
	out := b.once(t)
	task := b.task(t, taskID)
	log := b.boxLog(t, task)
	steps := map[string]boxStep{}
	for _, line := range strings.Split(log, "\n") {
		var st boxStep
		if json.Unmarshal([]byte(line), &st) == nil && st.Step != "" {
			steps[st.Step] = st
		}
	}
	if len(steps) != 10 {
		t.Fatalf("box.mjs took %d steps of 10\nimpsup: %s\nbox.log:\n%s", len(steps), out, log)
	}
	if st := steps["list"]; st.Error != nil || !strings.Contains(string(st.OK), `"name":"get-sum"`) {
		t.Errorf("tools/list: %s %+v", st.OK, st.Error)
	}
	if st := steps["allowed"]; st.Error != nil || !strings.Contains(string(st.OK), "Echo: hello from the box") {
		t.Errorf("allowed call: %s %+v", st.OK, st.Error)
	}
	if st := steps["denied"]; st.code() != mcpserv.CodeDenied || !strings.Contains(st.Error.Message, "no rule matched") {
		t.Errorf("denied call: want JSON-RPC error %d, got %s %+v", mcpserv.CodeDenied, st.OK, st.Error)
	}
	if st := steps["outside"]; st.code() != mcpserv.CodeDenied || !strings.Contains(st.Error.Message, "echo-other") {
		t.Errorf("call outside its rule: want JSON-RPC error %d by echo-other, got %s %+v", mcpserv.CodeDenied, st.OK, st.Error)
	}
	seen, _ := os.ReadFile(calls)
	for _, never := range []string{"get-tiny-image", "exfiltrate", "get-sum"} {
		if strings.Contains(string(seen), never) {
			t.Errorf("%s reached the server:\n%s", never, seen)
		}
	}
	if st := steps["progress"]; st.Error != nil || !strings.Contains(string(st.OK), "Long running operation completed") || strings.Count(string(st.OK), `"total":4`) != 4 {
		t.Errorf("long call: want its result after 4 progress notifications, got %s %+v", st.OK, st.Error)
	}
	if st := steps["cancel"]; st.Error == nil || !strings.Contains(string(seen), `"method":"notifications/cancelled"`) {
		t.Errorf("cancelled call: want an error at the client and the server told, got %s %+v\nserver saw:\n%s", st.OK, st.Error, seen)
	}
	if k := <-killed; k != "<nil>" {
		t.Fatalf("killing the server: %s", k)
	}
	if st := steps["crash"]; st.code() != mcpserv.CodeServer {
		t.Errorf("call cut by the crash: want JSON-RPC error %d (not the client's timeout), got %s %+v", mcpserv.CodeServer, st.OK, st.Error)
	}
	if st := steps["after"]; st.Error != nil || !strings.Contains(string(st.OK), "Echo: hello again") {
		t.Errorf("call after the crash: %s %+v", st.OK, st.Error)
	}

	// The gated call: a gate of the run's, approved, made, its result in
	// the mailbox.
	st := steps["gated"]
	if st.code() != mcpserv.CodePending || !strings.Contains(st.Error.Message, "pending approval g-") {
		t.Fatalf("gated call: want pending approval, got %s %+v", st.OK, st.Error)
	}
	gid := strings.TrimSuffix(strings.Fields(strings.SplitN(st.Error.Message, "pending approval ", 2)[1])[0], ":")
	g, err := gate.Get(b.y, gid)
	if err != nil {
		t.Fatal(err)
	}
	if g.Intent != "mcp.every" || g.Imp != "yuko" || g.Task != taskID || len(task.Runs) == 0 || g.Run != task.Runs[len(task.Runs)-1] {
		t.Fatalf("gate %s: intent %s imp %s task %s run %s; want the box's run %v", gid, g.Intent, g.Imp, g.Task, g.Run, task.Runs)
	}
	b.approveExecuted(t, gid)
	msgs, err := mailbox.Undelivered(b.y, "yuko")
	if err != nil {
		t.Fatal(err)
	}
	if len(msgs) != 1 || !strings.Contains(msgs[0].Text, "The sum of 2 and 3 is 5") {
		t.Fatalf("mailbox: %+v", msgs)
	}
	if f := filesHolding(t, b.y.Root, mcpSecret); len(f) > 0 {
		t.Errorf("the server's credential is in the yard: %s", f)
	}
	if f := filesHolding(t, rootfs, mcpSecret); len(f) > 0 {
		t.Errorf("the server's credential is in the box's rootfs: %s", f)
	}
}

// waitGate waits until gate gid is in state want.
func waitGate(t *testing.T, s *spine, gid, want string) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		g, err := gate.Get(s.y, gid)
		if err == nil && g.State == want {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("gate %s never %s: %+v %v", gid, want, g, err)
		}
		// impexec is another process: its gate file is what to watch.
		time.Sleep(20 * time.Millisecond)
	}
}

// findRecord returns the last decision record that ok accepts.
func findRecord(t *testing.T, s *spine, ok func(map[string]any) bool) map[string]any {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		var found map[string]any
		store.ReadJSONL(s.y.Decisions(), func(line []byte) error {
			var r map[string]any
			if json.Unmarshal(line, &r) == nil && ok(r) {
				found = r
			}
			return nil
		})
		if found != nil {
			return found
		}
		if time.Now().After(deadline) {
			t.Fatal("no such decision record")
		}
		time.Sleep(20 * time.Millisecond)
	}
}
