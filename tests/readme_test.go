package tests

import (
	"bufio"
	"bytes"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// readmeBlocks returns the bodies of README.md's fenced blocks of the
// given language, in order.
func readmeBlocks(t *testing.T, lang string) []string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	var blocks []string
	var cur *strings.Builder
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		line := sc.Text()
		switch {
		case cur == nil && line == "```"+lang:
			cur = &strings.Builder{}
		case cur != nil && line == "```":
			blocks = append(blocks, cur.String())
			cur = nil
		case cur != nil:
			cur.WriteString(line + "\n")
		}
	}
	return blocks
}

// makeInstall runs the README's 'make install' with DESTDIR set and
// PREFIX at its default, and returns DESTDIR.
func makeInstall(t *testing.T) string {
	t.Helper()
	if _, err := exec.LookPath("make"); err != nil {
		t.Skip("make is not installed")
	}
	dest := t.TempDir()
	cmd := exec.Command("make", "-C", "..", "install", "DESTDIR="+dest)
	for _, kv := range os.Environ() {
		// The defaults are what the README promises.
		if k, _, _ := strings.Cut(kv, "="); k != "PREFIX" && k != "BINDIR" && k != "MAKEFLAGS" {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("make install DESTDIR=%s: %v\n%s", dest, err, out)
	}
	return dest
}

// cronEntry is a crontab line's schedule and command.
var cronEntry = regexp.MustCompile(`^(@\S+|\S+\s+\S+\s+\S+\s+\S+\s+\S+)\s+(.+)$`)

// cronAssign is a crontab environment setting.
var cronAssign = regexp.MustCompile(`^([A-Za-z_][A-Za-z0-9_]*)\s*=\s*(.*)$`)

// TestReadmeCrontab: every command of the README's crontab runs as
// Debian's cron runs it (env -i, PATH=/usr/bin:/bin, SHELL, HOME and
// LOGNAME, then the crontab's own settings, /bin/sh -c in the home
// directory) with the binaries where 'make install' puts them: each finds
// its program and the yard and exits 0, or 111 (try again: no containerd
// answers here), and the task the crontab files is in the queue. The
// crontab's paths are made the test's: a PATH directory below DESTDIR, and
// IMPYARD_ROOT a yard 'impsup init' made.
func TestReadmeCrontab(t *testing.T) {
	blocks := readmeBlocks(t, "crontab")
	if len(blocks) == 0 {
		t.Fatal("README.md has no crontab block")
	}
	dest := makeInstall(t)
	tmp := t.TempDir()
	home, root := filepath.Join(tmp, "home"), filepath.Join(tmp, "yard")
	os.Mkdir(home, 0o700)
	cron := []string{"PATH=/usr/bin:/bin", "SHELL=/bin/sh", "HOME=" + home, "LOGNAME=root"}
	bindir := filepath.Join(dest, "usr", "local", "bin")
	initCmd := exec.Command(filepath.Join(bindir, "impsup"), "init", root)
	initCmd.Env = cron
	if out, err := initCmd.CombinedOutput(); err != nil {
		t.Fatalf("impsup init: %v\n%s", err, out)
	}
	// yuko is configured, and containerd is looked for where none is.
	os.MkdirAll(filepath.Join(root, "imps", "yuko"), 0o750)
	os.WriteFile(filepath.Join(root, "imps", "yuko", "imp.toml"), []byte("image = \"docker.io/library/busybox:latest\"\n"), 0o640)
	org, _ := os.ReadFile(filepath.Join(root, "org.toml"))
	org = bytes.Replace(org, []byte("#address = \"/run/containerd/containerd.sock\""), []byte("address = \""+filepath.Join(tmp, "no-containerd.sock")+"\""), 1)
	os.WriteFile(filepath.Join(root, "org.toml"), org, 0o640)

	ran := 0
	for _, block := range blocks {
		env := append([]string(nil), cron...)
		for _, line := range strings.Split(block, "\n") {
			line = strings.TrimSpace(line)
			if line == "" || strings.HasPrefix(line, "#") {
				continue
			}
			if m := cronAssign.FindStringSubmatch(line); m != nil && !strings.ContainsAny(m[1], " \t") {
				v := strings.Trim(m[2], `"'`)
				switch m[1] {
				case "PATH":
					var dirs []string
					for _, d := range filepath.SplitList(v) {
						if fi, err := os.Stat(filepath.Join(dest, d)); err == nil && fi.IsDir() {
							d = filepath.Join(dest, d)
						}
						dirs = append(dirs, d)
					}
					v = strings.Join(dirs, ":")
				case "IMPYARD_ROOT":
					v = root
				}
				env = append(env, m[1]+"="+v)
				continue
			}
			m := cronEntry.FindStringSubmatch(line)
			if m == nil {
				t.Fatalf("README crontab line %q is neither a setting nor an entry", line)
			}
			cmd := exec.Command("/bin/sh", "-c", m[2])
			cmd.Env, cmd.Dir = env, home
			var stderr bytes.Buffer
			cmd.Stderr = &stderr
			err := cmd.Run()
			code := 0
			var ee *exec.ExitError
			if errors.As(err, &ee) {
				code = ee.ExitCode()
			} else if err != nil {
				t.Fatal(err)
			}
			if code != 0 && (code != 111 || !strings.Contains(stderr.String(), "containerd")) {
				t.Errorf("README crontab entry %q, run as cron runs it: exit %d\n%s", line, code, stderr.String())
			}
			ran++
		}
	}
	if ran == 0 {
		t.Fatal("the README's crontab has no entry")
	}
	ls := exec.Command(filepath.Join(bindir, "impq"), "ls", "--json", "--root", root)
	ls.Env = cron
	out, err := ls.Output()
	if err != nil || !bytes.Contains(out, []byte(`"unique":"weekly-digest"`)) {
		t.Errorf("after the crontab's commands, impq ls --json: %v\n%s; want the weekly digest's task", err, out)
	}
}
