// Package boxtest is the harness box tests share: one private containerd
// (scripts/containerd-dev) and one busybox rootfs (scripts/mkrootfs) with
// the Go programs a test binary needs, made on first use and torn down
// once. Tests skip, saying why, only on a host that cannot run boxes at
// all (not root, or containerd or runc not installed); on one that can, a
// containerd that does not start fails them.
package boxtest

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
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
	if e.Prepare != nil {
		e.Prepare(e.Dir)
	}
	out, err := exec.Command(filepath.Join(e.Repo, "scripts/containerd-dev"), "start", filepath.Join(e.Dir, "ctd")).Output()
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

// Stop stops the containerd and removes the harness's files; TestMain
// calls it after the tests.
func (e *Env) Stop() {
	if e.Sock != "" {
		if out, err := exec.Command(filepath.Join(e.Repo, "scripts/containerd-dev"), "stop", filepath.Join(e.Dir, "ctd")).CombinedOutput(); err != nil {
			fmt.Fprintf(os.Stderr, "containerd-dev stop: %v\n%s", err, out)
		}
	}
	if e.Dir != "" {
		if e.Release != nil {
			e.Release()
		}
		os.RemoveAll(e.Dir)
	}
}
