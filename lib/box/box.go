// Package box runs an imp's process in a throwaway container through
// containerd's Go client (no Docker anywhere), and gets it back after the
// caller restarts.
//
// Guarantees, for every box Start makes:
//   - Network: the box joins the network namespace at Spec.NetNS, which
//     netns.New makes with loopback only: no interface, route or DNS out.
//     The only peer is whatever the trusted side serves inside that
//     namespace with netns.Listen (the gateway, at 127.0.0.1:7300).
//   - Hardening: a non-root user (65534:65534 unless Spec.User says
//     otherwise), no new privileges, every capability set empty, a
//     read-only rootfs, containerd's default seccomp profile (narrowed to
//     the native syscall ABI: no 32-bit or x32 syscalls), containerd's
//     masked and read-only /proc and /sys paths, memory (swap included)
//     and pids limits in the box's own cgroup, and a writable 64 MiB tmpfs
//     at /tmp.
//     An image's own user is ignored: boxes always run as Spec.User.
//   - Ceiling: at Spec.Ceiling the box gets SIGTERM, Spec.Grace later
//     SIGKILL, and its Exit says so. The box's process is its PID 1, which
//     the kernel shields from signals it has no handler for, so a process
//     that does not handle SIGTERM is only stopped by the SIGKILL.
//   - Output: stdout and stderr are appended to Spec.Log by containerd's
//     shim, not by this process, so they keep flowing while the caller
//     restarts; a box started by one Runner can be Adopted by the next.
//     The shim drains the last of it when the task is deleted: the log is
//     complete once Delete returns, not yet when Wait does.
//   - Runtime: runc, crun or runsc (gVisor), Spec.Runtime, each through
//     containerd's io.containerd.runc.v2 shim with the runtime binary set
//     per container. Under runsc the box's syscalls go to gVisor's
//     user-space kernel, its network is the host's as seen from the box's
//     own namespace (so the gateway stays its one peer) and the seccomp
//     profile is applied inside the sandbox. What differs there: writing a
//     read-only path the box may not write anyway fails with EACCES before
//     EROFS, the 32-bit syscall ABI fails with EINVAL instead of killing
//     the thread, PID 1 is not shielded from SIGTERM, and reaching the
//     pids limit ends the whole box rather than failing one fork.
//   - Cleanup is off the critical path: Start returns once the process is
//     running; Delete removes the task, container, snapshot and namespace
//     file, and may run in the background.
//
// Limits: needs root and a containerd (1.6 or later, runc v2 shim, the
// overlayfs snapshotter for images) on this host, and the runtime a box
// asks for; crun on a hybrid cgroup host needs the unified hierarchy
// empty of controllers (scripts/containerd-dev binds them to v1). Written for cgroup v1
// and v2, tested on v1 (hybrid), which this project's machines run. Stdin
// is fed by this process: if it dies before the box has read it all, the
// box sees EOF early. There is no user namespace: the box's uid is the
// same uid on the host, so a writable mount must be writable by Spec.User,
// and what the box writes there belongs to it. Mount targets missing from
// a rootfs folder are created in that folder by runc at start (the box
// still cannot write them): keep them in the rootfs, as scripts/mkrootfs
// does. Exit.Signal is inferred from exit codes above 128, so a process
// that exits 137 by itself reads as SIGKILL.
package box

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/containerd/containerd"
	tasksapi "github.com/containerd/containerd/api/services/tasks/v1"
	"github.com/containerd/containerd/errdefs"
	"github.com/containerd/containerd/namespaces"

	"github.com/impyard/impyard/lib/netns"
	"github.com/impyard/impyard/lib/temporary"
)

// Defaults for the zero values of Spec and New.
const (
	DefaultNamespace = "impyard"
	DefaultUser      = "65534:65534"
	DefaultMemory    = 512 << 20
	DefaultPids      = 256
	DefaultCeiling   = 30 * time.Minute
	DefaultGrace     = 5 * time.Second
)

// Labels on every container. The caller sets LabelImp and LabelTask in
// Spec.Labels; Start sets LabelRun to the container id and keeps what
// Delete and Adopt need in labelNetNS and labelGrace.
const (
	LabelRun   = "impyard.run"
	LabelImp   = "impyard.imp"
	LabelTask  = "impyard.task"
	labelNetNS = "impyard.netns"
	labelGrace = "impyard.grace"
)

// snapshotter unpacks images and holds box rootfs snapshots.
const snapshotter = "overlayfs"

// Runner starts and finds boxes in one containerd namespace.
type Runner struct {
	client  *containerd.Client
	ns      string
	address string

	mu       sync.Mutex
	runtimes map[string]Runtime // looked up once per runner
}

// ErrUnreachable means containerd does not answer at its socket: not
// running, or not yet. Trying again once it runs can succeed.
var ErrUnreachable = temporary.New("containerd unreachable")

// New connects to containerd at address (its socket) and checks that it
// answers. namespace "" means DefaultNamespace. Not reaching it is
// ErrUnreachable.
func New(ctx context.Context, address, namespace string) (*Runner, error) {
	if namespace == "" {
		namespace = DefaultNamespace
	}
	// Dialling a missing socket would retry until the timeout; say so now.
	if _, err := os.Stat(address); err != nil {
		return nil, fmt.Errorf("box: %w: no containerd socket: %w", ErrUnreachable, err)
	}
	c, err := containerd.New(address, containerd.WithDefaultNamespace(namespace), containerd.WithTimeout(5*time.Second))
	if err != nil {
		return nil, fmt.Errorf("box: %w: connect to containerd at %s: %w", ErrUnreachable, address, err)
	}
	r := &Runner{client: c, ns: namespace, address: address}
	if _, err := r.Version(ctx); err != nil {
		c.Close()
		return nil, err
	}
	return r, nil
}

// Close drops the connection to containerd. Running boxes go on; another
// Runner can Adopt them.
func (r *Runner) Close() error { return r.client.Close() }

// Version reports the containerd daemon's version.
func (r *Runner) Version(ctx context.Context) (string, error) {
	v, err := r.client.Version(r.ctx(ctx))
	if err != nil {
		return "", fmt.Errorf("box: %w: containerd at %s does not answer: %w", ErrUnreachable, r.address, err)
	}
	return v.Version, nil
}

func (r *Runner) ctx(ctx context.Context) context.Context {
	return namespaces.WithNamespace(ctx, r.ns)
}

// Runtime looks up runtime name ("" is runc) once per Runner: see
// LookRuntime. A missing one is looked up again the next time.
func (r *Runner) Runtime(name string) (Runtime, error) {
	if name == "" {
		name = RunC
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if rt, ok := r.runtimes[name]; ok {
		return rt, nil
	}
	rt, err := LookRuntime(name)
	if err != nil {
		return Runtime{}, err
	}
	if r.runtimes == nil {
		r.runtimes = map[string]Runtime{}
	}
	r.runtimes[name] = rt
	return rt, nil
}

// Info describes a container of the runner's namespace.
type Info struct {
	ID     string
	Labels map[string]string
	// Status is the task's: "running", "stopped", "created", "paused"…,
	// or "" when the container has no task.
	Status string
	Pid    uint32
}

// List returns every container in the runner's namespace with its labels
// and task status, for crash recovery: running ones to Adopt, the rest to
// Delete.
func (r *Runner) List(ctx context.Context) ([]Info, error) {
	ctx = r.ctx(ctx)
	cs, err := r.client.ContainerService().List(ctx)
	if err != nil {
		return nil, fmt.Errorf("box: list containers in %s: %w", r.ns, err)
	}
	ts, err := r.client.TaskService().List(ctx, &tasksapi.ListTasksRequest{})
	if err != nil {
		return nil, fmt.Errorf("box: list tasks in %s: %w", r.ns, err)
	}
	out := make([]Info, 0, len(cs))
	for _, c := range cs {
		in := Info{ID: c.ID, Labels: c.Labels}
		for _, t := range ts.Tasks {
			if t.ID == c.ID {
				in.Status = strings.ToLower(t.Status.String())
				in.Pid = t.Pid
			}
		}
		out = append(out, in)
	}
	return out, nil
}

// Adopt returns a handle on the running (or exited, not yet deleted) box
// id, started by this or an earlier Runner. ceilingLeft is what remains of
// its ceiling; at or below zero the box is stopped at once. Its Wait
// reports the real exit status.
func (r *Runner) Adopt(ctx context.Context, id string, ceilingLeft time.Duration) (*Box, error) {
	ctx = r.ctx(ctx)
	c, err := r.client.LoadContainer(ctx, id)
	if err != nil {
		return nil, fmt.Errorf("box: adopt %s: %w", id, err)
	}
	labels, err := c.Labels(ctx)
	if err != nil {
		return nil, fmt.Errorf("box: adopt %s: labels: %w", id, err)
	}
	grace, err := time.ParseDuration(labels[labelGrace])
	if err != nil {
		grace = DefaultGrace
	}
	t, err := c.Task(ctx, nil)
	if err != nil {
		return nil, fmt.Errorf("box: adopt %s: task: %w", id, err)
	}
	return r.watch(t, max(ceilingLeft, time.Nanosecond), grace)
}

// Delete removes box id for good: kills its process if it still runs,
// deletes task, container and rootfs snapshot, and removes the network
// namespace file it joined. Deleting a box that is gone is not an error.
func (r *Runner) Delete(ctx context.Context, id string) error {
	ctx = r.ctx(ctx)
	c, err := r.client.LoadContainer(ctx, id)
	if errdefs.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("box: delete %s: %w", id, err)
	}
	labels, err := c.Labels(ctx)
	if err != nil {
		return fmt.Errorf("box: delete %s: labels: %w", id, err)
	}
	if t, err := c.Task(ctx, nil); err == nil {
		if err := r.deleteTask(ctx, t); err != nil {
			return fmt.Errorf("box: delete %s: task: %w", id, err)
		}
	} else if !errdefs.IsNotFound(err) {
		return fmt.Errorf("box: delete %s: task: %w", id, err)
	}
	if err := c.Delete(ctx, containerd.WithSnapshotCleanup); err != nil && !errdefs.IsNotFound(err) {
		return fmt.Errorf("box: delete %s: container: %w", id, err)
	}
	if p := labels[labelNetNS]; p != "" {
		if err := netns.Remove(p); err != nil {
			return fmt.Errorf("box: delete %s: %w", id, err)
		}
	}
	return nil
}

// deleteTask kills t's processes unless they have exited or never
// started, then deletes it. runsc refuses to signal a sandbox whose
// process has exited, or a container only created, with an error the
// shim does not read as "not found"; the runtimes' delete cleans up both
// without the kill. A task that stopped during the kill is deleted again
// without it.
func (r *Runner) deleteTask(ctx context.Context, t containerd.Task) error {
	// The client refuses to delete a created task; the task service does
	// it, through the runtime's delete.
	idle := func() bool {
		st, err := t.Status(ctx)
		if err == nil && st.Status == containerd.Created {
			_, err = r.client.TaskService().Delete(ctx, &tasksapi.DeleteTaskRequest{ContainerID: t.ID()})
			return err == nil
		}
		return err == nil && st.Status == containerd.Stopped
	}
	if idle() {
		_, err := t.Delete(ctx)
		return notFoundIsGone(err)
	}
	_, err := t.Delete(ctx, containerd.WithProcessKill)
	if err != nil && !errdefs.IsNotFound(err) && idle() {
		_, err = t.Delete(ctx)
	}
	return notFoundIsGone(err)
}

func notFoundIsGone(err error) error {
	if errdefs.IsNotFound(err) {
		return nil
	}
	return err
}

// ErrSpec marks a Spec that Start refuses before it touches containerd.
var ErrSpec = errors.New("bad box spec")
