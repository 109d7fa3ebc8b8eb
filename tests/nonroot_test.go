package tests

import (
	"encoding/json"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
)

// account is who a command runs as: root (cred nil), or a numeric uid
// and gid with no passwd entry, so the test adds no user to the machine.
type account struct {
	cred *syscall.Credential
	home string // HOME, whose .impyard is the account's IMPYARD_HOME
}

// nonroot is a yard shared with a group, and the accounts that use it.
type nonroot struct {
	bin, root, rootHome string
}

// run runs the binary name (or, when name has a slash, that program) as
// a with stdin, and returns its exit status and combined output.
func (n *nonroot) run(t *testing.T, a account, stdin, name string, args ...string) (int, string) {
	t.Helper()
	if !strings.Contains(name, "/") {
		name = filepath.Join(n.bin, name)
	}
	cmd := exec.Command(name, args...)
	cmd.Env = []string{"PATH=/usr/bin:/bin", "IMPYARD_ROOT=" + n.root, "HOME=" + a.home}
	if a.cred == nil {
		cmd.Env = append(cmd.Env, "IMPYARD_HOME="+n.rootHome)
	}
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: a.cred}
	cmd.Stdin = strings.NewReader(stdin)
	out, err := cmd.CombinedOutput()
	var exit *exec.ExitError
	switch {
	case errors.As(err, &exit):
		return exit.ExitCode(), string(out)
	case err != nil:
		t.Fatalf("%s %v: %v", name, args, err)
	}
	return 0, string(out)
}

// must runs what run runs and fails the test unless it exits 0.
func (n *nonroot) must(t *testing.T, a account, stdin, name string, args ...string) string {
	t.Helper()
	code, out := n.run(t, a, stdin, name, args...)
	if code != 0 {
		t.Fatalf("%s %v exited %d: %s", name, args, code, out)
	}
	return out
}

// copyBin copies the binaries the test runs into dir, which every
// account may enter: the ones TestMain built sit in a directory only
// root may.
func copyBin(t *testing.T, dir string) {
	t.Helper()
	for _, b := range []string{"impsup", "impq", "impgate", "impexec"} {
		src, err := os.Open(filepath.Join(bin, b))
		if err != nil {
			t.Fatal(err)
		}
		dst, err := os.OpenFile(filepath.Join(dir, b), os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o755)
		if err == nil {
			_, err = io.Copy(dst, src)
			if cerr := dst.Close(); err == nil {
				err = cerr
			}
		}
		src.Close()
		if err != nil {
			t.Fatal(err)
		}
	}
}

// TestSharedYardNonRootOwner is the setup impyard(7) describes as "A
// yard shared with a group", through the real binaries: daemons as root
// with their own IMPYARD_HOME; alice, the yard's owner, in the group,
// with only her private key in her own IMPYARD_HOME; mallory, another
// member of the group, who may write the work directories and nothing
// that grants authority; and eve, in no group, who is refused with the
// file named.
func TestSharedYardNonRootOwner(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root, to run commands as other accounts")
	}
	const group, aliceUID, malloryUID, eveUID = 61000, 61001, 61002, 61003
	base, err := os.MkdirTemp("", "impyard-nonroot-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(base) })
	if err := os.Chmod(base, 0o755); err != nil {
		t.Fatal(err)
	}
	n := &nonroot{bin: filepath.Join(base, "bin"), root: filepath.Join(base, "yard"), rootHome: filepath.Join(base, "root-home")}
	for _, d := range []string{n.bin, n.rootHome} {
		if err := os.Mkdir(d, 0o700); err != nil {
			t.Fatal(err)
		}
	}
	os.Chmod(n.bin, 0o755)
	copyBin(t, n.bin)
	user := func(uid uint32, groups ...uint32) account {
		h := filepath.Join(base, "home-"+strconv.Itoa(int(uid)))
		if err := os.Mkdir(h, 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.Chown(h, int(uid), int(uid)); err != nil {
			t.Fatal(err)
		}
		return account{cred: &syscall.Credential{Uid: uid, Gid: uid, Groups: groups}, home: h}
	}
	root := account{home: n.rootHome}
	alice, mallory, eve := user(aliceUID, group), user(malloryUID, group), user(eveUID)

	n.must(t, root, "", "impsup", "init", "--group", "61000", "--owner", "61001", n.root)
	for _, c := range []struct {
		rel  string
		want os.FileMode
	}{
		{".", os.ModeDir | os.ModeSetgid | 0o750},
		{"imps", os.ModeDir | os.ModeSetgid | 0o750},
		{"policies", os.ModeDir | os.ModeSetgid | 0o750},
		{"org.toml", 0o640},
		{"queue", os.ModeDir | os.ModeSetgid | 0o770},
		{"gates/pending", os.ModeDir | os.ModeSetgid | 0o770},
		{"journal", os.ModeDir | os.ModeSetgid | 0o770},
	} {
		fi, err := os.Lstat(filepath.Join(n.root, c.rel))
		if err != nil {
			t.Fatal(err)
		}
		if st := fi.Sys().(*syscall.Stat_t); fi.Mode() != c.want || st.Gid != group {
			t.Errorf("%s: mode %v gid %d, want %v gid %d", c.rel, fi.Mode(), st.Gid, c.want, group)
		}
	}

	// alice owns the yard: she edits org.toml as any file of hers.
	org := filepath.Join(n.root, "org.toml")
	n.must(t, alice, "[executors.message-user]\nkind = \"message-user\"\n", "/bin/sh", "-c", `cat >"$IMPYARD_ROOT/org.toml"`)
	// Or through impsup config edit, under the root's lock, which a
	// daemon may have made since (root's, 0640): she takes it for
	// reading, all flock needs.
	lock := filepath.Join(n.root, ".lock")
	if err := os.Remove(lock); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(lock, nil, 0o640); err != nil {
		t.Fatal(err)
	}
	n.must(t, alice, "", "/usr/bin/env", "EDITOR=echo '# by alice' >>", filepath.Join(n.bin, "impsup"), "config", "edit", "--yes", "org.toml")
	if b, err := os.ReadFile(org); err != nil || !strings.Contains(string(b), "# by alice") {
		t.Fatalf("impsup config edit by alice: %v %s", err, b)
	}
	// mallory, a writer of the yard, may not; nor add an imp.
	if code, out := n.run(t, mallory, "", "/bin/sh", "-c", `echo '[trust]' >>"$IMPYARD_ROOT/org.toml"`); code == 0 {
		t.Errorf("mallory wrote org.toml: %s", out)
	}
	if code, out := n.run(t, mallory, "", "/bin/mkdir", filepath.Join(n.root, "imps", "evil")); code == 0 {
		t.Errorf("mallory made an imp's directory: %s", out)
	}
	// Neither reads the daemons' IMPYARD_HOME.
	if code, out := n.run(t, alice, "", "/bin/cat", filepath.Join(n.rootHome, "keys", "owner.key")); code == 0 {
		t.Errorf("alice read the daemons' owner key: %s", out)
	}

	// alice's key, in her home; its public half registered where impexec
	// looks, as root.
	n.must(t, alice, "", "impgate", "key", "init")
	pub := filepath.Join(alice.home, ".impyard", "keys", "owner.pub")
	n.must(t, root, "", "/usr/bin/install", "-m", "0644", pub, filepath.Join(n.rootHome, "keys", "alice.pub"))

	// Her daily commands.
	task := strings.TrimSpace(n.must(t, alice, "", "impq", "add", "--imp", "yuko", "--force", "look at the logs"))
	if out := n.must(t, alice, "", "impq", "ls", "--json"); !strings.Contains(out, task) {
		t.Errorf("impq ls does not list %s: %s", task, out)
	}
	// A daemon's change to her task, and hers to one of root's.
	n.must(t, root, "", "impq", "cancel", task)
	rootTask := strings.TrimSpace(n.must(t, root, "", "impq", "add", "--imp", "yuko", "--force", "from cron"))
	n.must(t, alice, "", "impq", "cancel", rootTask)

	gid := strings.TrimSpace(n.must(t, root, `{"text":"hello alice"}`, "impgate", "file", "--imp", "yuko", "--intent", "message-user", "--payload-file", "-"))
	if out := n.must(t, alice, "", "impgate", "ls"); !strings.Contains(out, gid) {
		t.Errorf("impgate ls does not list %s: %s", gid, out)
	}
	// Before impexec has looked at its keys again, the yard's record
	// does not list hers: approving is refused, and nothing is signed.
	if code, out := n.run(t, alice, "", "impgate", "approve", gid); code != 1 || !strings.Contains(out, "owner.key") {
		t.Errorf("approve with a key impexec has not recorded: exit %d, want 1 naming the key: %s", code, out)
	}
	// impexec brings the record up to date whenever it looks at a gate.
	n.run(t, root, "", "impexec", "once", gid)
	var g struct {
		SHA256 string `json:"sha256"`
	}
	if err := json.Unmarshal([]byte(n.must(t, alice, "", "impgate", "show", "--json", gid)), &g); err != nil || g.SHA256 == "" {
		t.Fatalf("impgate show --json: %v %+v", err, g)
	}
	n.must(t, alice, "", "impgate", "approve", "--sha", g.SHA256, gid)
	n.must(t, root, "", "impexec", "once", gid)
	var done struct {
		State string `json:"state"`
	}
	if err := json.Unmarshal([]byte(n.must(t, alice, "", "impgate", "show", "--json", gid)), &done); err != nil || done.State != "executed" {
		t.Fatalf("gate approved by alice: %v, state %q, want executed", err, done.State)
	}
	if b, err := os.ReadFile(filepath.Join(n.root, "notifications.jsonl")); err != nil || !strings.Contains(string(b), "hello alice") {
		t.Errorf("message-user did not deliver: %v %s", err, b)
	}
	if out := n.must(t, alice, "", "impgate", "log", gid); !strings.Contains(out, "executed") {
		t.Errorf("impgate log: %s", out)
	}

	// eve, in no group, is refused, and told which file.
	if code, out := n.run(t, eve, "", "impq", "ls"); code != 1 || !strings.Contains(out, n.root) || !strings.Contains(out, "permission denied") {
		t.Errorf("impq ls by an account outside the group: exit %d, want 1 naming the file: %s", code, out)
	}

	// org.toml made group-writable: the daemons refuse it, naming it,
	// and execute nothing.
	gid2 := strings.TrimSpace(n.must(t, root, `{"text":"again"}`, "impgate", "file", "--imp", "yuko", "--intent", "message-user", "--payload-file", "-"))
	if err := json.Unmarshal([]byte(n.must(t, alice, "", "impgate", "show", "--json", gid2)), &g); err != nil {
		t.Fatal(err)
	}
	n.must(t, alice, "", "impgate", "approve", "--sha", g.SHA256, gid2)
	if err := os.Chmod(org, 0o660); err != nil {
		t.Fatal(err)
	}
	if code, out := n.run(t, root, "", "impexec", "once", gid2); code == 0 || !strings.Contains(out, org) || !strings.Contains(out, "writable by its group") {
		t.Errorf("impexec once with a group-writable org.toml: exit %d, want a refusal naming it: %s", code, out)
	}
	if b, _ := os.ReadFile(filepath.Join(n.root, "notifications.jsonl")); strings.Contains(string(b), "again") {
		t.Error("a gate was executed under a group-writable org.toml")
	}
}
