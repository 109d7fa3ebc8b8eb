package tests

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// TestMakeInstallCompletions: make install puts each binary's bash, zsh
// and fish completion where those shells look for them under PREFIX,
// below DESTDIR, mode 0644; the installed bash script completes the
// binary's subcommands.
func TestMakeInstallCompletions(t *testing.T) {
	if _, err := exec.LookPath("make"); err != nil {
		t.Skip("make is not installed")
	}
	dest := t.TempDir()
	cmd := exec.Command("make", "-C", "..", "install", "PREFIX=/usr/local", "DESTDIR="+dest)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("make install: %v\n%s", err, out)
	}
	share := filepath.Join(dest, "usr", "local", "share")
	for _, name := range []string{"impexec", "impgate", "impgw", "impq", "impsup"} {
		for _, p := range []string{
			filepath.Join(share, "bash-completion", "completions", name),
			filepath.Join(share, "zsh", "site-functions", "_"+name),
			filepath.Join(share, "fish", "vendor_completions.d", name+".fish"),
		} {
			fi, err := os.Stat(p)
			if err != nil {
				t.Fatal(err)
			}
			if fi.Mode().Perm() != 0o644 || fi.Size() == 0 {
				t.Errorf("%s: mode %o, %d bytes; want 644 and a script", p, fi.Mode().Perm(), fi.Size())
			}
		}
	}
	if _, err := exec.LookPath("bash"); err != nil {
		t.Skip("bash is not installed")
	}
	script := filepath.Join(share, "bash-completion", "completions", "impgate")
	out, err := exec.Command("bash", "--norc", "-c", `. "$1"; complete -p impgate >/dev/null || exit 3
COMP_WORDS=(impgate ap); COMP_CWORD=1; _impgate; echo "${COMPREPLY[@]}"`, "bash", script).CombinedOutput()
	if err != nil || strings.TrimSpace(string(out)) != "approve" {
		t.Errorf("installed bash completion of 'impgate ap': %q, %v; want approve", out, err)
	}
}

// TestManSynopsisNamesEveryFlag: every flag a command parses, as its
// completion script lists them, is in its man page's SYNOPSIS, written
// as the page writes flags (Fl -name, Fl H for one letter).
func TestManSynopsisNamesEveryFlag(t *testing.T) {
	flagsLine := regexp.MustCompile(`^\t'flags:([^']*)'\) echo '([^']*)' ;;$`)
	for _, page := range []string{"impq.1", "impgate.1", "impgw.8", "impsup.8", "impexec.8"} {
		name := strings.TrimSuffix(page, filepath.Ext(page))
		b, err := os.ReadFile(filepath.Join("..", "man", page))
		if err != nil {
			t.Fatal(err)
		}
		synopsis, _, _ := strings.Cut(string(b), ".Sh DESCRIPTION")
		_, synopsis, _ = strings.Cut(synopsis, ".Sh SYNOPSIS")
		out, err := exec.Command(filepath.Join(bin, name), "completion", "bash").Output()
		if err != nil {
			t.Fatalf("%s completion bash: %v", name, err)
		}
		n := 0
		for _, line := range strings.Split(string(out), "\n") {
			m := flagsLine.FindStringSubmatch(line)
			if m == nil {
				continue
			}
			for _, f := range strings.Fields(m[2]) {
				n++
				if !regexp.MustCompile(`Fl ` + regexp.QuoteMeta(strings.TrimPrefix(f, "-")) + `(\s|$)`).MatchString(synopsis) {
					t.Errorf("%s: %s %s parses %s; the SYNOPSIS does not name it", page, name, m[1], f)
				}
			}
		}
		if n < 5 {
			t.Errorf("%s: %d flags found in its completion script; the parse of the script is broken", name, n)
		}
	}
}
