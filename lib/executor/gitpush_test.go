package executor

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/impyard/impyard/internal/approvaltest"
	"github.com/impyard/impyard/lib/blob"
	"github.com/impyard/impyard/lib/gate"
	"github.com/impyard/impyard/lib/id"
	"github.com/impyard/impyard/lib/run"
	"github.com/impyard/impyard/lib/state"
	"github.com/impyard/impyard/lib/worktree"
)

func gitOK(t *testing.T, dir string, args ...string) string {
	t.Helper()
	out, err := worktree.Git(dir, append([]string{"-c", "user.name=t", "-c", "user.email=t@t"}, args...)...)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func TestGitPushExecutor(t *testing.T) {
	r := setup(t, "[executors.commit-and-push]\nkind = \"git-push\"\n")
	tmp := t.TempDir()
	repo, remote := filepath.Join(tmp, "repo"), filepath.Join(tmp, "remote.git")
	gitOK(t, "", "init", "-q", "-b", "main", repo)
	os.WriteFile(filepath.Join(repo, "a"), []byte("a\n"), 0o644)
	gitOK(t, repo, "add", "a")
	gitOK(t, repo, "commit", "-q", "-m", "a")
	gitOK(t, "", "init", "-q", "--bare", remote)
	os.MkdirAll(r.Yard.Path("imps", "yuko"), 0o750)
	os.WriteFile(r.Yard.Path("imps", "yuko", "imp.toml"), []byte("remote = \""+remote+"\"\n"), 0o640)
	runID := id.New(id.Run)
	os.MkdirAll(run.Path(r.Yard, runID), 0o750)
	wt := run.Path(r.Yard, runID, "worktree")
	branch := worktree.Branch("yuko", "t-0000000000000000")
	base, err := worktree.Provision(repo, "main", branch, wt, os.Getuid(), os.Getgid())
	if err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(wt, "b"), []byte("b\n"), 0o644)
	head, diff, stat, err := worktree.Collect(wt, branch, base, runID)
	if err != nil {
		t.Fatal(err)
	}
	sum, _ := blob.Put(r.Yard, diff)
	payload, _ := json.Marshal(map[string]string{"repo": repo, "branch": branch, "base": base, "head": head, "diff": "sha256:" + sum, "stat": stat})
	file := func(p []byte) *gate.Gate {
		g, err := gate.File(r.Yard, gate.FileOptions{Imp: "yuko", Intent: "commit-and-push", Payload: p, Run: runID, By: "impsup", Actor: "test"})
		if err != nil {
			t.Fatal(err)
		}
		approvaltest.Approve(t, r.Yard, r.Home, g.ID)
		out, _ := r.Execute(context.Background(), g.ID)
		return out
	}
	remoteHead := func() string {
		out, _ := exec.Command("git", "--git-dir", remote, "rev-parse", "--verify", "--quiet", "refs/heads/"+branch).Output()
		return strings.TrimSpace(string(out))
	}
	if g := file(payload); g.State != state.Executed || remoteHead() != head {
		t.Fatalf("push: %s %s; remote %s", g.State, g.Result, remoteHead())
	}
	// The same sha again: a no-op success.
	if g := file(append(payload[:len(payload)-1:len(payload)-1], `,"again":"1"}`...)); g.State != state.Executed || !strings.Contains(string(g.Result), "nothing to push") {
		t.Fatalf("again: %s %s", g.State, g.Result)
	}
	// Branches outside imp/<imp>/ are refused.
	for _, b := range []string{"refs/heads/main", "main", "imp/other/x", "imp/yuko/../main", "refs/tags/imp/yuko/x", "imp/yuko/a/b"} {
		p := strings.Replace(string(payload), branch, b, 1)
		if g := file([]byte(p)); g.State != state.Failed || !strings.Contains(string(g.Result), "refusing to push") {
			t.Errorf("branch %q: %s %s", b, g.State, g.Result)
		}
	}
	// A remote that rejects the push (non-fast-forward) fails with git's reason.
	other := filepath.Join(tmp, "other")
	gitOK(t, "", "clone", "-q", remote, other)
	gitOK(t, other, "checkout", "-q", branch)
	gitOK(t, other, "commit", "-q", "--allow-empty", "-m", "theirs")
	gitOK(t, other, "push", "-q", "origin", branch)
	theirs := remoteHead()
	gitOK(t, wt, "commit", "-q", "--allow-empty", "-m", "ours")
	head2, diff2, stat2, err := worktree.Collect(wt, branch, base, runID)
	if err != nil {
		t.Fatal(err)
	}
	sum2, _ := blob.Put(r.Yard, diff2)
	p2, _ := json.Marshal(map[string]string{"repo": repo, "branch": branch, "base": base, "head": head2, "diff": "sha256:" + sum2, "stat": stat2})
	if g := file(p2); g.State != state.Failed || !strings.Contains(string(g.Result), "refused the push") || remoteHead() != theirs {
		t.Errorf("rejected push: %s %s", g.State, g.Result)
	}
	// A diff blob that no longer matches its hash: refused.
	os.WriteFile(r.Yard.Path("blobs", "sha256", sum2), []byte("tampered"), 0o640)
	if g := file(append(p2[:len(p2)-1:len(p2)-1], `,"x":"1"}`...)); g.State != state.Failed || !strings.Contains(string(g.Result), "not to its name") {
		t.Errorf("tampered blob: %s %s", g.State, g.Result)
	}
}
