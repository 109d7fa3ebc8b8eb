package box

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// From inside a box only the gateway listener answers: the host's loopback,
// the outside and DNS do not.
func TestGatewayOnlyNetwork(t *testing.T) {
	eachRuntime(t, func(t *testing.T, rt string) {
		r := runner(t)
		host, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		serve(t, host, "host")
		s := spec(t, rt, "/usr/local/bin/probe",
			"get=http://127.0.0.1:7300/",
			"connect="+host.Addr().String(),
			"connect=192.0.2.1:80",
			"dns=example.com")
		gateway(t, s, "gateway")
		exit, log := run(t, r, s)
		if exit.Code != 0 {
			t.Errorf("exit = %+v, want code 0", exit)
		}
		expect(t, log, map[string]string{
			"get http://127.0.0.1:7300/":      "ok 200 gateway",
			"connect " + host.Addr().String(): "error: dial tcp " + host.Addr().String() + ": connect: connection refused",
			"connect 192.0.2.1:80":            "error: dial tcp 192.0.2.1:80: connect: network is unreachable",
			"dns example.com":                 "error: lookup example.com",
		})
	})
}

// Two boxes at once, each in its own namespace with its own gateway at the
// same address, each reach only their own.
func TestTwoBoxesOwnGateways(t *testing.T) {
	eachRuntime(t, func(t *testing.T, rt string) {
		r := runner(t)
		specs := []Spec{
			spec(t, rt, "/usr/local/bin/probe", "get=http://127.0.0.1:7300/"),
			spec(t, rt, "/usr/local/bin/probe", "get=http://127.0.0.1:7300/"),
		}
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		var boxes []*Box
		for i, s := range specs {
			gateway(t, s, "box"+strconv.Itoa(i))
			// Each waits a moment before it calls, so both are up at once.
			s.Args = append([]string{"/bin/sh", "-c", "sleep 0.3; exec \"$@\"", "sh"}, s.Args...)
			b, err := r.Start(ctx, s)
			if err != nil {
				t.Fatal(err)
			}
			boxes = append(boxes, b)
		}
		for i, b := range boxes {
			if exit, err := b.Wait(ctx); err != nil || exit.Code != 0 {
				t.Errorf("box %d: exit %+v, %v", i, exit, err)
			}
			expect(t, deleted(t, specs[i]), map[string]string{"get http://127.0.0.1:7300/": "ok 200 box" + strconv.Itoa(i)})
		}
	})
}

// The process is nobody without capabilities or new privileges under
// seccomp, which refuses the 32-bit syscall ABI; it cannot write the rootfs
// or read-only mounts, can write its workspace and /tmp, and sees only what
// is mounted.
func TestHardened(t *testing.T) {
	eachRuntime(t, func(t *testing.T, rt string) {
		r := runner(t)
		certs, work, repo := t.TempDir(), t.TempDir(), t.TempDir()
		os.WriteFile(filepath.Join(certs, "ca.crt"), []byte("certificate"), 0o644)
		os.WriteFile(filepath.Join(certs, "ca.key"), []byte("secret"), 0o644)
		// Writable by anyone on the host: only the read-only mount stops
		// the box.
		os.Chmod(work, 0o777)
		os.Chmod(repo, 0o777)
		probes := []string{"uid", "status=CapEff", "status=CapBnd", "status=CapPrm", "prctl=nnp", "prctl=seccomp",
			"write=/x", "write=/etc/passwd", "write=/repo/x", "write=/work/out", "write=/tmp/x",
			"read=/etc/impyard/ca.crt", "read=/etc/impyard/ca.key"}
		abi32 := host32BitABI(t)
		if abi32 {
			probes = append(probes, "syscall32")
		}
		s := spec(t, rt, append([]string{"/usr/local/bin/probe"}, probes...)...)
		s.Mounts = []Mount{
			{Source: filepath.Join(certs, "ca.crt"), Target: "/etc/impyard/ca.crt", ReadOnly: true},
			{Source: repo, Target: "/repo", ReadOnly: true},
			{Source: work, Target: "/work"},
		}
		exit, log := run(t, r, s)
		if exit.Code != 0 {
			t.Errorf("exit = %+v, want code 0", exit)
		}
		// gVisor checks permissions before the mount's read-only flag (the
		// rootfs is root's), and has no 32-bit syscall ABI at all: the call
		// fails with EINVAL.
		readOnly, syscall32 := "read-only file system", "error: the calling thread never came back"
		if rt == RunSC {
			readOnly, syscall32 = "permission denied", "ok pid -22"
		}
		want := map[string]string{
			"uid ":                     "ok 65534:65534",
			"status CapEff":            "ok 0000000000000000",
			"status CapBnd":            "ok 0000000000000000",
			"status CapPrm":            "ok 0000000000000000",
			"prctl nnp":                "ok 1",
			"prctl seccomp":            "ok 2",
			"write /x":                 "error: open /x: " + readOnly,
			"write /etc/passwd":        "error: open /etc/passwd: " + readOnly,
			"write /repo/x":            "error: open /repo/x: read-only file system",
			"write /work/out":          "ok",
			"write /tmp/x":             "ok",
			"read /etc/impyard/ca.crt": "ok 11 bytes",
			"read /etc/impyard/ca.key": "error: open /etc/impyard/ca.key: no such file or directory",
		}
		if abi32 {
			want["syscall32 "] = syscall32
		}
		expect(t, log, want)
		if b, err := os.ReadFile(filepath.Join(work, "out")); err != nil || string(b) != "x" {
			t.Errorf("workspace file on the host: %q, %v; want \"x\"", b, err)
		}
	})
}

// Env, working directory and stdin reach the box; the log gets stdout and
// stderr, even what stderr says after stdout has closed.
func TestStdinEnvCwd(t *testing.T) {
	eachRuntime(t, func(t *testing.T, rt string) {
		r := runner(t)
		s := spec(t, rt, "/bin/sh", "-c", `read line; echo "got $line in $PWD as $WHO"; exec 1>&-; sleep 0.1; echo oops >&2`)
		s.Env = []string{"WHO=imp"}
		s.Cwd = "/tmp"
		s.Stdin = strings.NewReader("the task text\n")
		exit, log := run(t, r, s)
		if exit.Code != 0 {
			t.Errorf("exit = %+v, want code 0", exit)
		}
		// The shim copies stdout and stderr on their own, so their lines may
		// land in either order.
		if !strings.Contains(log, "got the task text in /tmp as imp\n") || !strings.Contains(log, "oops\n") || len(log) != 38 {
			t.Errorf("log = %q, want the stdout and the stderr line", log)
		}
	})
}

// The box's cgroup carries the pids and memory limits.
func TestLimitsInCgroup(t *testing.T) {
	eachRuntime(t, func(t *testing.T, rt string) {
		r := runner(t)
		s := spec(t, rt, "/bin/sleep", "10")
		s.Pids, s.MemoryBytes, s.Grace = 42, 48<<20, 100*time.Millisecond
		ctx := context.Background()
		b, err := r.Start(ctx, s)
		if err != nil {
			t.Fatal(err)
		}
		defer b.Kill(ctx)
		cg := cgroupsPath(testNS, s.ID)
		pids, mem := "/sys/fs/cgroup/pids"+cg+"/pids.max", "/sys/fs/cgroup/memory"+cg+"/memory.limit_in_bytes"
		var st unix.Statfs_t
		if unix.Statfs("/sys/fs/cgroup", &st) == nil && st.Type == unix.CGROUP2_SUPER_MAGIC {
			pids, mem = "/sys/fs/cgroup"+cg+"/pids.max", "/sys/fs/cgroup"+cg+"/memory.max"
		}
		for file, want := range map[string]string{pids: "42", mem: strconv.Itoa(48 << 20)} {
			b, err := os.ReadFile(file)
			if err != nil || strings.TrimSpace(string(b)) != want {
				t.Errorf("%s = %q, %v; want %s", file, b, err, want)
			}
		}
	})
}

// At the ceiling a box gets SIGTERM; one that ignores it gets SIGKILL after
// the grace. Either way the exit says it was the ceiling.
func TestCeiling(t *testing.T) {
	eachRuntime(t, func(t *testing.T, rt string) {
		r := runner(t)
		t.Run("term", func(t *testing.T) {
			t.Parallel()
			s := spec(t, rt, "/bin/sh", "-c", `trap "exit 3" TERM; sleep 30 & wait`)
			s.Ceiling, s.Grace = 300*time.Millisecond, 10*time.Second
			// Code 3 is the trap's: the box ended on SIGTERM, not on
			// the SIGKILL the grace would bring, however slow the
			// machine is.
			exit, log := run(t, r, s)
			if !exit.Ceiling || exit.Code != 3 || exit.Signal != "" {
				t.Errorf("exit = %+v, want ceiling, code 3 from the SIGTERM trap; log %q", exit, log)
			}
		})
		t.Run("kill", func(t *testing.T) {
			t.Parallel()
			s := spec(t, rt, "/bin/sh", "-c", `trap "" TERM; sleep 30`)
			s.Ceiling, s.Grace = 300*time.Millisecond, 300*time.Millisecond
			// SIGKILL is the ceiling's: sleep 30 alone would end with 0.
			exit, log := run(t, r, s)
			if !exit.Ceiling || exit.Signal != "SIGKILL" || exit.Code != 137 {
				t.Errorf("exit = %+v, want ceiling and SIGKILL; log %q", exit, log)
			}
			if !strings.Contains(exit.Reason, "ceiling") || !strings.Contains(exit.Reason, "SIGKILL after 300ms") {
				t.Errorf("reason %q does not tell the ceiling and the SIGKILL", exit.Reason)
			}
		})
	})
}

// A fork bomb runs into the pids limit: forks fail in the box, the box
// ends, the host still forks.
func TestForkBomb(t *testing.T) {
	eachRuntime(t, func(t *testing.T, rt string) {
		r := runner(t)
		s := spec(t, rt, "/bin/sh", "-c", `b() { b & b; }; b`)
		s.Pids = 32
		s.Ceiling, s.Grace = 3*time.Second, 200*time.Millisecond
		exit, log := run(t, r, s)
		switch {
		case rt == RunSC:
			// Under gVisor each of the box's threads is a thread of the
			// sandbox on the host: at the limit the sandbox cannot make
			// one, and the whole box ends at once, well before its ceiling.
			if exit.Code == 0 || exit.Ceiling {
				t.Errorf("exit = %+v, want the sandbox ended by the limit", exit)
			}
		case !strings.Contains(log, "can't fork"):
			t.Errorf("no failed fork in the box log:\n%.500s", log)
		}
		t.Logf("fork bomb: %s", exit.Reason)
		if err := exec.Command("/bin/true").Run(); err != nil {
			t.Errorf("host cannot fork after the bomb: %v", err)
		}
	})
}

// Allocating past the memory limit gets the box OOM-killed, and the exit
// says so.
func TestOutOfMemory(t *testing.T) {
	eachRuntime(t, func(t *testing.T, rt string) {
		r := runner(t)
		s := spec(t, rt, "/usr/local/bin/probe", "alloc=256")
		s.MemoryBytes = 64 << 20
		exit, log := run(t, r, s)
		if !exit.OOM || exit.Signal != "SIGKILL" || exit.Ceiling {
			t.Errorf("exit = %+v, want OOM and SIGKILL; log %q", exit, log)
		}
	})
}

// Filling a small workspace fails with ENOSPC inside the box, which ends
// cleanly.
func TestFullWorkspace(t *testing.T) {
	eachRuntime(t, func(t *testing.T, rt string) {
		r := runner(t)
		work := t.TempDir()
		if err := unix.Mount("tmpfs", work, "tmpfs", 0, "size=1m,mode=0777"); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { unix.Unmount(work, unix.MNT_DETACH) })
		s := spec(t, rt, "/bin/sh", "-c", `dd if=/dev/zero of=/work/big bs=1M count=4; echo "rc=$?"`)
		s.Mounts = []Mount{{Source: work, Target: "/work"}}
		exit, log := run(t, r, s)
		if exit.Code != 0 || !strings.Contains(log, "No space left on device") || !strings.Contains(log, "rc=1") {
			t.Errorf("exit = %+v, log %q; want code 0 after ENOSPC and rc=1", exit, log)
		}
	})
}

// A box outlives its Runner: a new Runner lists it, adopts it and gets its
// real exit code; Delete then leaves nothing.
func TestAdopt(t *testing.T) {
	eachRuntime(t, func(t *testing.T, rt string) {
		r1 := runner(t)
		s := spec(t, rt, "/bin/sh", "-c", "sleep 1; exit 7")
		s.Labels = map[string]string{LabelImp: "yuko", LabelTask: "t-1"}
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		b1, err := r1.Start(ctx, s)
		if err != nil {
			t.Fatal(err)
		}
		r1.Close()
		if exit, err := b1.Wait(ctx); err == nil {
			t.Errorf("Wait after Close = %+v, want an error, not a made-up exit", exit)
		}

		r2 := runner(t)
		list, err := r2.List(ctx)
		if err != nil {
			t.Fatal(err)
		}
		found := false
		for _, in := range list {
			if in.ID == s.ID {
				found = true
				if in.Status != "running" || in.Pid != b1.Pid || in.Labels[LabelRun] != s.ID ||
					in.Labels[LabelImp] != "yuko" || in.Labels[LabelTask] != "t-1" {
					t.Errorf("List: %+v", in)
				}
			}
		}
		if !found {
			t.Fatalf("List has no %s: %+v", s.ID, list)
		}
		b2, err := r2.Adopt(ctx, s.ID, time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		exit, err := b2.Wait(ctx)
		if err != nil || exit.Code != 7 || exit.Ceiling {
			t.Errorf("adopted Wait = %+v, %v; want code 7", exit, err)
		}

		if err := r2.Delete(ctx, s.ID); err != nil {
			t.Fatal(err)
		}
		if _, err := os.Stat(s.NetNS); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("netns %s after Delete: %v", s.NetNS, err)
		}
		list, _ = r2.List(ctx)
		for _, in := range list {
			if in.ID == s.ID {
				t.Errorf("List after Delete still has %+v", in)
			}
		}
	})
}

// A box adopted after its ceiling passed is stopped at once, with the
// grace it was started with.
func TestAdoptPastCeiling(t *testing.T) {
	eachRuntime(t, func(t *testing.T, rt string) {
		r := runner(t)
		s := spec(t, rt, "/bin/sh", "-c", "echo ready; exec sleep 30")
		s.Grace = 200 * time.Millisecond
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if _, err := r.Start(ctx, s); err != nil {
			t.Fatal(err)
		}
		// Adopt only once the box's own process runs: a SIGTERM that reached
		// the runtime's init before its exec ended the box with code 2
		// instead of being ignored by sleep as PID 1.
		ready(t, s)
		b, err := r.Adopt(ctx, s.ID, -time.Second)
		if err != nil {
			t.Fatal(err)
		}
		// gVisor does not shield its PID 1 from a SIGTERM it has no
		// handler for: there the SIGTERM ends it.
		signal := "SIGKILL"
		if rt == RunSC {
			signal = "SIGTERM"
		}
		exit, err := b.Wait(ctx)
		if err != nil || !exit.Ceiling || exit.Signal != signal {
			t.Errorf("Wait = %+v, %v; want ceiling, %s", exit, err, signal)
		}
	})
}

// Kill stops a box as the ceiling would.
func TestKill(t *testing.T) {
	eachRuntime(t, func(t *testing.T, rt string) {
		r := runner(t)
		s := spec(t, rt, "/bin/sh", "-c", `trap "exit 0" TERM; echo ready; sleep 30 & wait`)
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		b, err := r.Start(ctx, s)
		if err != nil {
			t.Fatal(err)
		}
		// Kill only once the shell has its trap: before that, as PID 1 with no
		// handler, it would ignore SIGTERM and wait for the SIGKILL.
		ready(t, s)
		if err := b.Kill(ctx); err != nil {
			t.Fatal(err)
		}
		exit, err := b.Wait(ctx)
		if err != nil || !exit.Killed || exit.Ceiling || exit.Code != 0 {
			t.Errorf("Wait after Kill = %+v, %v", exit, err)
		}
	})
}

func TestNoContainerd(t *testing.T) {
	dir := t.TempDir()
	missing := filepath.Join(dir, "missing.sock")
	stale := filepath.Join(dir, "stale.sock")
	l, err := net.ListenUnix("unix", &net.UnixAddr{Name: stale, Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	l.SetUnlinkOnClose(false)
	l.Close()
	for _, sock := range []string{missing, stale} {
		start := time.Now()
		_, err := New(context.Background(), sock, "")
		if err == nil || !strings.Contains(err.Error(), sock) {
			t.Errorf("New(%s) = %v, want an error naming the socket", sock, err)
		}
		if time.Since(start) > 3*time.Second {
			t.Errorf("New(%s) took %s to fail", sock, time.Since(start))
		}
	}
}

func TestSpecRefused(t *testing.T) {
	good := Spec{ID: "r-1", Rootfs: "/rootfs", Args: []string{"/bin/true"}, Log: "/box.log"}
	for _, tc := range []struct {
		name string
		edit func(*Spec)
	}{
		{"no id", func(s *Spec) { s.ID = "" }},
		{"no rootfs", func(s *Spec) { s.Rootfs = "" }},
		{"two rootfs", func(s *Spec) { s.Image = "busybox" }},
		{"relative rootfs", func(s *Spec) { s.Rootfs = "rootfs" }},
		{"no command", func(s *Spec) { s.Args = nil }},
		{"relative log", func(s *Spec) { s.Log = "box.log" }},
		{"named user", func(s *Spec) { s.User = "nobody" }},
		{"relative mount", func(s *Spec) { s.Mounts = []Mount{{Source: "repo", Target: "/repo"}} }},
		{"unknown runtime", func(s *Spec) { s.Runtime = "kata" }},
	} {
		s := good
		tc.edit(&s)
		if _, err := (&Runner{}).Start(context.Background(), s); !errors.Is(err, ErrSpec) {
			t.Errorf("%s: Start = %v, want ErrSpec", tc.name, err)
		}
	}
}

// host32BitABI reports whether this host's kernel has the 32-bit syscall
// ABI at all, by running the probe's 32-bit call on the host, outside any
// box: a kernel built or booted without it (ia32_emulation=0) faults the
// call for every process, and there is no box filter to test.
func host32BitABI(t *testing.T) bool {
	out, err := exec.Command(filepath.Join(harness.Rootfs, "usr/local/bin/probe"), "syscall32").CombinedOutput()
	if err == nil && strings.Contains(string(out), "syscall32 : ok pid") {
		return true
	}
	t.Logf("this kernel has no 32-bit syscall ABI (the probe on the host: %v): the box's refusal of it is not tested", err)
	return false
}

// A box's stdio can be a protocol: stdin streamed as it is written,
// stdout and stderr read through pipes of the caller's, no log needed.
func TestStdioPipes(t *testing.T) {
	r := runner(t)
	s := spec(t, RunC, "/bin/sh", "-c", `while read line; do echo "got $line"; echo "err $line" >&2; done`)
	s.Log = ""
	in, feed := io.Pipe()
	outR, outW := io.Pipe()
	errR, errW := io.Pipe()
	s.Stdin, s.Stdout, s.Stderr = in, outW, errW
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	b, err := r.Start(ctx, s)
	if err != nil {
		t.Fatal(err)
	}
	out, errs := bufio.NewScanner(outR), bufio.NewScanner(errR)
	for _, msg := range []string{"one", "two"} {
		// Each answer comes before the next line is written: the pipe
		// is a conversation, not a batch.
		if _, err := io.WriteString(feed, msg+"\n"); err != nil {
			t.Fatal(err)
		}
		if !out.Scan() || out.Text() != "got "+msg {
			t.Fatalf("stdout: %q %v", out.Text(), out.Err())
		}
		if !errs.Scan() || errs.Text() != "err "+msg {
			t.Fatalf("stderr: %q %v", errs.Text(), errs.Err())
		}
	}
	feed.Close()
	if exit, err := b.Wait(ctx); err != nil || exit.Code != 0 {
		t.Fatalf("exit %+v %v", exit, err)
	}
	if err := janitor.Delete(context.Background(), s.ID); err != nil {
		t.Fatal(err)
	}
}
