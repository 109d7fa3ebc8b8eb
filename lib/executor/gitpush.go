package executor

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"os"
	"regexp"
	"strings"

	"github.com/impyard/impyard/lib/blob"
	"github.com/impyard/impyard/lib/config"
	"github.com/impyard/impyard/lib/gate"
	"github.com/impyard/impyard/lib/home"
	"github.com/impyard/impyard/lib/intent"
	"github.com/impyard/impyard/lib/queue"
	"github.com/impyard/impyard/lib/run"
	"github.com/impyard/impyard/lib/store"
	"github.com/impyard/impyard/lib/worktree"
)

var branchPart = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]*$`)

// pushBranch returns the branch a payload may push: imp/<imp>/<name> and
// nothing else (refs/heads/ in front is allowed).
func pushBranch(imp, branch string) (string, error) {
	b := strings.TrimPrefix(branch, "refs/heads/")
	rest, ok := strings.CutPrefix(b, "imp/"+imp+"/")
	if !ok || !branchPart.MatchString(rest) || strings.Contains(rest, "..") || strings.HasSuffix(rest, ".lock") || strings.HasSuffix(rest, ".") {
		return "", fmt.Errorf("refusing to push %q: a git-push gate of %s pushes only refs/heads/imp/%s/<name>; nothing was pushed", branch, imp, imp)
	}
	return b, nil
}

// gitPush pushes the reviewed head of a code task's branch to the imp's
// remote. It refuses anything but refs/heads/imp/<imp>/*, a diff blob that
// does not verify, and a branch that moved after the gate was filed (the
// approval is bound to the head sha). Pushing a sha the remote already has
// on the branch is a success without a push.
func (r *Runner) gitPush(ctx context.Context, g *gate.Gate, exe *config.Executor, payload []byte) (*Result, error) {
	var p intent.Push
	if err := json.Unmarshal(payload, &p); err != nil {
		return nil, &outcome{err: fmt.Errorf("commit-and-push payload: %w; nothing was pushed", err)}
	}
	branch, err := pushBranch(g.Imp, p.Branch)
	if err != nil {
		return nil, &outcome{err: err}
	}
	if !worktree.IsSHA(p.Head) || !worktree.IsSHA(p.Base) {
		return nil, &outcome{err: fmt.Errorf("payload head %q / base %q are not full commit shas; nothing was pushed", p.Head, p.Base)}
	}
	if _, err := blob.Get(r.Yard, p.Diff); err != nil {
		return nil, &outcome{err: fmt.Errorf("the reviewed diff: %w; nothing was pushed", err)}
	}
	if g.Run == "" {
		return nil, &outcome{err: fmt.Errorf("gate %s names no run, so no worktree to push from; nothing was pushed", g.ID)}
	}
	wt := run.Path(r.Yard, g.Run, "worktree")
	now, err := worktree.Head(wt, branch)
	if err != nil {
		return nil, &outcome{err: fmt.Errorf("%w; nothing was pushed", err)}
	}
	if now != p.Head {
		return nil, &outcome{err: fmt.Errorf("stale: branch %s moved from %s to %s after the gate was filed; the approval was for %s; nothing was pushed", branch, p.Head, now, p.Head)}
	}
	imp, err := config.LoadImp(r.Yard, g.Imp)
	if err != nil {
		return nil, &outcome{err: err}
	}
	if imp.Remote == "" {
		return nil, &outcome{err: fmt.Errorf("%s/imp.toml sets no remote to push to; nothing was pushed", imp.Dir)}
	}
	env, err := r.gitCredentials(g.Imp, imp.Remote)
	if err != nil {
		return nil, &outcome{err: err}
	}
	ref := "refs/heads/" + branch
	res := &Result{Kind: config.GitPush}
	have, err := worktree.GitEnv(wt, env, "ls-remote", "--", imp.Remote, ref)
	if err != nil {
		return nil, &outcome{err: fmt.Errorf("reading %s on the remote: %w", ref, err), transient: true}
	}
	if f := strings.Fields(have); len(f) > 0 && f[0] == p.Head {
		res.Detail = fmt.Sprintf("%s already at %s on the remote; nothing to push", ref, p.Head)
	} else {
		if _, err := worktree.GitEnv(wt, env, "push", "--porcelain", "--", imp.Remote, p.Head+":"+ref); err != nil {
			return nil, &outcome{err: fmt.Errorf("the remote refused the push of %s to %s: %w", p.Head, ref, err), sent: true}
		}
		res.Detail = fmt.Sprintf("pushed %s to %s", p.Head, ref)
	}
	if exe.Then != "" {
		gid, err := r.chain(g, exe.Then, branch, p)
		if err != nil {
			return nil, &outcome{err: fmt.Errorf("pushed, but filing the %s gate: %w", exe.Then, err), sent: true}
		}
		res.Detail += "; filed gate " + gid + " (" + exe.Then + ")"
	}
	return res, nil
}

// gitCredentials passes IMPYARD_HOME/secrets/git-<imp>, when it exists
// and the remote is not a local path, as an http.extraHeader
// "Authorization: Basic base64(x-access-token:<secret>)" through
// GIT_CONFIG_* variables, so it never appears on a command line.
func (r *Runner) gitCredentials(imp, remote string) ([]string, error) {
	if !strings.Contains(remote, "://") {
		return nil, nil
	}
	b, err := store.ReadFile(home.Dir(r.Home).Secret("git-" + imp))
	if os.IsNotExist(err) || store.IsNotExist(err) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	tok := strings.TrimSpace(string(b))
	hdr := "Authorization: Basic " + base64.StdEncoding.EncodeToString([]byte("x-access-token:"+tok))
	return []string{"GIT_CONFIG_COUNT=1", "GIT_CONFIG_KEY_0=http.extraHeader", "GIT_CONFIG_VALUE_0=" + hdr}, nil
}

// chain files the gate that follows a push (then = "open-pr"), once per
// push gate: a pull request from the pushed branch onto the task's base.
func (r *Runner) chain(g *gate.Gate, then, branch string, p intent.Push) (string, error) {
	why := "chained after gate " + g.ID
	gates, _ := gate.List(r.Yard, gate.Filter{All: true, Imp: g.Imp})
	for _, o := range gates {
		if o.Intent == then && o.Task == g.Task && o.Rationale == why {
			return o.ID, nil
		}
	}
	base := "main"
	if t, err := queue.Get(r.Yard, g.Task); err == nil && t.Base != "" {
		base = strings.TrimPrefix(t.Base, "refs/heads/")
	}
	body, err := json.Marshal(intent.PullRequest{Title: branch, Head: branch, Base: base, Body: p.Stat})
	if err != nil {
		return "", err
	}
	n, err := gate.File(r.Yard, gate.FileOptions{Imp: g.Imp, Intent: then, Payload: body, Task: g.Task, Run: g.Run,
		Rationale: why, By: Actor, Actor: Actor,
		Trust: &gate.Trust{Level: "gate", Why: "filed by impexec after the push of gate " + g.ID + "; no trust entry is consulted"}})
	if err != nil {
		return "", err
	}
	return n.ID, nil
}
