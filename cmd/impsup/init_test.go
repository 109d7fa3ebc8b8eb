package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/impyard/impyard/lib/config"
	"github.com/impyard/impyard/lib/judge"
	"github.com/impyard/impyard/lib/yard"
	"github.com/impyard/impyard/policies"
)

// initYard runs impsup init with args and returns its exit status and
// output.
func initYard(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	var stdout, stderr bytes.Buffer
	code := run(context.Background(), append([]string{"init"}, args...), nil, &stdout, &stderr)
	return code, stdout.String(), stderr.String()
}

// TestInitWritesLoadableFiles: the org.toml init writes loads with
// lib/config, and the policy is the shipped one and loads as the
// gateway's policy.
func TestInitWritesLoadableFiles(t *testing.T) {
	t.Setenv("IMPYARD_HOME", filepath.Join(t.TempDir(), "home"))
	dir := filepath.Join(t.TempDir(), "yard")
	if code, _, stderr := initYard(t, dir); code != 0 {
		t.Fatalf("init exited %d: %s", code, stderr)
	}
	y, err := yard.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := config.LoadOrg(y); err != nil {
		t.Errorf("the org.toml init wrote does not load: %v", err)
	}
	if p, err := judge.Load(y.PolicyPath()); err != nil || len(p.Rules()) == 0 {
		t.Errorf("the policy init wrote does not load as the gateway's: %v", err)
	}
	if b, _ := os.ReadFile(y.PolicyPath()); !bytes.Equal(b, policies.Gateway) {
		t.Error("the policy init wrote is not the shipped one")
	}
}

// TestInitJSON: --json prints one object per thing made, each naming
// what it is, and nothing for a yard that needs nothing.
func TestInitJSON(t *testing.T) {
	home := filepath.Join(t.TempDir(), "home")
	t.Setenv("IMPYARD_HOME", home)
	dir := filepath.Join(t.TempDir(), "yard")
	code, stdout, stderr := initYard(t, "--json", dir)
	if code != 0 {
		t.Fatalf("init exited %d: %s", code, stderr)
	}
	var got []string
	for _, line := range strings.Split(strings.TrimSpace(stdout), "\n") {
		var c created
		if err := json.Unmarshal([]byte(line), &c); err != nil {
			t.Fatalf("%q: %v", line, err)
		}
		rel, err := filepath.Rel(dir, c.Path)
		if strings.HasPrefix(rel, "..") {
			rel, err = filepath.Rel(home, c.Path)
			rel = "~/" + rel
		}
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, c.What+" "+rel)
	}
	want := []string{"directory .", "directory queue", "directory gates/pending", "directory gates/resolved",
		"directory journal", "directory runs", "directory policies", "directory imps", "config org.toml",
		"policy policies/gateway.json", "secrets ~/secrets", "ca ~/ca/ca.key", "ca ~/ca/ca.crt", "signing-key ~/keys/owner.key",
		"signing-key ~/keys/owner.pub", "signers signers/trusted.json", "marker .impyard-yard"}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("init --json made\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	if fi, err := os.Lstat(filepath.Join(home, "secrets")); err != nil || !fi.IsDir() || fi.Mode().Perm() != 0o700 {
		t.Errorf("IMPYARD_HOME/secrets: %v, %v; want a directory, mode 0700", fi, err)
	}
	if code, stdout, _ := initYard(t, "--json", dir); code != 0 || stdout != "" {
		t.Errorf("second init --json: exit %d, %q; want 0 and nothing", code, stdout)
	}
}

// TestInitInterrupted: an init that fails before its end leaves no
// marker, so no program takes the directory for a yard; the next init
// makes what is missing, the marker last, and nothing twice.
func TestInitInterrupted(t *testing.T) {
	tmp := t.TempDir()
	blocked := filepath.Join(tmp, "home-is-a-file")
	os.WriteFile(blocked, nil, 0o600)
	t.Setenv("IMPYARD_HOME", blocked)
	dir := filepath.Join(tmp, "yard")
	code, stdout, stderr := initYard(t, dir)
	if code != 1 || !strings.Contains(stdout, "created "+filepath.Join(dir, "org.toml")+"\n") || stderr == "" {
		t.Fatalf("init with an unusable IMPYARD_HOME: exit %d\n%s%s; want 1 after making the yard's files", code, stdout, stderr)
	}
	if _, err := yard.Open(dir); !errors.Is(err, yard.ErrNotAYard) {
		t.Fatalf("Open after an interrupted init: %v; want ErrNotAYard", err)
	}
	t.Setenv("IMPYARD_HOME", filepath.Join(tmp, "home"))
	code, stdout, stderr = initYard(t, dir)
	if code != 0 {
		t.Fatalf("second init exited %d: %s", code, stderr)
	}
	lines := strings.Split(strings.TrimSpace(stdout), "\n")
	if len(lines) != 7 || lines[5] != "created "+filepath.Join(dir, "signers", "trusted.json") || lines[6] != "created "+filepath.Join(dir, ".impyard-yard") || strings.Contains(stdout, dir+"/org.toml") {
		t.Errorf("second init printed\n%s\nwant secrets/, the CA, the owner's key, the record of the keys trusted, then the marker, and nothing made before", stdout)
	}
	if _, err := yard.Open(dir); err != nil {
		t.Errorf("Open after the second init: %v", err)
	}
}

// TestInitRefusesForeignMarker: a marker of another major is refused,
// naming it, before anything is added to the directory.
func TestInitRefusesForeignMarker(t *testing.T) {
	t.Setenv("IMPYARD_HOME", filepath.Join(t.TempDir(), "home"))
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, ".impyard-yard"), []byte(`{"schema":"impyard.yard/2"}`), 0o640)
	code, stdout, stderr := initYard(t, dir)
	if code != 1 || stdout != "" || !strings.Contains(stderr, filepath.Join(dir, ".impyard-yard")+`: schema "impyard.yard/2" is not supported`) {
		t.Errorf("init over a future marker: exit %d, %q, %q", code, stdout, stderr)
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 1 {
		t.Errorf("init added to a directory it refused: %v", entries)
	}
}

// TestInitShareUsage: --owner alone, or a group or user that does not
// exist, is a usage error (exit 2), and nothing is made.
func TestInitShareUsage(t *testing.T) {
	t.Setenv("IMPYARD_HOME", filepath.Join(t.TempDir(), "home"))
	for _, args := range [][]string{
		{"--owner", "0"},
		{"--group", "no-such-group-impyard"},
		{"--group", "0", "--owner", "no-such-user-impyard"},
	} {
		dir := filepath.Join(t.TempDir(), "yard")
		code, _, stderr := initYard(t, append(args, dir)...)
		if code != 2 {
			t.Errorf("init %v: exit %d, want 2: %s", args, code, stderr)
		}
		if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("init %v made %s: %v", args, dir, err)
		}
	}
}
