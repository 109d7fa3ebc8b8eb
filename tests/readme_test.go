package tests

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/impyard/impyard/lib/config"
	"github.com/impyard/impyard/lib/yard"
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

// block is a fenced block of README.md: its language and body.
type block struct{ lang, body string }

// readmeSection returns the text of README.md's section titled title
// (a "## " heading), up to the next one, and its fenced blocks.
func readmeSection(t *testing.T, title string) (string, []block) {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	_, rest, ok := strings.Cut(string(b), "\n## "+title+"\n")
	if !ok {
		t.Fatalf("README.md has no section %q", title)
	}
	if i := strings.Index(rest, "\n## "); i >= 0 {
		rest = rest[:i]
	}
	var blocks []block
	for _, m := range regexp.MustCompile("(?ms)^```(\\w+)\n(.*?)^```$").FindAllStringSubmatch(rest, -1) {
		blocks = append(blocks, block{m[1], m[2]})
	}
	return rest, blocks
}

// readmeEnv is the environment the README's commands run in: the
// programs where 'make install' put them first on PATH, HOME the test's,
// and Go's settings and caches, so scripts/mkrootfs builds with what the
// test binary was built with.
func readmeEnv(bindir, home string) []string {
	env := []string{"PATH=" + bindir + ":/usr/local/go/bin:" + os.Getenv("PATH"), "HOME=" + home, "USER=root"}
	for _, kv := range os.Environ() {
		if strings.HasPrefix(kv, "GO") || strings.HasPrefix(kv, "TMPDIR=") {
			env = append(env, kv)
		}
	}
	for _, k := range []string{"GOCACHE", "GOMODCACHE", "GOPATH"} {
		if v, err := exec.Command("go", "env", k).Output(); err == nil {
			env = append(env, k+"="+strings.TrimSpace(string(v)))
		}
	}
	return env
}

// programs are impyard's, whose command lines a README block is checked
// against.
var programs = map[string]bool{"impq": true, "impgate": true, "impgw": true, "impexec": true, "impsup": true}

// TestReadmeFirstImp: the README's "Your first own imp" works as
// written. Its first shell block runs (offline: mkrootfs, impsup init,
// an imp.toml) with the programs where 'make install' puts them and /srv
// moved into a temporary directory, and leaves what the section says;
// every key it writes in backquotes loads as imp.toml; its org.toml and
// policy blocks load, and the gateway judges the requests they are for as
// the section says; every impyard command line it shows names a command
// and flags that command has, and every script it names is there.
func TestReadmeFirstImp(t *testing.T) {
	text, blocks := readmeSection(t, "Your first own imp")
	var sh, toml, rules []string
	for _, b := range blocks {
		switch b.lang {
		case "sh":
			sh = append(sh, b.body)
		case "toml":
			toml = append(toml, b.body)
		case "json":
			rules = append(rules, b.body)
		}
	}
	if len(sh) < 2 || len(toml) == 0 || len(rules) < 2 {
		t.Fatalf("the section has %d sh, %d toml and %d json blocks; want its steps, an executor and its rules", len(sh), len(toml), len(rules))
	}
	dest := makeInstall(t)
	bindir := filepath.Join(dest, "usr", "local", "bin")
	tmp := t.TempDir()
	home := filepath.Join(tmp, "home")
	os.Mkdir(home, 0o700)
	env := readmeEnv(bindir, home)
	srv := filepath.Join(tmp, "srv")
	steps := strings.ReplaceAll(sh[0], "/srv/", srv+"/")
	cmd := exec.Command("bash", "-euo", "pipefail", "-c", steps)
	cmd.Dir, cmd.Env = "..", env
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("the section's first steps: %v\n%s\n%s", err, steps, out)
	}
	if !strings.Contains(string(out), "usage: mkrootfs DIR [GO-PACKAGE...]") {
		t.Errorf("scripts/mkrootfs --help printed no usage:\n%s", out)
	}
	root := filepath.Join(srv, "yard")
	y, err := yard.Open(root)
	if err != nil {
		t.Fatal(err)
	}
	imp, err := config.LoadImp(y, "scout")
	if err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(filepath.Join(imp.Rootfs, imp.Command[0])); err != nil || fi.Mode()&0o111 == 0 {
		t.Errorf("the imp's command %s is not in its rootfs %s: %v", imp.Command[0], imp.Rootfs, err)
	}
	if fi, err := os.Stat(filepath.Join(home, ".impyard", "secrets")); err != nil || fi.Mode().Perm() != 0o700 {
		t.Errorf("~/.impyard/secrets after impsup init: %v; want a directory, mode 0700", err)
	}

	// Every imp.toml key the text names, on its own or with a rootfs.
	for _, m := range regexp.MustCompile("`([a-z_]+ = \"[^\"`]*\")`").FindAllStringSubmatch(text, -1) {
		body := "command = [\"/usr/local/bin/demo-imp\"]\n" + m[1] + "\n"
		if k, _, _ := strings.Cut(m[1], " "); k != "rootfs" && k != "image" && k != "archive" {
			body += "rootfs = \"/srv/boxes/scout\"\n"
		}
		if _, err := config.ParseImp(filepath.Join(root, "imps", "scout", "imp.toml"), "scout", []byte(body)); err != nil {
			t.Errorf("the section's %s does not load as imp.toml: %v", m[1], err)
		}
	}

	// The executor loads from org.toml.
	org, _ := os.ReadFile(y.Path("org.toml"))
	for _, b := range toml {
		org = append(org, "\n"+b...)
	}
	os.WriteFile(y.Path("org.toml"), org, 0o640)
	o, err := config.LoadOrg(y)
	if err != nil {
		t.Fatalf("org.toml with the section's blocks: %v", err)
	}
	if e := o.Executors["email-send"]; e == nil || e.Kind != "http" {
		t.Errorf("org.toml with the section's blocks has executor email-send %+v; want kind http", e)
	}

	// The rules, at the top of the shipped policy or in the place of the
	// shipped rule of their name, allow what the text says: scout's read as written in the text, and the executor's
	// request as org, from the network the rule names.
	var policy map[string]any
	b, _ := os.ReadFile(y.PolicyPath())
	if err := json.Unmarshal(b, &policy); err != nil {
		t.Fatal(err)
	}
	shipped := policy["rules"].([]any)
	var added []any
	for _, r := range rules {
		var rule map[string]any
		if err := json.Unmarshal([]byte(r), &rule); err != nil {
			t.Fatalf("the section's rule does not parse: %v\n%s", err, r)
		}
		replaced := false
		for i, s := range shipped {
			if s.(map[string]any)["name"] == rule["name"] {
				shipped[i], replaced = rule, true
			}
		}
		if !replaced {
			added = append(added, rule)
		}
	}
	policy["rules"] = append(added, shipped...)
	b, _ = json.Marshal(policy)
	os.WriteFile(y.PolicyPath(), b, 0o640)
	judge := regexp.MustCompile("`(impgw judge [^`]+)`").FindStringSubmatch(text)
	if judge == nil {
		t.Fatal("the section shows no impgw judge line")
	}
	for _, args := range [][]string{
		strings.Fields(judge[1])[1:],
		{"judge", "--subject", "org", "--addr", "10.1.2.3", "POST", "https://mail.internal.example/emails"},
	} {
		c := exec.Command(filepath.Join(bindir, "impgw"), append(args, "--root", root)...)
		c.Env = env
		if out, err := c.CombinedOutput(); err != nil || !strings.Contains(string(out), "allow") {
			t.Errorf("impgw %s with the section's rules: %v\n%s; want allow", strings.Join(args, " "), err, out)
		}
	}

	// Every command line names a command and flags its program has, and
	// every script named is there.
	for _, body := range sh {
		for _, line := range strings.Split(body, "\n") {
			line, _, _ = strings.Cut(line, "#")
			f := strings.Fields(line)
			if len(f) < 2 || !programs[f[0]] {
				continue
			}
			c := exec.Command(filepath.Join(bindir, f[0]), f[1], "--help")
			c.Env = env
			help, err := c.CombinedOutput()
			if err != nil {
				t.Errorf("%s %s --help: %v\n%s", f[0], f[1], err, help)
				continue
			}
			for _, w := range f[2:] {
				if flag, _, _ := strings.Cut(w, "="); strings.HasPrefix(flag, "--") && !strings.Contains(string(help), flag+" ") {
					t.Errorf("%q: %s %s has no flag %s", strings.TrimSpace(line), f[0], f[1], flag)
				}
			}
		}
	}
	for _, m := range regexp.MustCompile(`scripts/[a-z-]+`).FindAllString(text, -1) {
		if fi, err := os.Stat(filepath.Join("..", m)); err != nil || fi.Mode()&0o111 == 0 {
			t.Errorf("the section names %s, which is not an executable script: %v", m, err)
		}
	}
}
