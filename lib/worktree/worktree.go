// Package worktree gives a code task's box a checkout of its own: a
// `git clone --shared` of the task's repository into runs/<run>/worktree,
// on branch imp/<imp>/<task> at the base commit. The clone borrows the
// repository's objects read-only through .git/objects/info/alternates and
// writes its index, refs and new objects only into itself, so the box never
// writes the repository.
//
// Git runs here as root on a directory the box could write. Before every
// use the clone is checked (.git a real directory, objects not a symlink)
// and its .git/config is rewritten from scratch and hooks are disabled, so
// nothing the box left in the repository configuration (hooks, fsmonitor,
// filters, an external diff) runs on the trusted side.
package worktree

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
)

// ErrNoChanges is a box that left no new commit and nothing uncommitted.
var ErrNoChanges = errors.New("no changes")

// Box is where the worktree appears in the box; the box sees it in
// IMPYARD_WORKTREE.
const Box = "/worktree"

// BoxRepo is where the task's repository is mounted read-only in the box;
// the clone's alternates name it too, so git in the box finds the borrowed
// objects.
const BoxRepo = "/repo"

var shaPattern = regexp.MustCompile(`^[0-9a-f]{40}$`)

// IsSHA reports whether s is a full hex commit id.
func IsSHA(s string) bool { return shaPattern.MatchString(s) }

// Branch is the branch a task's box works on.
func Branch(imp, task string) string { return "imp/" + imp + "/" + task }

// Git runs git with the trusted side's safety settings; dir may be "".
func Git(dir string, args ...string) (string, error) {
	out, err := gitBytes(dir, nil, args...)
	return strings.TrimSpace(string(out)), err
}

func gitBytes(dir string, env []string, args ...string) ([]byte, error) {
	full := []string{"-c", "safe.directory=*", "-c", "core.hooksPath=/dev/null", "-c", "core.fsmonitor=false",
		"-c", "commit.gpgsign=false", "-c", "protocol.ext.allow=never"}
	if dir != "" {
		full = append(full, "-C", dir)
	}
	full = append(full, args...)
	cmd := exec.Command("git", full...)
	cmd.Env = append(os.Environ(), "GIT_CONFIG_NOSYSTEM=1", "GIT_TERMINAL_PROMPT=0", "GIT_ASKPASS=/bin/false", "HOME=/nonexistent", "LC_ALL=C")
	cmd.Env = append(cmd.Env, env...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		msg := strings.TrimSpace(stderr.String())
		if msg == "" {
			msg = err.Error()
		}
		return stdout.Bytes(), fmt.Errorf("git %s: %s", args[0], msg)
	}
	return stdout.Bytes(), nil
}

// GitEnv is Git with extra environment (credentials for a push).
func GitEnv(dir string, env []string, args ...string) (string, error) {
	out, err := gitBytes(dir, env, args...)
	return strings.TrimSpace(string(out)), err
}

// Resolve checks that repo is a git repository and base names a commit in
// it, and returns the commit's sha. An empty base means HEAD.
func Resolve(repo, base string) (string, error) {
	if fi, err := os.Stat(repo); err != nil || !fi.IsDir() {
		return "", fmt.Errorf("repository %s: not a directory", repo)
	}
	if _, err := Git(repo, "rev-parse", "--git-dir"); err != nil {
		return "", fmt.Errorf("repository %s is not a git repository", repo)
	}
	if base == "" {
		base = "HEAD"
	}
	if strings.HasPrefix(base, "-") {
		return "", fmt.Errorf("base %q is not a ref", base)
	}
	sha, err := Git(repo, "rev-parse", "--verify", "--quiet", "--end-of-options", base+"^{commit}")
	if err != nil || !IsSHA(sha) {
		return "", fmt.Errorf("base %q does not name a commit in %s", base, repo)
	}
	return sha, nil
}

// Provision clones repo into dir (which must not exist) on a new branch at
// base, makes it the box user's, and returns the base sha.
func Provision(repo, base, branch, dir string, uid, gid int) (string, error) {
	sha, err := Resolve(repo, base)
	if err != nil {
		return "", err
	}
	if _, err := Git("", "check-ref-format", "refs/heads/"+branch); err != nil {
		return "", fmt.Errorf("branch %q is not a valid branch name", branch)
	}
	if _, err := Git("", "clone", "--quiet", "--shared", "--no-checkout", "--", repo, dir); err != nil {
		return "", fmt.Errorf("cloning %s: %w", repo, err)
	}
	if err := sanitize(dir); err != nil {
		return "", err
	}
	if _, err := Git(dir, "checkout", "--quiet", "-b", branch, sha); err != nil {
		return "", fmt.Errorf("checking out %s at %s: %w", branch, sha, err)
	}
	// Only the task's branch: any other local branch the box leaves is a
	// commit on another branch.
	refs, _ := Git(dir, "for-each-ref", "--format=%(refname)", "refs/heads", "refs/remotes", "refs/tags")
	for _, ref := range strings.Fields(refs) {
		if ref != "refs/heads/"+branch {
			Git(dir, "update-ref", "-d", ref)
		}
	}
	if err := linkRepo(repo, dir); err != nil {
		return "", err
	}
	if err := writeAlternates(dir); err != nil {
		return "", err
	}
	if out, err := exec.Command("chown", "-R", fmt.Sprintf("%d:%d", uid, gid), dir).CombinedOutput(); err != nil {
		return "", fmt.Errorf("chown %s: %v: %s", dir, err, out)
	}
	return sha, nil
}

// linkRepo makes <dir>/../repo a symlink to the repository, the host's
// side of the relative alternates path.
func linkRepo(repo, dir string) error {
	abs, err := filepath.Abs(repo)
	if err != nil {
		return err
	}
	if real, err := filepath.EvalSymlinks(abs); err == nil {
		abs = real
	}
	link := filepath.Join(filepath.Dir(dir), filepath.Base(BoxRepo))
	os.Remove(link)
	return os.Symlink(abs, link)
}

// writeAlternates names the borrowed objects by a path relative to the
// clone's objects directory, ../../../repo/<objects>, which resolves both
// on the host, through the symlink <dir>/../repo, and in the box, where
// the repository is mounted read-only at /repo next to /worktree. It is
// rewritten before every use, so the box cannot point it elsewhere.
func writeAlternates(dir string) error {
	link := filepath.Join(filepath.Dir(dir), filepath.Base(BoxRepo))
	repo, err := os.Readlink(link)
	if err != nil {
		return fmt.Errorf("worktree %s: its link to the repository: %w", dir, err)
	}
	objects, err := Git(repo, "rev-parse", "--path-format=absolute", "--git-path", "objects")
	if err != nil {
		return err
	}
	if real, err := filepath.EvalSymlinks(objects); err == nil {
		objects = real
	}
	alt := objects
	if rel, err := filepath.Rel(repo, objects); err == nil && !strings.HasPrefix(rel, "..") {
		alt = filepath.Join("..", "..", "..", filepath.Base(BoxRepo), rel)
	}
	p := filepath.Join(dir, ".git", "objects", "info", "alternates")
	os.Remove(p)
	return os.WriteFile(p, []byte(alt+"\n"), 0o644)
}

const config = `[core]
	repositoryformatversion = 0
	filemode = true
	bare = false
	logallrefupdates = true
[user]
	name = impyard
	email = impsup@impyard.invalid
`

// sanitize refuses a clone whose .git is not a plain directory of its own
// and rewrites its configuration and hooks to the trusted side's.
func sanitize(dir string) error {
	gitDir := filepath.Join(dir, ".git")
	for _, p := range []string{gitDir, filepath.Join(gitDir, "objects"), filepath.Join(gitDir, "refs")} {
		fi, err := os.Lstat(p)
		if err != nil {
			return fmt.Errorf("worktree %s: %w", dir, err)
		}
		if !fi.IsDir() {
			return fmt.Errorf("worktree %s: %s is not a plain directory (replaced by the box?)", dir, p)
		}
	}
	for _, name := range []string{"HEAD", "index", "objects/info"} {
		if fi, err := os.Lstat(filepath.Join(gitDir, name)); err == nil && fi.Mode()&os.ModeSymlink != 0 {
			return fmt.Errorf("worktree %s: .git/%s is a symlink (planted by the box?)", dir, name)
		}
	}
	// A commondir would make git write into another repository.
	for _, name := range []string{"hooks", "commondir", "gitdir", "info/attributes"} {
		if err := os.RemoveAll(filepath.Join(gitDir, name)); err != nil {
			return err
		}
	}
	if _, err := os.Lstat(filepath.Join(filepath.Dir(dir), filepath.Base(BoxRepo))); err == nil {
		if err := writeAlternates(dir); err != nil {
			return err
		}
	}
	os.Remove(filepath.Join(gitDir, "config"))
	return os.WriteFile(filepath.Join(gitDir, "config"), []byte(config), 0o644)
}

// Sanitize is sanitize for the executor, which pushes from the clone.
func Sanitize(dir string) error { return sanitize(dir) }

// Head returns the sha the branch points at in the clone.
func Head(dir, branch string) (string, error) {
	if err := sanitize(dir); err != nil {
		return "", err
	}
	sha, err := Git(dir, "rev-parse", "--verify", "--quiet", "refs/heads/"+branch)
	if err != nil || !IsSHA(sha) {
		return "", fmt.Errorf("worktree %s has no branch %s", dir, branch)
	}
	return sha, nil
}

// Collect commits what the box left uncommitted on branch, checks the box
// kept to its branch and above base, and returns the new head with the diff
// base..head (binary-safe) and its stat. ErrNoChanges means no new commit.
func Collect(dir, branch, base, runID string) (head string, diff []byte, stat string, err error) {
	if err := sanitize(dir); err != nil {
		return "", nil, "", err
	}
	cur, err := Git(dir, "symbolic-ref", "--quiet", "HEAD")
	if err != nil || cur != "refs/heads/"+branch {
		return "", nil, "", fmt.Errorf("the box left HEAD off its branch %s (commits on another branch?)", branch)
	}
	refs, err := Git(dir, "for-each-ref", "--format=%(refname)", "refs/heads")
	if err != nil {
		return "", nil, "", err
	}
	for _, ref := range strings.Fields(refs) {
		if ref != "refs/heads/"+branch {
			return "", nil, "", fmt.Errorf("the box made commits on another branch (%s); only %s is reviewed", ref, branch)
		}
	}
	status, err := Git(dir, "status", "--porcelain", "--untracked-files=all")
	if err != nil {
		return "", nil, "", err
	}
	if status != "" {
		if _, err := Git(dir, "add", "-A"); err != nil {
			return "", nil, "", err
		}
		if _, err := Git(dir, "commit", "--quiet", "--no-verify", "-m", "impyard: changes left uncommitted by run "+runID); err != nil {
			return "", nil, "", err
		}
	}
	head, err = Head(dir, branch)
	if err != nil {
		return "", nil, "", err
	}
	if head == base {
		return head, nil, "", ErrNoChanges
	}
	if _, err := Git(dir, "merge-base", "--is-ancestor", base, head); err != nil {
		return "", nil, "", fmt.Errorf("history rewritten below base: %s is not an ancestor of %s", base, head)
	}
	diff, err = gitBytes(dir, nil, "diff", "--binary", "--no-color", "--no-ext-diff", "--no-textconv", base, head)
	if err != nil {
		return "", nil, "", err
	}
	stat, err = Git(dir, "diff", "--stat", "--no-color", base, head)
	if err != nil {
		return "", nil, "", err
	}
	return head, diff, stat, nil
}

// Remove deletes the clone and its link to the repository.
func Remove(dir string) error {
	link := filepath.Join(filepath.Dir(dir), filepath.Base(BoxRepo))
	if fi, err := os.Lstat(link); err == nil && fi.Mode()&os.ModeSymlink != 0 {
		os.Remove(link)
	}
	return os.RemoveAll(dir)
}
