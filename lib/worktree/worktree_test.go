package worktree

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func gitT(t *testing.T, dir string, args ...string) string {
	t.Helper()
	out, err := Git(dir, append([]string{"-c", "user.name=t", "-c", "user.email=t@t"}, args...)...)
	if err != nil {
		t.Fatalf("git %v: %v", args, err)
	}
	return out
}

func newRepo(t *testing.T) (string, string) {
	repo := filepath.Join(t.TempDir(), "repo")
	gitT(t, "", "init", "-q", "-b", "main", repo)
	os.WriteFile(filepath.Join(repo, "README"), []byte("hi\n"), 0o644)
	gitT(t, repo, "add", "README")
	gitT(t, repo, "commit", "-q", "-m", "one")
	return repo, gitT(t, repo, "rev-parse", "HEAD")
}

func TestWorktreeProvisionCollect(t *testing.T) {
	repo, base := newRepo(t)
	objectsBefore, _ := os.ReadDir(filepath.Join(repo, ".git", "objects"))
	if _, err := Resolve(t.TempDir(), "main"); err == nil || !strings.Contains(err.Error(), "not a git repository") {
		t.Fatalf("not a repo: %v", err)
	}
	if _, err := Resolve(repo, "nope"); err == nil || !strings.Contains(err.Error(), "does not name a commit") {
		t.Fatalf("missing base: %v", err)
	}
	dir := filepath.Join(t.TempDir(), "wt")
	got, err := Provision(repo, "main", Branch("ann", "t-1"), dir, os.Getuid(), os.Getgid())
	if err != nil || got != base {
		t.Fatalf("provision: %s %v", got, err)
	}
	// Alternates relative to the clone, so they resolve in the box too.
	alt, _ := os.ReadFile(filepath.Join(dir, ".git", "objects", "info", "alternates"))
	if string(alt) != "../../../repo/.git/objects\n" {
		t.Fatalf("alternates %q", alt)
	}
	// What a box plants to reach another repository is undone.
	os.WriteFile(filepath.Join(dir, ".git", "objects", "info", "alternates"), []byte("/etc\n"), 0o644)
	os.WriteFile(filepath.Join(dir, ".git", "commondir"), []byte(filepath.Join(repo, ".git")+"\n"), 0o644)
	// Nothing changed: no changes.
	if _, _, _, err := Collect(dir, "imp/ann/t-1", base, "r-1"); !errors.Is(err, ErrNoChanges) {
		t.Fatalf("no changes: %v", err)
	}
	// Leftovers are committed by the fallback.
	os.WriteFile(filepath.Join(dir, "hello.txt"), []byte("hello\n"), 0o644)
	head, diff, stat, err := Collect(dir, "imp/ann/t-1", base, "r-1")
	if err != nil || head == base || !strings.Contains(string(diff), "+hello") || !strings.Contains(stat, "hello.txt") {
		t.Fatalf("collect: %s %q %q %v", head, diff, stat, err)
	}
	if msg := gitT(t, dir, "log", "-1", "--format=%s"); msg != "impyard: changes left uncommitted by run r-1" {
		t.Fatalf("message %q", msg)
	}
	// The repository was not written.
	objectsAfter, _ := os.ReadDir(filepath.Join(repo, ".git", "objects"))
	if len(objectsAfter) != len(objectsBefore) {
		t.Fatalf("the repository's objects changed: %d -> %d", len(objectsBefore), len(objectsAfter))
	}
	if b := gitT(t, repo, "branch", "--list", "imp/*"); b != "" {
		t.Fatalf("the repository got branch %q", b)
	}
	// Another branch is refused.
	gitT(t, dir, "branch", "side")
	if _, _, _, err := Collect(dir, "imp/ann/t-1", base, "r-1"); err == nil || !strings.Contains(err.Error(), "another branch") {
		t.Fatalf("side branch: %v", err)
	}
	gitT(t, dir, "branch", "-D", "side")
	// History rewritten below base.
	gitT(t, dir, "checkout", "-q", "--orphan", "tmp")
	gitT(t, dir, "commit", "-q", "-m", "orphan")
	gitT(t, dir, "branch", "-M", "imp/ann/t-1")
	if _, _, _, err := Collect(dir, "imp/ann/t-1", base, "r-1"); err == nil || !strings.Contains(err.Error(), "history rewritten") {
		t.Fatalf("rewritten: %v", err)
	}
	// A hook left by the box never runs on the trusted side.
	os.MkdirAll(filepath.Join(dir, ".git", "hooks"), 0o755)
	os.WriteFile(filepath.Join(dir, ".git", "hooks", "pre-commit"), []byte("#!/bin/sh\ntouch "+filepath.Join(dir, "..", "pwned")+"\n"), 0o755)
	os.WriteFile(filepath.Join(dir, "x"), []byte("x"), 0o644)
	Collect(dir, "imp/ann/t-1", base, "r-1")
	if _, err := os.Stat(filepath.Join(dir, "..", "pwned")); err == nil {
		t.Fatal("a hook of the box ran")
	}
	if _, err := os.Stat(filepath.Join(dir, ".git", "commondir")); err == nil {
		t.Fatal("a planted commondir survived")
	}
	if err := Remove(dir); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Lstat(filepath.Join(filepath.Dir(dir), "repo")); err == nil {
		t.Fatal("the link to the repository survived Remove")
	}
}
