package tests

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestMakeTestInstallsDeps: make test's steps run scripts/deps first, and
// make deps, as root, installs with apt-get exactly the packages dpkg says
// are missing of those make test needs, after an apt-get update; with
// nothing missing it runs no apt-get. dpkg-query and apt-get are stand-ins
// on PATH that record what they were asked.
func TestMakeTestInstallsDeps(t *testing.T) {
	if _, err := exec.LookPath("make"); err != nil {
		t.Skip("make is not installed")
	}
	if os.Getuid() != 0 {
		t.Skip("make deps installs only as root")
	}
	out, err := exec.Command("make", "-n", "-C", "..", "unit").CombinedOutput()
	deps, unit := strings.Index(string(out), "scripts/deps"), strings.Index(string(out), " test -count=1")
	if err != nil || deps < 0 || unit < deps {
		t.Errorf("make -n unit: %v\n%s\nwant scripts/deps before the tests", err, out)
	}

	fake := t.TempDir()
	log := filepath.Join(fake, "apt-get.log")
	write := func(name, script string) {
		if err := os.WriteFile(filepath.Join(fake, name), []byte("#!/bin/sh\n"+script), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	write("apt-get", `echo "$*" >>`+log+"\n")
	// dpkg-query knows nothing of a package never installed (exit 1,
	// no output), and a removed one may still have its configuration.
	for _, c := range []struct{ missing, dpkg, want string }{
		{"crun and runsc", "crun) exit 1 ;; runsc) echo config-files", "update -qq\ninstall -y -qq crun runsc\n"},
		{"nothing", "none) ", ""},
	} {
		write("dpkg-query", `case "$3" in `+c.dpkg+` ;; *) echo installed ;; esac`+"\n")
		os.Remove(log)
		cmd := exec.Command("make", "-s", "-C", "..", "deps")
		cmd.Env = append(os.Environ(), "PATH="+fake+":"+os.Getenv("PATH"))
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("make deps with %s missing: %v\n%s", c.missing, err, out)
		}
		got, _ := os.ReadFile(log)
		if string(got) != c.want {
			t.Errorf("make deps with %s missing ran apt-get:\n%s\nwant:\n%s", c.missing, got, c.want)
		}
	}
}
