package tests

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/impyard/impyard/lib/blob"
	"github.com/impyard/impyard/lib/gate"
	runrec "github.com/impyard/impyard/lib/run"
	"github.com/impyard/impyard/lib/state"
)

func gitRun(t *testing.T, dir string, args ...string) string {
	t.Helper()
	full := append([]string{"-c", "safe.directory=*", "-c", "user.name=t", "-c", "user.email=t@t"}, args...)
	if dir != "" {
		full = append([]string{"-C", dir}, full...)
	}
	out, err := exec.Command("git", full...).CombinedOutput()
	if err != nil {
		t.Fatalf("git %v: %v\n%s", args, err, out)
	}
	return strings.TrimSpace(string(out))
}

// remoteRef is the sha of ref in the bare remote, "" when it has none.
func remoteRef(remote, ref string) string {
	out, _ := exec.Command("git", "--git-dir", remote, "rev-parse", "--verify", "--quiet", ref).Output()
	return strings.TrimSpace(string(out))
}

func (b *boxYard) codeGate(t *testing.T, taskID string) (*gate.Gate, map[string]string) {
	t.Helper()
	gates, _ := gate.List(b.y, gate.Filter{All: true})
	for _, g := range gates {
		if g.Task == taskID && g.Intent == "commit-and-push" {
			var p map[string]string
			if err := json.Unmarshal(g.Payload, &p); err != nil {
				t.Fatal(err)
			}
			return g, p
		}
	}
	task := b.task(t, taskID)
	t.Fatalf("task %s (%s: %s) has no commit-and-push gate", taskID, task.State, task.Reason)
	return nil, nil
}

// TestCodePush is the working-copy flow with real git and real boxes: an
// imp without git in its image changes its worktree, impsup commits it and
// files a commit-and-push gate with the exact diff; approval pushes the
// reviewed head to a bare remote and chains an open-pr gate whose approval
// makes exactly one PR request to a stand-in GitHub with the injected
// token; a denial, a stale approval and a payload naming main push nothing;
// bad repositories, bad bases and no changes end the task with the reason.
func TestCodePush(t *testing.T) {
	b := newBoxYard(t)
	tmp := t.TempDir()
	repo, remote := filepath.Join(tmp, "repo"), filepath.Join(tmp, "remote.git")
	gitRun(t, "", "init", "-q", "-b", "main", repo)
	os.WriteFile(filepath.Join(repo, "README"), []byte("hi\n"), 0o644)
	gitRun(t, repo, "add", "README")
	gitRun(t, repo, "commit", "-q", "-m", "one")
	base := gitRun(t, repo, "rev-parse", "HEAD")
	gitRun(t, "", "init", "-q", "--bare", remote)
	writer := `["/bin/sh", "-c", "cd $IMPYARD_WORKTREE && echo hello from $IMPYARD_IMP > hello.txt && rm README"]`
	for _, imp := range []string{"ann", "bob", "cat", "eve", "fay"} {
		b.imp(t, imp, map[string]string{"command": writer, "repo": `"` + repo + `"`, "remote": `"` + remote + `"`})
	}
	b.imp(t, "dan", map[string]string{"command": `["/bin/sh", "-c", "test -w $IMPYARD_WORKTREE/README"]`, "repo": `"` + repo + `"`, "remote": `"` + remote + `"`})
	// The stand-in GitHub is the spine's loopback HTTPS server.
	os.WriteFile(filepath.Join(b.home, "secrets", "github"), []byte("ghp_test_token\n"), 0o600)
	pol, _ := os.ReadFile(b.y.PolicyPath())
	pol = []byte(strings.Replace(string(pol), `"rules":[`, `"rules":[
	 {"name":"open-pr","match":{"protocol":"https","host":"127.0.0.1","method":"POST","pathPrefix":"/repos/o/r/pulls","subject":"org","network":"127.0.0.0/8"},
	  "verdict":"allow","inject":{"header":"authorization","secret":"github","format":"Bearer %s"}},`, 1))
	os.WriteFile(b.y.PolicyPath(), pol, 0o640)
	org, _ := os.ReadFile(b.y.Path("org.toml"))
	org = append(org, `
[executors.commit-and-push]
kind = "git-push"
then = "open-pr"
[executors.open-pr]
kind = "http"
url = "`+b.mail.srv.URL+`/repos/o/r/pulls"
`...)
	os.WriteFile(b.y.Path("org.toml"), org, 0o640)

	ann := b.add(t, "ann", "say hello", "--kind", "code", "--repo", repo, "--base", "main")
	bob := b.add(t, "bob", "say hello", "--kind", "code", "--repo", repo, "--base", "main")
	cat := b.add(t, "cat", "say hello", "--kind", "code", "--repo", repo)
	dan := b.add(t, "dan", "do nothing", "--kind", "code", "--repo", repo, "--base", "main")
	eve := b.add(t, "eve", "not a repo", "--kind", "code", "--repo", tmp)
	fay := b.add(t, "fay", "no such base", "--kind", "code", "--repo", repo, "--base", "nope")
	out := b.once(t)
	out += b.once(t)

	if task := b.task(t, dan); task.State != state.Done || !strings.Contains(task.Reason, "no changes") {
		t.Errorf("no changes: %s %q\n%s\n%s", task.State, task.Reason, out, b.boxLog(t, task))
	}
	if task := b.task(t, eve); task.State != state.Failed || !strings.Contains(task.Reason, "not a git repository") {
		t.Errorf("not a repository: %s %q", task.State, task.Reason)
	}
	if task := b.task(t, fay); task.State != state.Failed || !strings.Contains(task.Reason, `base "nope" does not name a commit`) {
		t.Errorf("missing base: %s %q", task.State, task.Reason)
	}
	for _, imp := range []string{"dan", "eve", "fay"} {
		if gates, _ := gate.List(b.y, gate.Filter{All: true, Imp: imp}); len(gates) != 0 {
			t.Errorf("%s filed gates: %v", imp, gates)
		}
	}

	// ann: the gate holds the exact diff; approval pushes the reviewed head.
	task := b.task(t, ann)
	if task.State != state.NeedsReview {
		t.Fatalf("ann's task is %s (%s)\n%s\n%s", task.State, task.Reason, out, b.boxLog(t, task))
	}
	g, p := b.codeGate(t, ann)
	wt := runrec.Path(b.y, task.Runs[0], "worktree")
	if p["branch"] != "imp/ann/"+ann || p["base"] != base || p["repo"] != repo || p["head"] != gitRun(t, wt, "rev-parse", "HEAD") {
		t.Fatalf("payload %v", p)
	}
	want := gitRun(t, wt, "diff", "--binary", "--no-color", base, p["head"]) + "\n"
	diff, err := blob.Get(b.y, p["diff"])
	if err != nil || string(diff) != want || !strings.Contains(want, "+hello from ann") || !strings.Contains(want, "-hi") {
		t.Fatalf("diff blob %q (%v), want %q", diff, err, want)
	}
	if msg := gitRun(t, wt, "log", "-1", "--format=%s"); !strings.Contains(msg, task.Runs[0]) {
		t.Errorf("fallback commit message %q does not name the run", msg)
	}
	if b := gitRun(t, repo, "branch", "--list", "imp/*"); b != "" {
		t.Errorf("the repository itself got a branch: %q", b)
	}
	shown, err := b.run(t, "impgate", "show", g.ID)
	if err != nil || !strings.Contains(shown, want) || strings.Contains(shown, "\x1b[") || !strings.Contains(shown, "hello.txt | 1 +") {
		t.Errorf("impgate show: %v\n%s", err, shown)
	}
	if stat, err := b.run(t, "impgate", "show", "--stat", g.ID); err != nil || strings.TrimSpace(stat) != p["stat"] {
		t.Errorf("impgate show --stat: %v %q, want %q", err, stat, p["stat"])
	}
	if out, err := b.run(t, "impgate", "approve", g.ID); err != nil {
		t.Fatalf("approve: %v %s", err, out)
	}
	if out, err := b.run(t, "impexec", "once", g.ID); err != nil {
		t.Fatalf("impexec once: %v %s", err, out)
	}
	if g, _ := gate.Get(b.y, g.ID); g.State != state.Executed {
		t.Fatalf("push gate is %s: %s", g.State, g.Result)
	}
	if got := remoteRef(remote, "refs/heads/imp/ann/"+ann); got != p["head"] {
		t.Fatalf("remote has %q, want the reviewed head %s", got, p["head"])
	}
	// Chained: an open-pr gate; its approval makes exactly one PR request.
	gates, _ := gate.List(b.y, gate.Filter{Imp: "ann"})
	if len(gates) != 1 || gates[0].Intent != "open-pr" {
		t.Fatalf("after the push, pending gates %v; want one open-pr", gates)
	}
	if out, err := b.run(t, "impgate", "approve", gates[0].ID); err != nil {
		t.Fatalf("approve: %v %s", err, out)
	}
	if out, err := b.run(t, "impexec", "once", gates[0].ID); err != nil {
		t.Fatalf("impexec once open-pr: %v %s", err, out)
	}
	b.mail.mu.Lock()
	auth, bodies := append([]string(nil), b.mail.auth...), append([]string(nil), b.mail.bodies...)
	b.mail.mu.Unlock()
	if len(auth) != 1 || auth[0] != "Bearer ghp_test_token" || !strings.Contains(bodies[0], `"head":"imp/ann/`+ann+`"`) || !strings.Contains(bodies[0], `"base":"main"`) {
		t.Errorf("PR requests: %q %q", auth, bodies)
	}
	b.once(t)
	if task := b.task(t, ann); task.State != state.Done {
		t.Errorf("ann's task after its gates: %s %q", task.State, task.Reason)
	}
	if _, err := os.Stat(wt); !os.IsNotExist(err) {
		t.Errorf("the worktree survived cleanup: %v", err)
	}
	if _, err := blob.Get(b.y, p["diff"]); err != nil {
		t.Errorf("the diff blob did not survive cleanup: %v", err)
	}

	// bob: denied, nothing pushed.
	g, _ = b.codeGate(t, bob)
	if out, err := b.run(t, "impgate", "deny", g.ID); err != nil {
		t.Fatalf("deny: %v %s", err, out)
	}
	b.run(t, "impexec", "once", g.ID)
	if got := remoteRef(remote, "refs/heads/imp/bob/"+bob); got != "" {
		t.Errorf("a denied gate pushed %s", got)
	}

	// cat: approved for head A, then B lands on the branch: stale, nothing pushed.
	g, p = b.codeGate(t, cat)
	cwt := runrec.Path(b.y, g.Run, "worktree")
	os.WriteFile(filepath.Join(cwt, "late.txt"), []byte("late\n"), 0o644)
	gitRun(t, cwt, "add", "late.txt")
	gitRun(t, cwt, "commit", "-q", "-m", "B")
	if out, err := b.run(t, "impgate", "approve", g.ID); err != nil {
		t.Fatalf("approve: %v %s", err, out)
	}
	b.run(t, "impexec", "once", g.ID)
	if g, _ := gate.Get(b.y, g.ID); g.State != state.Failed || !strings.Contains(g.History[len(g.History)-1].Why, "stale") || !strings.Contains(g.History[len(g.History)-1].Why, p["head"]) {
		t.Errorf("stale approval: %s %s", g.State, g.History[len(g.History)-1].Why)
	}
	if got := remoteRef(remote, "refs/heads/imp/cat/"+cat); got != "" {
		t.Errorf("a stale approval pushed %s", got)
	}

	// A payload naming refs/heads/main: refused before git runs.
	p["branch"] = "refs/heads/main"
	badb, _ := json.Marshal(p)
	bad := string(badb)
	cmd := exec.Command(filepath.Join(bin, "impgate"), "file", "--imp", "cat", "--intent", "commit-and-push", "--run", g.Run, "--payload-file", "-")
	cmd.Env = append(os.Environ(), b.env...)
	cmd.Stdin = strings.NewReader(bad)
	idb, err := cmd.Output()
	if err != nil {
		t.Fatalf("impgate file: %v", err)
	}
	mainGate := strings.TrimSpace(string(idb))
	if out, err := b.run(t, "impgate", "approve", mainGate); err != nil {
		t.Fatalf("approve: %v %s", err, out)
	}
	b.run(t, "impexec", "once", mainGate)
	if g, _ := gate.Get(b.y, mainGate); g.State != state.Failed || !strings.Contains(g.History[len(g.History)-1].Why, `refusing to push "refs/heads/main"`) {
		t.Errorf("a push to main: %s %s", g.State, g.History[len(g.History)-1].Why)
	}
	if got := remoteRef(remote, "refs/heads/main"); got != "" {
		t.Errorf("main was pushed: %s", got)
	}
}
