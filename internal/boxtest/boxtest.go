// Package boxtest is the harness box tests share: one private containerd
// (scripts/containerd-dev) and one busybox rootfs (scripts/mkrootfs) with
// the Go programs a test binary needs, made on first use and torn down
// once. Tests skip, saying why, only on a host that cannot run boxes at
// all (not root, or containerd or runc not installed); on one that can, a
// containerd that does not start fails them.
//
// Nothing the harness made outlives the test binary: containerd, its
// shims and every mount below the harness's directory go in Stop, and, if
// the binary ends without calling it (killed by go test's timeout, say),
// in a reaper (containerd-dev reap) started with the harness that waits
// for the binary's end.
package boxtest

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
)

// Env is one harness.
type Env struct {
	// Repo is the repository root, relative to the test's directory.
	Repo string
	// Packages are built into the rootfs's /usr/local/bin.
	Packages []string
	// Prepare, if set, runs before containerd starts, with the harness's
	// directory (to put namespaces under it, say).
	Prepare func(dir string)
	// Release, if set, runs in Stop after containerd stops and before the
	// harness's files are removed.
	Release func()

	once   sync.Once
	skip   string
	err    error
	Dir    string
	Sock   string
	Rootfs string
}

// Need makes the harness once, then skips tb when this host cannot run
// boxes at all or fails it when the harness broke.
func (e *Env) Need(tb testing.TB) {
	tb.Helper()
	e.once.Do(e.start)
	if e.skip != "" {
		tb.Skip(e.skip)
	}
	if e.err != nil {
		tb.Fatal(e.err)
	}
}

func (e *Env) start() {
	if os.Geteuid() != 0 {
		e.skip = "box tests need root: containerd, runc, mounts and network namespaces"
		return
	}
	for _, b := range []string{"containerd", "containerd-shim-runc-v2", "runc", "ctr"} {
		if _, err := exec.LookPath(b); err != nil {
			e.skip = fmt.Sprintf("box tests need %s, which is not installed (apt-get install containerd runc)", b)
			return
		}
	}
	if e.Dir, e.err = os.MkdirTemp("", "impyard-box-"); e.err != nil {
		return
	}
	script, err := filepath.Abs(filepath.Join(e.Repo, "scripts/containerd-dev"))
	if err != nil {
		e.err = err
		return
	}
	// The reaper is in a session of its own, so go test's end of the test
	// binary does not reach it, and holds none of the binary's output, so
	// go test does not wait for it.
	reaper := exec.Command(script, "reap", e.Dir, strconv.Itoa(os.Getpid()))
	reaper.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if e.err = reaper.Start(); e.err != nil {
		e.err = fmt.Errorf("scripts/containerd-dev reap: %w", e.err)
		return
	}
	reaper.Process.Release()
	if e.Prepare != nil {
		e.Prepare(e.Dir)
	}
	out, err := exec.Command(script, "start", e.Dir).Output()
	if err != nil {
		var ee *exec.ExitError
		stderr := ""
		if errors.As(err, &ee) {
			stderr = string(ee.Stderr)
		}
		e.err = fmt.Errorf("containerd could not be started with scripts/containerd-dev: %v\n%s", err, stderr)
		return
	}
	e.Sock = strings.TrimSpace(string(out))
	e.Rootfs = filepath.Join(e.Dir, "rootfs")
	cmd := exec.Command("scripts/mkrootfs", append([]string{e.Rootfs}, e.Packages...)...)
	cmd.Dir = e.Repo
	if out, err := cmd.CombinedOutput(); err != nil {
		e.err = fmt.Errorf("scripts/mkrootfs: %v\n%s", err, out)
	}
}

// Stop stops the containerd and its shims, unmounts what is mounted
// below the harness's directory and removes it; TestMain calls it after
// the tests.
func (e *Env) Stop() {
	if e.Dir == "" {
		return
	}
	// It names each shim it had to kill: a box a test did not delete.
	out, err := exec.Command(filepath.Join(e.Repo, "scripts/containerd-dev"), "stop", e.Dir).CombinedOutput()
	os.Stderr.Write(out)
	if err != nil {
		fmt.Fprintf(os.Stderr, "containerd-dev stop %s: %v\n", e.Dir, err)
	}
	if e.Release != nil {
		e.Release()
	}
	os.RemoveAll(e.Dir)
}
