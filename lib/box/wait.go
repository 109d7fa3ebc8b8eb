package box

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/containerd/containerd"
	"github.com/containerd/containerd/errdefs"
	"golang.org/x/sys/unix"
)

// Box is a running box. Its ceiling is enforced from the moment Start or
// Adopt returns it, whether or not anyone calls Wait.
type Box struct {
	ID  string
	Pid uint32

	task   containerd.Task
	ctx    context.Context // for the exit watch and the signals
	cancel context.CancelFunc
	grace  time.Duration
	cgroup string

	kill     chan struct{}
	killOnce sync.Once
	done     chan struct{}
	exit     Exit
	err      error
}

// Exit is how a box ended.
type Exit struct {
	Code    int    // exit status; 128+N after signal N
	Signal  string // "SIGKILL" and the like when a signal ended it
	Ceiling bool   // stopped because it ran past its ceiling
	Killed  bool   // stopped by Box.Kill
	OOM     bool   // the kernel's OOM killer killed a process in the box
	Reason  string // one line for people
}

// watch starts enforcing the ceiling on task t and returns its Box.
func (r *Runner) watch(t containerd.Task, ceiling, grace time.Duration) (*Box, error) {
	ctx, cancel := context.WithCancel(r.ctx(context.Background()))
	statusC, err := t.Wait(ctx)
	if err != nil {
		cancel()
		return nil, fmt.Errorf("box %s: wait: %w", t.ID(), err)
	}
	b := &Box{
		ID:     t.ID(),
		Pid:    t.Pid(),
		task:   t,
		ctx:    ctx,
		cancel: cancel,
		grace:  grace,
		cgroup: cgroupsPath(r.ns, t.ID()),
		kill:   make(chan struct{}),
		done:   make(chan struct{}),
	}
	go b.run(statusC, ceiling)
	return b, nil
}

// Wait returns how the box ended, once it has; or ctx's error.
func (b *Box) Wait(ctx context.Context) (Exit, error) {
	select {
	case <-b.done:
		return b.exit, b.err
	case <-ctx.Done():
		return Exit{}, ctx.Err()
	}
}

// Kill stops the box as its ceiling would (SIGTERM, the grace, SIGKILL)
// and waits until it has ended or ctx is done.
func (b *Box) Kill(ctx context.Context) error {
	b.killOnce.Do(func() { close(b.kill) })
	_, err := b.Wait(ctx)
	return err
}

func (b *Box) run(statusC <-chan containerd.ExitStatus, ceiling time.Duration) {
	defer close(b.done)
	defer b.cancel()
	deadline := time.NewTimer(ceiling)
	defer deadline.Stop()
	var st containerd.ExitStatus
	why := ""
	select {
	case st = <-statusC:
	case <-deadline.C:
		b.exit.Ceiling = true
		why = fmt.Sprintf("ran past its ceiling of %s", ceiling)
		st = b.stop(statusC, &why)
	case <-b.kill:
		b.exit.Killed = true
		why = "stopped on request"
		st = b.stop(statusC, &why)
	}
	code, _, err := st.Result()
	if err != nil {
		b.err = fmt.Errorf("box %s: wait: %w", b.ID, err)
		return
	}
	b.exit.Code = int(code)
	how := fmt.Sprintf("exited with code %d", code)
	if code > 128 && code <= 128+64 {
		b.exit.Signal = unix.SignalName(syscall.Signal(code - 128))
		how = "killed by " + b.exit.Signal
	}
	if n := oomKills(b.cgroup); n > 0 {
		b.exit.OOM = true
		how += fmt.Sprintf(", out of memory (%d OOM kills)", n)
	}
	if why != "" {
		how = why + "; " + how
	}
	b.exit.Reason = how
}

// stop sends SIGTERM, gives the box its grace to end, then SIGKILLs every
// process in it; it appends what it did to why.
func (b *Box) stop(statusC <-chan containerd.ExitStatus, why *string) containerd.ExitStatus {
	if err := b.task.Kill(b.ctx, unix.SIGTERM); err != nil && !errdefs.IsNotFound(err) {
		*why += fmt.Sprintf(" (SIGTERM failed: %v)", err)
	}
	grace := time.NewTimer(b.grace)
	defer grace.Stop()
	select {
	case st := <-statusC:
		*why += ": sent SIGTERM"
		return st
	case <-grace.C:
	}
	*why += fmt.Sprintf(": sent SIGTERM, SIGKILL after %s", b.grace)
	if err := b.task.Kill(b.ctx, unix.SIGKILL, containerd.WithKillAll); err != nil && !errdefs.IsNotFound(err) {
		return *containerd.NewExitStatus(containerd.UnknownExitStatus, time.Time{}, fmt.Errorf("SIGKILL: %w", err))
	}
	return <-statusC
}

// cgroupsPath is where runc puts box id's cgroup; set in the spec, so
// oomKills finds it again.
func cgroupsPath(ns, id string) string { return "/" + ns + "/" + id }

// oomKills reads how many processes the OOM killer killed in cgroup. The
// cgroup lives until the task is deleted, so after the exit it is still
// there. Zero when it cannot tell.
func oomKills(cgroup string) int {
	var st unix.Statfs_t
	if err := unix.Statfs("/sys/fs/cgroup", &st); err != nil {
		return 0
	}
	file := filepath.Join("/sys/fs/cgroup/memory", cgroup, "memory.oom_control")
	if st.Type == unix.CGROUP2_SUPER_MAGIC {
		file = filepath.Join("/sys/fs/cgroup", cgroup, "memory.events")
	}
	f, err := os.Open(file)
	if err != nil {
		return 0
	}
	defer f.Close()
	s := bufio.NewScanner(f)
	for s.Scan() {
		if v, ok := strings.CutPrefix(s.Text(), "oom_kill "); ok {
			n, _ := strconv.Atoi(v)
			return n
		}
	}
	return 0
}
