package tests

import (
	"encoding/pem"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/impyard/impyard/lib/gate"
	"github.com/impyard/impyard/lib/gateway"
	"github.com/impyard/impyard/lib/queue"
	"github.com/impyard/impyard/lib/state"
	"github.com/impyard/impyard/lib/yard"
)

// readmeBlock returns README.md's sh block that starts with first.
func readmeBlock(t *testing.T, first string) string {
	t.Helper()
	for _, b := range readmeBlocks(t, "sh") {
		if strings.HasPrefix(b, first) {
			return b
		}
	}
	t.Fatalf("README.md has no sh block starting with %q", first)
	return ""
}

// rewrite replaces each old with its new in s, and fails t when the
// README no longer says old: the walkthrough changed.
func rewrite(t *testing.T, s string, oldNew ...string) string {
	t.Helper()
	for i := 0; i < len(oldNew); i += 2 {
		if !strings.Contains(s, oldNew[i]) {
			t.Fatalf("README.md's walkthrough no longer says %q:\n%s", oldNew[i], s)
		}
		s = strings.ReplaceAll(s, oldNew[i], oldNew[i+1])
	}
	return s
}

// TestReadmeWalkthrough follows the README, as root, from 'make install'
// through "Your first own imp" (a box, 'impsup init', the imp, the
// daemons, a task) and "Claude Code as an imp" to the Claude Code imp's
// first model call on record. The README's own sh blocks run, in order,
// in one bash with set -e, with the binaries 'make install' put under
// DESTDIR first on PATH and HOME a directory of the test's. What a test
// cannot do as written is rewritten, and each rewrite fails the test if
// the README no longer says what it replaces: /srv/ is below the test's
// directory; the org.toml 'impsup init' made is pointed, as the README
// says to, at the test's containerd and a free gateway port, with the
// section's executor added; impsup
// doctor waits for the gateway that was just started; the
// gateway's upstream CA (--upstream-ca /srv/internal-ca.pem) and the
// Claude Code rule are for a loopback stand-in of Anthropic's API, which
// the imp's command names as ANTHROPIC_BASE_URL.
func TestReadmeWalkthrough(t *testing.T) {
	boxes.Need(t)
	dest := makeInstall(t)
	work := t.TempDir()
	home := filepath.Join(work, "home")
	os.MkdirAll(home, 0o700)
	api := newAnthropicAPI(t, `propose email-send '{"to":["team@ourco.com"],"subject":"An imp","body":"An agent in a box."}' 'the task asked for it'`)
	os.MkdirAll(filepath.Join(work, "srv"), 0o755)
	os.WriteFile(filepath.Join(work, "srv", "internal-ca.pem"), pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: api.srv.Certificate().Raw}), 0o644)
	rule, err := os.ReadFile("../examples/claude-code/gateway-rule.json")
	if err != nil {
		t.Fatal(err)
	}
	localRule := filepath.Join(work, "gateway-rule.json")
	os.WriteFile(localRule, []byte(rewrite(t, string(rule), `"host": "api.anthropic.com",`, `"host": "127.0.0.1", "network": "127.0.0.0/8",`)), 0o644)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	listen := ln.Addr().String()
	ln.Close()
	ns := fmt.Sprintf("walk-%d", time.Now().UnixNano()%1e9)
	// After the daemons (cleanups run last first): impsup leaves a box
	// it is stopped beside running for its next start to adopt, so the
	// boxes go here, and then their workspaces' mounts.
	t.Cleanup(func() {
		removeBoxes(ns)
		unmountBelow(work)
	})

	srv := filepath.Join(work, "srv") + "/"
	yardDir := srv + "yard"
	first := rewrite(t, readmeBlock(t, "scripts/mkrootfs --help"), "/srv/", srv)
	// A person types impsup doctor after the gateway is up; a script
	// waits for it (a doctor that still fails fails the script).
	daemons := rewrite(t, readmeBlock(t, `printf '%s' "$MAIL_API_KEY"`), "/srv/", srv,
		"\nimpsup doctor ", "\nfor i in $(seq 100); do impsup doctor >/dev/null 2>&1 && break; sleep 0.1; done\nimpsup doctor ")
	claude := rewrite(t, readmeBlock(t, "examples/claude-code/mkrootfs"), "/srv/", srv,
		`command = ["/usr/local/bin/claude-imp"]`, fmt.Sprintf(`command = ["/usr/bin/env", "ANTHROPIC_BASE_URL=%s", "/usr/local/bin/claude-imp"]`, api.srv.URL),
		"--slurpfile r examples/claude-code/gateway-rule.json", "--slurpfile r "+localRule)
	// The README's prose: containerd's address (and a namespace of the
	// test's own) in org.toml's [containerd], and the gateway's port, in
	// the place of the commented defaults 'impsup init' wrote.
	configure := fmt.Sprintf(`sed -i -e 's|^#address = .*|address = %q|' -e 's|^#namespace = .*|namespace = %q|' -e 's|^#listen = "127.0.0.1:7300".*|listen = %q|' %s/org.toml`+"\n",
		boxes.Sock, ns, listen, yardDir)
	// And the section's executor, appended to org.toml as it says: the
	// proposals wait for one that can carry them out.
	// Its rule goes in the place of the shipped rule of the same name, as
	// the section says, with jq.
	_, blocks := readmeSection(t, "Your first own imp")
	for _, b := range blocks {
		switch b.lang {
		case "toml":
			configure += "cat >>" + yardDir + "/org.toml <<'TOML'\n" + b.body + "TOML\n"
		case "json":
			pol := yardDir + "/policies/gateway.json"
			configure += "jq --argjson r \"$(cat <<'JSON'\n" + b.body + "JSON\n)\" '.rules |= map(if .name == $r.name then $r else . end)' " + pol + " >" + pol + ".new && mv " + pol + ".new " + pol + "\n"
		}
	}
	script := "set -e\n" + first + configure + daemons + claude

	logPath := filepath.Join(work, "walkthrough.log")
	logFile, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	defer logFile.Close()
	cmd := exec.Command("bash", "-c", script)
	cmd.Dir = ".."
	cmd.Env = append(readmeEnv(filepath.Join(dest, "usr", "local", "bin"), home),
		"XDG_CACHE_HOME="+testsCache(t), "ANTHROPIC_API_KEY="+anthropicKey, "MAIL_API_KEY=re_walkthrough_key")
	// Its own process group, which the daemons it starts in the
	// background share: all of it stops when the test ends.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Stdout, cmd.Stderr = logFile, logFile
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		// The daemons stop their boxes and unmount their workspaces on
		// SIGTERM; the test's files go once the last of them is gone.
		syscall.Kill(-cmd.Process.Pid, syscall.SIGTERM)
		for end := time.Now().Add(30 * time.Second); syscall.Kill(-cmd.Process.Pid, 0) == nil; time.Sleep(50 * time.Millisecond) {
			if time.Now().After(end) {
				syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
			}
		}
	})
	showLog := func() string { b, _ := os.ReadFile(logPath); return string(b) }
	if err := cmd.Wait(); err != nil {
		t.Fatalf("the README's commands: %v\n%s", err, showLog())
	}

	// The daemons run on: wait for Claude Code's first model call on
	// record, metered, the gate it filed, and every task's box to be
	// done.
	y, err := yard.Open(yardDir)
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(2 * time.Minute)
	for {
		recs, _, _ := gateway.ReadRecords(y.Path("runs", "decisions.jsonl"))
		var call *gateway.Record
		for _, r := range recs {
			if r.Request.Imp == "claude" && r.Rule == "claude-code" && r.Verdict == "allow" && r.Usage != nil {
				call = r
				break
			}
		}
		gates, _ := gate.List(y, gate.Filter{Imp: "claude"})
		tasks, _ := queue.List(y, queue.Filter{})
		busy := len(tasks) != 2
		for _, task := range tasks {
			busy = busy || task.State == state.Waiting || task.State == state.Running
		}
		if call != nil && len(gates) == 1 && !busy {
			if call.Status != 200 || call.Usage.InputTokens != 25 || call.Usage.OutputTokens != 15 {
				t.Errorf("the first model call on record: %+v usage %+v", call, call.Usage)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after 2m: model call of claude's on record %v, %d gates of claude's, tasks busy %v\n%s", call != nil, len(gates), busy, showLog())
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// unmountBelow detaches every mount below dir, the deepest first.
func unmountBelow(dir string) {
	b, _ := os.ReadFile("/proc/self/mountinfo")
	var below []string
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Fields(line); len(f) > 4 && strings.HasPrefix(f[4], dir+"/") {
			below = append(below, f[4])
		}
	}
	sort.Slice(below, func(i, j int) bool { return len(below[i]) > len(below[j]) })
	for _, mp := range below {
		syscall.Unmount(mp, syscall.MNT_DETACH)
	}
}
