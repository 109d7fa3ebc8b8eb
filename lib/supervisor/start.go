package supervisor

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/impyard/impyard/lib/box"
	"github.com/impyard/impyard/lib/config"
	"github.com/impyard/impyard/lib/health"
	"github.com/impyard/impyard/lib/home"
	"github.com/impyard/impyard/lib/id"
	"github.com/impyard/impyard/lib/memory"
	"github.com/impyard/impyard/lib/netns"
	"github.com/impyard/impyard/lib/queue"
	"github.com/impyard/impyard/lib/run"
	"github.com/impyard/impyard/lib/state"
	"github.com/impyard/impyard/lib/store"
	"github.com/impyard/impyard/lib/token"
	"github.com/impyard/impyard/lib/worktree"
)

// Paths inside every box.
const (
	BoxCA        = "/etc/impyard/ca.crt"
	BoxBrief     = "/etc/impyard/brief.json"
	BoxWorkspace = "/work"
	BoxRepo      = "/repo"
	BoxWorktree  = worktree.Box
)

// start runs one waiting task in a new box. ok is false when the task was
// taken by someone else or failed for a reason of its own; an error is
// trouble of the infrastructure, and the task stays waiting.
func (s *Supervisor) start(ctx context.Context, org *config.Org, cfg *config.Imp, t *queue.Task) (ok bool, err error) {
	if why := checkBox(cfg); why != "" {
		s.failWaiting(t, why)
		return false, nil
	}
	if why := checkHome(s.Home, cfg, t); why != "" {
		s.failWaiting(t, why)
		return false, nil
	}
	// A charter or memory the brief cannot carry whole is the owner's to
	// trim; the task says which file and how large.
	if _, err := memory.Load(s.Yard, t.Imp); errors.Is(err, memory.ErrTooLarge) {
		s.failWaiting(t, err.Error())
		return false, nil
	}
	if t.Kind == queue.Code {
		// A repository or base that cannot be used fails the task before
		// anything is made.
		if codeRepo(cfg, t) == "" {
			s.failWaiting(t, "a code task needs a repository: impq add --repo DIR, or repo in "+cfg.Dir+"/imp.toml")
			return false, nil
		}
		if _, err := worktree.Resolve(codeRepo(cfg, t), t.Base); err != nil {
			s.failWaiting(t, err.Error())
			return false, nil
		}
	}
	if err := health.GatewayUp(org.Gateway.Listen); err != nil {
		return false, err
	}
	caPath := home.Dir(s.Home).CACert()
	if _, err := os.Stat(caPath); err != nil {
		return false, fmt.Errorf("no gateway CA at %s (impgw ca init): %w", caPath, err)
	}
	// A runtime this host lacks fails the task as a missing rootfs does:
	// the owner installs it or names another.
	rt, err := s.Runner.Runtime(org.RuntimeOf(cfg))
	if errors.Is(err, box.ErrRuntimeMissing) {
		s.failWaiting(t, fmt.Sprintf("%s/imp.toml: %v", cfg.Dir, err))
		return false, nil
	}
	if err != nil {
		return false, err
	}
	runID := id.New(id.Run)
	task := t
	var r *run.Run
	// From here on, whatever fails undoes what was made.
	var tok, ns string
	undo := func(why string) {
		if err := saveWorkspace(run.Path(s.Yard, runID, "work")); err != nil {
			s.logf("run %s: %v", runID, err)
		}
		if ns != "" {
			netns.Remove(ns)
		}
		if tok != "" {
			token.Revoke(s.Home, tok)
		}
		s.failRun(runID, task, ns, rt, r != nil, why)
	}
	if ns, err = netns.New(runID); err != nil {
		undo(err.Error())
		return false, err
	}
	if r, err = s.newRun(runID, t, ns, rt); err != nil {
		undo(err.Error())
		return false, err
	}
	// The token comes after the run's record, so that a token always has
	// a run the supervisor's recovery can find ended, and revoke it with.
	if tok, err = token.Issue(s.Home, t.Imp, runID, t.ID); err != nil {
		undo(err.Error())
		return false, err
	}
	wait := s.ReadyTimeout
	if wait == 0 {
		wait = 5 * time.Second
	}
	if err := run.WaitReady(s.Yard, runID, wait); err != nil {
		undo(err.Error())
		return false, err
	}
	t, err = queue.Move(s.Yard, t.ID, queue.Change{To: state.Running, By: Actor, Actor: Actor, Why: "run " + runID,
		Edit: func(t *queue.Task) error { t.Runs = append(t.Runs, runID); return nil }})
	if err != nil {
		undo("task not started: " + err.Error())
		s.logf("task %s: %v", task.ID, err)
		return false, nil
	}
	spec, err := s.prepare(cfg, t, runID, tok, ns, caPath)
	spec.Runtime = rt.Name
	if err == nil {
		var b *box.Box
		if b, err = s.Runner.Start(ctx, spec); err == nil {
			if nr := s.moveRun(runID, run.Running, "box started", nil); nr != nil {
				r = nr
			}
			if derr := s.delivered(t.Imp, runID); derr != nil {
				s.logf("run %s: recording what its brief told: %v", runID, derr)
			}
			s.watch(&liveRun{runID: runID, task: t.ID, imp: t.Imp, box: b}, r)
			s.logf("task %s: box %s started for %s", t.ID, runID, t.Imp)
			return true, nil
		}
	}
	// The box did not start: the task fails with the reason; a box error
	// is the task's own (a missing image, a bad command) as far as anyone
	// can tell from here.
	undo(err.Error())
	if _, merr := queue.Move(s.Yard, t.ID, queue.Change{To: state.Failed, By: Actor, Actor: Actor, Why: "box did not start: " + err.Error()}); merr != nil {
		s.logf("task %s: %v", t.ID, merr)
	}
	return false, nil
}

// checkBox finds the configuration mistakes that would fail a box before
// anything is made.
func checkBox(cfg *config.Imp) string {
	switch {
	case cfg.Rootfs == "" && cfg.Archive == "" && cfg.Image == "":
		return fmt.Sprintf("%s/imp.toml names no box: set rootfs, archive or image", cfg.Dir)
	case cfg.Image == "" && len(cfg.Command) == 0:
		return fmt.Sprintf("%s/imp.toml has no command", cfg.Dir)
	}
	for _, p := range []string{cfg.Rootfs, cfg.Archive} {
		if p == "" {
			continue
		}
		if _, err := os.Stat(p); err != nil {
			return fmt.Sprintf("%s/imp.toml: %v", cfg.Dir, err)
		}
	}
	if cfg.User != "" {
		uid, gid, ok := strings.Cut(cfg.User, ":")
		if _, err := strconv.ParseUint(uid, 10, 32); err != nil || !ok {
			return fmt.Sprintf("%s/imp.toml: user %q is not numeric uid:gid", cfg.Dir, cfg.User)
		}
		if _, err := strconv.ParseUint(gid, 10, 32); err != nil {
			return fmt.Sprintf("%s/imp.toml: user %q is not numeric uid:gid", cfg.Dir, cfg.User)
		}
		if uid == "0" {
			return fmt.Sprintf("%s/imp.toml: a box never runs as root", cfg.Dir)
		}
	}
	for key, v := range map[string]string{"memory": cfg.Memory, "workspace": cfg.Workspace} {
		if v != "" {
			if _, err := parseBytes(v); err != nil {
				return fmt.Sprintf("%s/imp.toml: %s: %v", cfg.Dir, key, err)
			}
		}
	}
	return ""
}

// checkHome refuses, naming the key, a path of the imp's configuration or
// of the task that would show IMPYARD_HOME to the box, before anything is
// made; prepare checks the box's spec again as it is mounted.
func checkHome(home string, cfg *config.Imp, t *queue.Task) string {
	for _, k := range []struct{ key, path string }{{"rootfs", cfg.Rootfs}, {"archive", cfg.Archive}, {"repo", cfg.Repo}} {
		if k.path == "" {
			continue
		}
		if _, err := box.CheckHome(home, k.key, k.path); err != nil {
			return fmt.Sprintf("%s/imp.toml: %v", cfg.Dir, err)
		}
	}
	if t.Repo != "" {
		if _, err := box.CheckHome(home, "repo", t.Repo); err != nil {
			return fmt.Sprintf("task %s: %v", t.ID, err)
		}
	}
	return ""
}

// homeless is spec with every host path it names checked by
// box.CheckHome and replaced by its resolved form, but the gateway's CA
// certificate (caPath) mounted read-only: the one file of IMPYARD_HOME a
// box may see.
func homeless(home, caPath string, spec box.Spec) (box.Spec, error) {
	var err error
	for _, k := range []struct {
		key  string
		path *string
	}{{"rootfs", &spec.Rootfs}, {"archive", &spec.Archive}} {
		if *k.path != "" {
			if *k.path, err = box.CheckHome(home, k.key, *k.path); err != nil {
				return spec, err
			}
		}
	}
	mounts := make([]box.Mount, len(spec.Mounts))
	for i, m := range spec.Mounts {
		if m.Source == caPath && m.ReadOnly {
			mounts[i] = m
			continue
		}
		key := "mount " + m.Target
		if m.Target == BoxRepo {
			key = "repo"
		}
		if m.Source, err = box.CheckHome(home, key, m.Source); err != nil {
			return spec, err
		}
		mounts[i] = m
	}
	spec.Mounts = mounts
	return spec, nil
}

// DefaultWorkspace is the size of a box's /work unless imp.toml says.
const DefaultWorkspace = 256 << 20

// mountWorkspace makes the box's writable /work: a tmpfs of the given
// size owned by the box's user, so a box that fills its workspace fills
// only that, never the yard's disk. saveWorkspace keeps what it holds.
func mountWorkspace(dir, size string, uid, gid int) (string, error) {
	n := int64(DefaultWorkspace)
	if size != "" {
		var err error
		if n, err = parseBytes(size); err != nil {
			return "", err
		}
	}
	if err := os.Mkdir(dir, 0o700); err != nil {
		return "", err
	}
	opts := fmt.Sprintf("size=%d,mode=0700,uid=%d,gid=%d", n, uid, gid)
	if err := unix.Mount("tmpfs", dir, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, opts); err != nil {
		return "", fmt.Errorf("workspace %s: mount tmpfs: %w", dir, err)
	}
	return dir, nil
}

// saveWorkspace copies what the box left in its workspace to
// runs/<run>/workspace/ and unmounts the tmpfs. A run without a mounted
// workspace (it never started) has nothing to save.
func saveWorkspace(dir string) error {
	var st, parent unix.Stat_t
	if unix.Stat(dir, &st) != nil || unix.Stat(filepath.Dir(dir), &parent) != nil || st.Dev == parent.Dev {
		return nil
	}
	out := filepath.Join(filepath.Dir(dir), "workspace")
	if err := os.MkdirAll(out, 0o750); err != nil {
		return err
	}
	if b, err := exec.Command("cp", "-a", "--no-preserve=ownership", dir+"/.", out).CombinedOutput(); err != nil {
		return fmt.Errorf("saving workspace %s: %v: %s", dir, err, b)
	}
	return unix.Unmount(dir, unix.MNT_DETACH)
}

// prepare writes the run's brief and workspace and returns the box spec.
func (s *Supervisor) prepare(cfg *config.Imp, t *queue.Task, runID, tok, ns, caPath string) (box.Spec, error) {
	user := cfg.User
	if user == "" {
		user = box.DefaultUser
	}
	uidS, gidS, _ := strings.Cut(user, ":")
	uid, _ := strconv.Atoi(uidS)
	gid, _ := strconv.Atoi(gidS)
	work, err := mountWorkspace(run.Path(s.Yard, runID, "work"), cfg.Workspace, uid, gid)
	if err != nil {
		return box.Spec{}, err
	}
	briefPath, err := s.writeBrief(t, runID)
	if err != nil {
		return box.Spec{}, err
	}
	proxy := fmt.Sprintf("http://%s:%s@%s", t.Imp, tok, run.BoxGateway)
	env := []string{
		"HTTP_PROXY=" + proxy, "HTTPS_PROXY=" + proxy, "http_proxy=" + proxy, "https_proxy=" + proxy,
		"NODE_EXTRA_CA_CERTS=" + BoxCA, "CURL_CA_BUNDLE=" + BoxCA, "REQUESTS_CA_BUNDLE=" + BoxCA, "SSL_CERT_FILE=" + BoxCA,
		"IMPYARD_GATEWAY=http://" + run.BoxGateway, "IMPYARD_TOKEN=" + tok, "IMPYARD_IMP=" + t.Imp,
		"IMPYARD_TASK=" + t.ID, "IMPYARD_RUN=" + runID, "IMPYARD_BRIEF=" + BoxBrief, "HOME=" + BoxWorkspace,
	}
	mounts := []box.Mount{
		{Source: work, Target: BoxWorkspace},
		{Source: caPath, Target: BoxCA, ReadOnly: true},
		{Source: briefPath, Target: BoxBrief, ReadOnly: true},
	}
	if t.Kind == queue.Code {
		// A writable clone of its own; the repository stays read-only.
		// The task was read again when it started: its repository is
		// checked again before it is cloned.
		repo, err := box.CheckHome(s.Home, "repo", codeRepo(cfg, t))
		if err != nil {
			return box.Spec{}, err
		}
		wt := run.Path(s.Yard, runID, "worktree")
		base, err := worktree.Provision(repo, t.Base, worktree.Branch(t.Imp, t.ID), wt, uid, gid)
		if err != nil {
			return box.Spec{}, err
		}
		// The base sha is kept outside the box's reach for finish.
		d, err := run.Dir(s.Yard, runID)
		if err != nil {
			return box.Spec{}, err
		}
		if err := d.Update(func(tx *store.Tx) error { return tx.Write(baseFile, []byte(base+"\n")) }); err != nil {
			return box.Spec{}, err
		}
		mounts = append(mounts, box.Mount{Source: repo, Target: BoxRepo, ReadOnly: true}, box.Mount{Source: wt, Target: BoxWorktree})
		env = append(env, "IMPYARD_WORKTREE="+BoxWorktree)
	} else if cfg.Repo != "" {
		mounts = append(mounts, box.Mount{Source: cfg.Repo, Target: BoxRepo, ReadOnly: true})
	}
	args := append([]string(nil), cfg.Command...)
	spec := box.Spec{
		ID: runID, Labels: map[string]string{box.LabelImp: t.Imp, box.LabelTask: t.ID},
		Rootfs: cfg.Rootfs, Archive: cfg.Archive, Image: cfg.Image,
		Env: env, Cwd: BoxWorkspace, User: user, Mounts: mounts, Pids: cfg.Pids,
		Ceiling: cfg.Ceiling.Duration, Log: run.Path(s.Yard, runID, run.BoxLog), NetNS: ns,
	}
	if cfg.Memory != "" {
		spec.MemoryBytes, _ = parseBytes(cfg.Memory)
	}
	if cfg.TaskVia == "stdin" {
		spec.Stdin = strings.NewReader(t.Text)
	} else {
		args = append(args, t.Text)
	}
	spec.Args = args
	return homeless(s.Home, caPath, spec)
}

// baseFile, in runs/<run>/, holds the base sha a code task's worktree
// started from.
const baseFile = "worktree.base"

// codeRepo is the repository of a code task: its own, or the imp's default.
func codeRepo(cfg *config.Imp, t *queue.Task) string {
	if t.Repo != "" {
		return t.Repo
	}
	return cfg.Repo
}

// parseBytes reads sizes like 512M, 2G, 1048576.
func parseBytes(s string) (int64, error) {
	mult := int64(1)
	num := strings.TrimSuffix(strings.ToUpper(s), "B")
	switch {
	case strings.HasSuffix(num, "K"):
		mult, num = 1<<10, strings.TrimSuffix(num, "K")
	case strings.HasSuffix(num, "M"):
		mult, num = 1<<20, strings.TrimSuffix(num, "M")
	case strings.HasSuffix(num, "G"):
		mult, num = 1<<30, strings.TrimSuffix(num, "G")
	}
	n, err := strconv.ParseInt(num, 10, 64)
	if err != nil || n <= 0 {
		return 0, errors.New("want a size like 512M or 2G")
	}
	return n * mult, nil
}
