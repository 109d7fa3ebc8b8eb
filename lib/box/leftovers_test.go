package box

import (
	"bufio"
	"context"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// leftoverEnv, set, makes TestLeftoverHelper the box test killed below.
const leftoverEnv = "IMPYARD_BOX_LEFTOVER_HELPER"

// TestLeftoverHelper is a box test binary in the middle of its work: it
// makes the harness, starts a box that runs on, says where the harness
// is, and waits to be killed. It runs only as TestKilledTestLeavesNothing's
// child.
func TestLeftoverHelper(t *testing.T) {
	if os.Getenv(leftoverEnv) == "" {
		t.Skip("the box test that TestKilledTestLeavesNothing kills")
	}
	r := runner(t)
	s := spec(t, RunC, "/bin/sh", "-c", "echo ready; exec sleep 600")
	if _, err := r.Start(context.Background(), s); err != nil {
		t.Fatal(err)
	}
	ready(t, s)
	pid, err := os.ReadFile(filepath.Join(harness.Dir, "containerd.pid"))
	if err != nil {
		t.Fatal(err)
	}
	os.Stdout.WriteString("harness " + harness.Dir + " " + strings.TrimSpace(string(pid)) + "\n")
	// Killed here; should the test that kills it die first, its end of
	// stdin closes and this returns.
	io.Copy(io.Discard, os.Stdin)
}

// TestKilledTestLeavesNothing: a box test binary killed mid-test, as go
// test's timeout kills one (no deferred call, no TestMain cleanup), and
// its containerd killed as well, leaves no containerd, no shim and no
// mount behind: the harness's reaper sees the binary end and stops the
// shims containerd no longer knows of, unmounts the network namespaces
// and removes the harness's directory.
func TestKilledTestLeavesNothing(t *testing.T) {
	setup(t)
	cmd := exec.Command(os.Args[0], "-test.run", "^TestLeftoverHelper$", "-test.v")
	cmd.Env = append(os.Environ(), leftoverEnv+"=1")
	cmd.Dir, _ = os.Getwd()
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cmd.StdinPipe(); err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	var dir, ctd string
	for sc := bufio.NewScanner(out); dir == "" && sc.Scan(); {
		if f := strings.Fields(sc.Text()); len(f) == 3 && f[0] == "harness" {
			dir, ctd = f[1], f[2]
		}
	}
	if dir == "" {
		t.Fatal("the helper never started its box")
	}
	before := processesNaming(t, dir)
	var reaper string
	for _, p := range before {
		if strings.Contains(p, "containerd-dev reap ") {
			reaper = strings.Fields(p)[0]
		}
	}
	if len(before) < 3 || reaper == "" {
		t.Fatalf("before the kill: %q, want containerd, the box's shim and the reaper", before)
	}
	// containerd first: the shim must now be found without its help.
	if pid, err := strconv.Atoi(ctd); err != nil || syscall.Kill(pid, syscall.SIGKILL) != nil {
		t.Fatalf("killing containerd %s: %v", ctd, err)
	}
	cmd.Process.Kill()
	cmd.Wait()
	// The reaper's end is the event: it exits once it has cleaned up.
	for deadline := time.Now().Add(60 * time.Second); alive(reaper); {
		if time.Now().After(deadline) {
			t.Fatalf("the reaper %s still runs a minute after its test binary was killed", reaper)
		}
		<-time.After(50 * time.Millisecond)
	}
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Errorf("%s is still there: %v", dir, err)
	}
	if left := processesNaming(t, dir); len(left) > 0 {
		t.Errorf("still running after the reaper: %q", left)
	}
	if m := mountsBelow(t, dir); len(m) > 0 {
		t.Errorf("still mounted after the reaper: %q", m)
	}
}

// processesNaming lists the live processes (not zombies) whose command
// line names dir or a path below it: the harness's containerd, its shims
// and its reaper.
func processesNaming(t *testing.T, dir string) []string {
	t.Helper()
	procs, err := filepath.Glob("/proc/[0-9]*")
	if err != nil {
		t.Fatal(err)
	}
	var found []string
	for _, p := range procs {
		b, err := os.ReadFile(filepath.Join(p, "cmdline"))
		if err != nil || !strings.Contains(string(b), dir+"/") && !strings.Contains(string(b), dir+"\x00") {
			continue
		}
		if !alive(filepath.Base(p)) {
			continue
		}
		found = append(found, filepath.Base(p)+" "+strings.ReplaceAll(string(b), "\x00", " "))
	}
	return found
}

// alive reports whether process pid runs (a zombie has ended).
func alive(pid string) bool {
	st, err := os.ReadFile(filepath.Join("/proc", pid, "stat"))
	if err != nil {
		return false
	}
	f := strings.Fields(string(st[strings.LastIndexByte(string(st), ')')+1:]))
	return len(f) > 0 && f[0] != "Z"
}

// mountsBelow lists the mount points below dir.
func mountsBelow(t *testing.T, dir string) []string {
	t.Helper()
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	var found []string
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Fields(line); len(f) > 4 && strings.HasPrefix(f[4], dir+"/") {
			found = append(found, f[4])
		}
	}
	return found
}
