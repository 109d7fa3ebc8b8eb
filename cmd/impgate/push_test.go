package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/impyard/impyard/internal/approvaltest"
	"github.com/impyard/impyard/lib/blob"
	"github.com/impyard/impyard/lib/executor"
	"github.com/impyard/impyard/lib/gate"
	"github.com/impyard/impyard/lib/id"
	"github.com/impyard/impyard/lib/intent"
	runpkg "github.com/impyard/impyard/lib/run"
	"github.com/impyard/impyard/lib/state"
	"github.com/impyard/impyard/lib/worktree"
	"github.com/impyard/impyard/lib/yard/yardtest"
)

// A commit-and-push payload filed as the supervisor files it (an
// intent.Push) is shown by impgate with its stat and diff, and pushed by
// the executor, which reads the same fields: one definition, three
// processes.
func TestPushPayloadRoundTrip(t *testing.T) {
	y := yardtest.New(t)
	home := t.TempDir()
	tmp := t.TempDir()
	repo, remote := filepath.Join(tmp, "repo"), filepath.Join(tmp, "remote.git")
	git := func(dir string, args ...string) {
		t.Helper()
		if _, err := worktree.Git(dir, append([]string{"-c", "user.name=t", "-c", "user.email=t@t"}, args...)...); err != nil {
			t.Fatal(err)
		}
	}
	git("", "init", "-q", "-b", "main", repo)
	os.WriteFile(filepath.Join(repo, "a"), []byte("a\n"), 0o644)
	git(repo, "add", "a")
	git(repo, "commit", "-q", "-m", "a")
	git("", "init", "-q", "--bare", remote)
	os.WriteFile(y.Path("org.toml"), []byte("[executors."+intent.CommitAndPush+"]\nkind = \"git-push\"\n"), 0o640)
	os.MkdirAll(y.Path("imps", "yuko"), 0o750)
	os.WriteFile(y.Path("imps", "yuko", "imp.toml"), []byte("remote = \""+remote+"\"\n"), 0o640)

	runID := id.New(id.Run)
	os.MkdirAll(runpkg.Path(y, runID), 0o750)
	wt := runpkg.Path(y, runID, "worktree")
	branch := worktree.Branch("yuko", "t-0000000000000000")
	base, err := worktree.Provision(repo, "main", branch, wt, os.Getuid(), os.Getgid())
	if err != nil {
		t.Fatal(err)
	}
	// The box wrote an escape sequence that would erase the line on the
	// owner's terminal: the desk shows it escaped.
	os.WriteFile(filepath.Join(wt, "b"), []byte("the new line\x1b[2K\n"), 0o644)
	head, diff, stat, err := worktree.Collect(wt, branch, base, runID)
	if err != nil {
		t.Fatal(err)
	}
	sum, err := blob.Put(y, diff)
	if err != nil {
		t.Fatal(err)
	}
	filed := intent.Push{Repo: repo, Branch: branch, Base: base, Head: head, Diff: blob.Prefix + sum, Stat: stat}
	p, _ := json.Marshal(filed)
	g, err := gate.File(y, gate.FileOptions{Imp: "yuko", Intent: intent.CommitAndPush, Payload: p, Run: runID, By: "impsup", Actor: "test"})
	if err != nil {
		t.Fatal(err)
	}

	var stdout, stderr bytes.Buffer
	if code := run(context.Background(), []string{"show", "--root", y.Root, g.ID}, nil, &stdout, &stderr); code != 0 {
		t.Fatalf("impgate show: exit %d: %s", code, stderr.String())
	}
	for _, want := range []string{"stat:\n" + stat + "\n", "diff (" + filed.Diff + ", ", `+the new line\x1b[2K` + "\n"} {
		if !strings.Contains(stdout.String(), want) {
			t.Errorf("impgate show lacks %q:\n%s", want, stdout.String())
		}
	}
	if strings.Contains(stdout.String(), "\x1b") {
		t.Errorf("impgate show wrote the diff's escape sequence raw:\n%q", stdout.String())
	}
	stdout.Reset()
	if code := run(context.Background(), []string{"show", "--stat", "--root", y.Root, g.ID}, nil, &stdout, &stderr); code != 0 || stdout.String() != stat+"\n" {
		t.Errorf("impgate show --stat: exit %d, %q; want %q", code, stdout.String(), stat+"\n")
	}

	approvaltest.Approve(t, y, home, g.ID)
	r := &executor.Runner{Yard: y, Home: home, Logf: t.Logf}
	out, err := r.Execute(context.Background(), g.ID)
	if err != nil || out.State != state.Executed {
		t.Fatalf("execute: %v, %s %s", err, out.State, out.Result)
	}
	got, err := exec.Command("git", "--git-dir", remote, "rev-parse", "refs/heads/"+branch).Output()
	if err != nil || strings.TrimSpace(string(got)) != head {
		t.Errorf("remote %s at %q (%v); want the reviewed head %s", branch, got, err, head)
	}
}
