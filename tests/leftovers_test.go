package tests

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"
)

// TestLeftovers: scripts/leftovers, the last step of make test, passes
// a directory nothing names, and fails naming a process whose command
// line names a path below it and a mount below it; another directory's
// are not its business.
func TestLeftovers(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("a mount needs root")
	}
	dir, other := t.TempDir(), t.TempDir()
	leftovers := func(d string) (string, error) {
		t.Helper()
		out, err := exec.Command("../scripts/leftovers", d).CombinedOutput()
		return string(out), err
	}
	if out, err := leftovers(dir); err != nil || out != "" {
		t.Fatalf("nothing left: %v %q", err, out)
	}

	// A process naming a file below dir, as a shim names its socket.
	sock := filepath.Join(dir, "ctd", "containerd.sock")
	shim := exec.Command("sh", "-c", "sleep 600; exit", "shim", "-address", sock)
	shim.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := shim.Start(); err != nil {
		t.Fatal(err)
	}
	stop := func() { syscall.Kill(-shim.Process.Pid, syscall.SIGKILL); shim.Wait() }
	t.Cleanup(stop)
	mnt := filepath.Join(dir, "netns")
	if err := os.Mkdir(mnt, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mount("tmpfs", mnt, "tmpfs", 0, ""); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Unmount(mnt, unix.MNT_DETACH) })

	out, err := leftovers(dir)
	if err == nil || !strings.Contains(out, "still runs: sh -c sleep 600; exit shim -address "+sock) || !strings.Contains(out, "still mounted: "+mnt) {
		t.Errorf("with a process and a mount left: %v\n%s", err, out)
	}
	if out, err := leftovers(other); err != nil || out != "" {
		t.Errorf("another directory: %v %q", err, out)
	}

	stop()
	if err := unix.Unmount(mnt, 0); err != nil {
		t.Fatal(err)
	}
	if out, err := leftovers(dir); err != nil || out != "" {
		t.Errorf("once both are gone: %v %q", err, out)
	}
}
