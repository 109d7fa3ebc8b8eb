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

// mcpPolicy is the spine's policy with the door's rules; extra rules
// come first.
func mcpPolicy(t *testing.T, s *spine, extra string) {
	t.Helper()
	door := `"protocol":"https","host":"mcp.impyard","subject":"yuko"`
	rules := extra + `
	 {"name":"mcp-session","match":{` + door + `,"mcp":{"method":["initialize","notifications/initialized","tools/list","ping"]}},"verdict":"allow"},
	 {"name":"mcp-read","match":{` + door + `,"mcp":{"method":"tools/call","tool":["echo","get-env","trigger-long-running-operation"]}},"verdict":"allow"},
	 {"name":"mcp-sum","match":{` + door + `,"mcp":{"method":"tools/call","tool":"get-sum"}},"verdict":"gate"}]}`
	// Written whole and renamed, as an owner's editor does: the gateway
	// takes up the new policy at its next request.
	if err := store.WriteAtomic(s.y.PolicyPath(), []byte(`{"schema":"impyard.policy/1","rules":[`+rules), filepath.Dir(s.y.PolicyPath())); err != nil {
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
	os.WriteFile(filepath.Join(s.home, "secrets", "every-token"), []byte(mcpSecret+"\n"), 0o600)
	calls := filepath.Join(t.TempDir(), "calls.log")
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
	t.Run("CrashMidCall", func(t *testing.T) {
		before := serverState(t, s, func(st mcpserv.State) bool { return st.State == mcpserv.StateRunning })
		if _, err := io.WriteString(c.in, `{"op":"call","name":"trigger-long-running-operation","arguments":{"duration":60,"steps":60}}`+"\n"); err != nil {
			t.Fatal(err)
		}
		waitFile(t, calls, "trigger-long-running-operation")
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
