package executor

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/impyard/impyard/lib/blob"
	"github.com/impyard/impyard/lib/config"
	"github.com/impyard/impyard/lib/gate"
	"github.com/impyard/impyard/lib/id"
	"github.com/impyard/impyard/lib/intent"
	"github.com/impyard/impyard/lib/queue"
	"github.com/impyard/impyard/lib/run"
	"github.com/impyard/impyard/lib/worktree"
)

// pushFixture is a code task's run with one reviewed commit, ready to push
// to a local bare remote.
type pushFixture struct {
	r       *Runner
	remote  string
	g       *gate.Gate
	payload intent.Push
}

func newPushFixture(t *testing.T) *pushFixture {
	t.Helper()
	r := setup(t, "")
	tmp := t.TempDir()
	repo, remote := filepath.Join(tmp, "repo"), filepath.Join(tmp, "remote.git")
	gitOK(t, "", "init", "-q", "-b", "main", repo)
	os.WriteFile(filepath.Join(repo, "a"), []byte("a\n"), 0o644)
	gitOK(t, repo, "add", "a")
	gitOK(t, repo, "commit", "-q", "-m", "a")
	gitOK(t, "", "init", "-q", "--bare", remote)
	os.MkdirAll(r.Yard.Path("imps", "yuko"), 0o750)
	os.WriteFile(r.Yard.Path("imps", "yuko", "imp.toml"), []byte("remote = \""+remote+"\"\n"), 0o640)
	taskID, _, err := queue.Add(r.Yard, queue.AddOptions{Imp: "yuko", Text: "fix", Kind: queue.Code, Repo: repo, Base: "refs/heads/main", By: "alice", Actor: "test"})
	if err != nil {
		t.Fatal(err)
	}
	runID := id.New(id.Run)
	os.MkdirAll(run.Path(r.Yard, runID), 0o750)
	wt := run.Path(r.Yard, runID, "worktree")
	branch := worktree.Branch("yuko", taskID)
	base, err := worktree.Provision(repo, "main", branch, wt, os.Getuid(), os.Getgid())
	if err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(wt, "b"), []byte("b\n"), 0o644)
	head, diff, stat, err := worktree.Collect(wt, branch, base, runID)
	if err != nil {
		t.Fatal(err)
	}
	sum, err := blob.Put(r.Yard, diff)
	if err != nil {
		t.Fatal(err)
	}
	return &pushFixture{r: r, remote: remote,
		g:       &gate.Gate{ID: "g-0000000000000001", Imp: "yuko", Intent: "commit-and-push", Task: taskID, Run: runID},
		payload: intent.Push{Repo: repo, Branch: branch, Base: base, Head: head, Diff: "sha256:" + sum, Stat: stat}}
}

func (f *pushFixture) push(t *testing.T, exe *config.Executor, p intent.Push) (*Result, error) {
	t.Helper()
	b, _ := json.Marshal(p)
	return f.r.gitPush(context.Background(), f.g, exe, b)
}

func (f *pushFixture) remoteHead(branch string) string {
	out, _ := exec.Command("git", "--git-dir", f.remote, "rev-parse", "--verify", "--quiet", "refs/heads/"+branch).Output()
	return strings.TrimSpace(string(out))
}

// A push with then = "open-pr" files the pull-request gate once, onto the
// task's base.
func TestGitPushThenFilesThePullRequestGate(t *testing.T) {
	f := newPushFixture(t)
	exe := &config.Executor{Kind: config.GitPush, Then: "open-pr"}
	res, err := f.push(t, exe, f.payload)
	if err != nil {
		t.Fatal(err)
	}
	if f.remoteHead(f.payload.Branch) != f.payload.Head {
		t.Errorf("remote not at the reviewed head")
	}
	prs := prGates(t, f.r, "open-pr")
	if len(prs) != 1 {
		t.Fatalf("%d open-pr gates, want 1", len(prs))
	}
	want := "pushed " + f.payload.Head + " to refs/heads/" + f.payload.Branch + "; filed gate " + prs[0].ID + " (open-pr)"
	if res.Kind != config.GitPush || res.Detail != want {
		t.Errorf("detail %q, want %q", res.Detail, want)
	}
	b, _ := prs[0].Frozen()
	var pr map[string]string
	json.Unmarshal(b, &pr)
	if pr["base"] != "main" || pr["head"] != f.payload.Branch || pr["body"] != f.payload.Stat {
		t.Errorf("pull request payload %v", pr)
	}
	// Resumed: already pushed, the same gate found, nothing new filed.
	res, err = f.push(t, exe, f.payload)
	if err != nil || !strings.Contains(res.Detail, "nothing to push; filed gate "+prs[0].ID) {
		t.Errorf("resume: %+v %v", res, err)
	}
	if n := len(prGates(t, f.r, "open-pr")); n != 1 {
		t.Errorf("%d open-pr gates after a resume, want 1", n)
	}
}

// Every refusal before the push sends nothing and says so.
func TestGitPushRefusals(t *testing.T) {
	f := newPushFixture(t)
	exe := &config.Executor{Kind: config.GitPush}
	other := strings.Repeat("a", 40)
	for _, c := range []struct {
		name string
		edit func(*intent.Push)
		want string
	}{
		{"head not a sha", func(p *intent.Push) { p.Head = "HEAD" }, "are not full commit shas"},
		{"base not a sha", func(p *intent.Push) { p.Base = "main" }, "are not full commit shas"},
		{"diff missing", func(p *intent.Push) { p.Diff = "sha256:" + strings.Repeat("0", 64) }, "the reviewed diff"},
		{"branch moved", func(p *intent.Push) { p.Head = other }, "stale: branch " + f.payload.Branch + " moved from " + other},
		{"branch outside the imp's", func(p *intent.Push) { p.Branch = "main" }, "refusing to push"},
	} {
		p := f.payload
		c.edit(&p)
		_, err := f.push(t, exe, p)
		var o *outcome
		if !errors.As(err, &o) || o.sent || o.transient || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want %q, not sent, not transient", c.name, err, c.want)
		}
	}
	if _, err := f.r.gitPush(context.Background(), f.g, exe, []byte(`{"branch":`)); err == nil || !strings.Contains(err.Error(), "commit-and-push payload") {
		t.Errorf("payload not JSON: %v", err)
	}
	noRun := *f.g
	noRun.Run = ""
	b, _ := json.Marshal(f.payload)
	if _, err := f.r.gitPush(context.Background(), &noRun, exe, b); err == nil || !strings.Contains(err.Error(), "names no run") {
		t.Errorf("gate without a run: %v", err)
	}
	os.WriteFile(f.r.Yard.Path("imps", "yuko", "imp.toml"), []byte("\n"), 0o640)
	if _, err := f.push(t, exe, f.payload); err == nil || !strings.Contains(err.Error(), "sets no remote") {
		t.Errorf("imp without a remote: %v", err)
	}
	if h := f.remoteHead(f.payload.Branch); h != "" {
		t.Errorf("a refused push reached the remote: %s", h)
	}
	// A remote that cannot be read is worth trying again; nothing was sent.
	os.WriteFile(f.r.Yard.Path("imps", "yuko", "imp.toml"), []byte("remote = \""+filepath.Join(t.TempDir(), "gone.git")+"\"\n"), 0o640)
	_, err := f.push(t, exe, f.payload)
	var o *outcome
	if !errors.As(err, &o) || o.sent || !o.transient || !strings.Contains(err.Error(), "reading refs/heads/"+f.payload.Branch+" on the remote") {
		t.Errorf("unreadable remote: %v", err)
	}
}
