package box

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/containerd/containerd"
	"github.com/containerd/containerd/api/types/runc/options"
	"github.com/containerd/containerd/cio"
	"github.com/containerd/containerd/containers"
	"github.com/containerd/containerd/contrib/seccomp"
	"github.com/containerd/containerd/images/archive"
	"github.com/containerd/containerd/oci"
	"github.com/containerd/containerd/plugin"
	"github.com/containerd/fifo"
	specs "github.com/opencontainers/runtime-spec/specs-go"
)

// Mount binds a host path into the box.
type Mount struct {
	Source, Target string
	ReadOnly       bool
}

// Spec is what one box runs and with what. Zero values take the defaults.
type Spec struct {
	ID     string            // container id: the run id
	Labels map[string]string // LabelImp, LabelTask, …; LabelRun is set to ID

	// The rootfs: exactly one of a folder (used read-only in place), an
	// OCI or Docker archive (imported, then unpacked) or the name of an
	// image in containerd's store.
	Rootfs, Archive, Image string

	Args  []string  // the command; an image's entrypoint and cmd if empty
	Env   []string  // KEY=VALUE, over the image's or PATH's defaults
	Cwd   string    // working directory; the image's or / if empty
	Stdin io.Reader // fed to the box's stdin, then closed; none if nil
	// Stdout and Stderr, when set, receive the box's output through pipes
	// of this process's instead of Log: a box whose output is a protocol
	// (a stdio MCP server's) is read as it comes. Their copies end when
	// the shim closes its end, at the box's exit, and close a writer that
	// is an io.Closer; if this process dies first, the box's writes fail.
	Stdout, Stderr io.Writer
	User           string // numeric "uid:gid", DefaultUser if empty

	Mounts      []Mount
	MemoryBytes int64 // memory limit, swap included
	Pids        int64 // most processes and threads at once

	Ceiling time.Duration // run time before SIGTERM
	Grace   time.Duration // SIGTERM to SIGKILL

	Log   string // absolute path; stdout and stderr are appended to it, unless both go to writers
	NetNS string // netns.New path to join; "" gives a private one no one can serve

	// Runtime is one of Runtimes; "" is runc.
	Runtime string
}

// Start creates box s and starts its process; it returns once the process
// runs. On error nothing of the box is left but the Log file.
func (r *Runner) Start(ctx context.Context, s Spec) (_ *Box, err error) {
	if err := s.check(); err != nil {
		return nil, err
	}
	ctx = r.ctx(ctx)
	uid, gid, _ := parseUser(s.User)
	rt, err := r.Runtime(s.Runtime)
	if err != nil {
		return nil, fmt.Errorf("box %s: %w", s.ID, err)
	}
	bin, err := rt.Binary()
	if err != nil {
		return nil, fmt.Errorf("box %s: %w", s.ID, err)
	}

	opts := []containerd.NewContainerOpts{
		containerd.WithContainerLabels(s.labels()),
		// The runc shim runs whichever runtime binary it is given; the
		// choice is kept with the container, so Adopt and Delete need not
		// know it.
		containerd.WithRuntime(plugin.RuntimeRuncV2, &options.Options{BinaryName: bin}),
	}
	var specOpts []oci.SpecOpts
	if s.Rootfs != "" {
		specOpts = append(specOpts, oci.WithRootFSPath(s.Rootfs))
	} else {
		img, err := r.image(ctx, s)
		if err != nil {
			return nil, err
		}
		cfg, err := img.Spec(ctx)
		if err != nil {
			return nil, fmt.Errorf("box %s: image %s config: %w", s.ID, img.Name(), err)
		}
		// A writable snapshot, though the box only ever sees it read-only:
		// runc may need to create mount targets the image lacks.
		opts = append(opts, containerd.WithSnapshotter(snapshotter), containerd.WithNewSnapshot(s.ID, img))
		specOpts = append(specOpts, oci.WithEnv(cfg.Config.Env))
		if len(s.Args) == 0 {
			specOpts = append(specOpts, oci.WithProcessArgs(append(cfg.Config.Entrypoint, cfg.Config.Cmd...)...))
		}
		if s.Cwd == "" && cfg.Config.WorkingDir != "" {
			specOpts = append(specOpts, oci.WithProcessCwd(cfg.Config.WorkingDir))
		}
	}
	if len(s.Args) > 0 {
		specOpts = append(specOpts, oci.WithProcessArgs(s.Args...))
	}
	if s.Cwd != "" {
		specOpts = append(specOpts, oci.WithProcessCwd(s.Cwd))
	}
	if s.NetNS != "" {
		specOpts = append(specOpts, oci.WithLinuxNamespace(specs.LinuxNamespace{Type: specs.NetworkNamespace, Path: s.NetNS}))
	}
	specOpts = append(specOpts,
		oci.WithEnv(s.Env),
		oci.WithHostname("box"),
		oci.WithUIDGID(uid, gid),
		oci.WithNoNewPrivileges,
		dropCapabilities,
		oci.WithRootFSReadonly(),
		oci.WithMounts(s.mounts()),
		oci.WithCgroup(cgroupsPath(r.ns, s.ID)),
		withMemory(s.MemoryBytes),
		oci.WithPidsLimit(s.Pids),
		// Last: the profile allows syscalls by the capabilities left, none.
		withSeccomp,
	)
	opts = append(opts, containerd.WithNewSpec(specOpts...))

	c, err := r.client.NewContainer(ctx, s.ID, opts...)
	if err != nil {
		return nil, fmt.Errorf("box %s: create container: %w", s.ID, err)
	}
	cleanup := context.WithoutCancel(ctx)
	defer func() {
		if err != nil {
			c.Delete(cleanup, containerd.WithSnapshotCleanup)
		}
	}()

	stdio, err := newStdio(s.Log, s.Stdin, s.Stdout, s.Stderr)
	if err != nil {
		return nil, fmt.Errorf("box %s: %w", s.ID, err)
	}
	defer stdio.unlink()
	defer func() {
		if err != nil {
			stdio.Close()
		}
	}()
	t, err := c.NewTask(ctx, func(string) (cio.IO, error) { return stdio, nil })
	if err != nil {
		return nil, fmt.Errorf("box %s: create task: %w", s.ID, err)
	}
	defer func() {
		if err != nil {
			r.deleteTask(cleanup, t)
		}
	}()
	// Wait before Start, so even an instant exit is seen.
	b, err := r.watch(t, s.Ceiling, s.Grace)
	if err != nil {
		return nil, err
	}
	if err := t.Start(ctx); err != nil {
		b.cancel()
		return nil, fmt.Errorf("box %s: start: %w", s.ID, err)
	}
	go func() {
		stdio.feed()
		if s.Stdin != nil {
			// The shim holds the FIFO open for writing itself until told
			// otherwise: only then does the box read EOF.
			t.CloseIO(b.ctx, containerd.WithStdinCloser)
		}
	}()
	return b, nil
}

// check fills in the defaults and refuses a spec that cannot make a box.
func (s *Spec) check() error {
	bad := func(format string, a ...any) error {
		return fmt.Errorf("box %s: %w: %s", s.ID, ErrSpec, fmt.Sprintf(format, a...))
	}
	if s.ID == "" {
		return bad("no id")
	}
	n := 0
	for _, v := range []string{s.Rootfs, s.Archive, s.Image} {
		if v != "" {
			n++
		}
	}
	if n != 1 {
		return bad("want exactly one of Rootfs, Archive and Image, have %d", n)
	}
	if s.Rootfs != "" && !filepath.IsAbs(s.Rootfs) {
		return bad("rootfs %q is not an absolute path", s.Rootfs)
	}
	if s.Rootfs != "" && len(s.Args) == 0 {
		return bad("a rootfs folder has no default command: Args is empty")
	}
	if (s.Stdout == nil || s.Stderr == nil || s.Log != "") && !filepath.IsAbs(s.Log) {
		return bad("log %q is not an absolute path", s.Log)
	}
	if err := CheckRuntime(s.Runtime); err != nil {
		return fmt.Errorf("box %s: %w", s.ID, err)
	}
	if s.User == "" {
		s.User = DefaultUser
	}
	if _, _, err := parseUser(s.User); err != nil {
		return bad("%v", err)
	}
	for _, m := range s.Mounts {
		if !filepath.IsAbs(m.Source) || !filepath.IsAbs(m.Target) {
			return bad("mount %s -> %s: both ends must be absolute paths", m.Source, m.Target)
		}
	}
	if s.MemoryBytes <= 0 {
		s.MemoryBytes = DefaultMemory
	}
	if s.Pids <= 0 {
		s.Pids = DefaultPids
	}
	if s.Ceiling <= 0 {
		s.Ceiling = DefaultCeiling
	}
	if s.Grace <= 0 {
		s.Grace = DefaultGrace
	}
	return nil
}

func parseUser(u string) (uid, gid uint32, err error) {
	us, gs, ok := strings.Cut(u, ":")
	a, err1 := strconv.ParseUint(us, 10, 32)
	b, err2 := strconv.ParseUint(gs, 10, 32)
	if !ok || err1 != nil || err2 != nil {
		return 0, 0, fmt.Errorf("user %q is not numeric uid:gid", u)
	}
	return uint32(a), uint32(b), nil
}

func (s *Spec) labels() map[string]string {
	l := map[string]string{}
	for k, v := range s.Labels {
		l[k] = v
	}
	l[LabelRun] = s.ID
	l[labelGrace] = s.Grace.String()
	if s.NetNS != "" {
		l[labelNetNS] = s.NetNS
	}
	return l
}

func (s *Spec) mounts() []specs.Mount {
	ms := []specs.Mount{{
		Destination: "/tmp",
		Type:        "tmpfs",
		Source:      "tmpfs",
		Options:     []string{"nosuid", "nodev", "mode=1777", "size=64m"},
	}}
	for _, m := range s.Mounts {
		mode := "rw"
		if m.ReadOnly {
			mode = "ro"
		}
		ms = append(ms, specs.Mount{
			Destination: m.Target,
			Type:        "bind",
			Source:      m.Source,
			Options:     []string{"rbind", mode, "nosuid", "nodev"},
		})
	}
	return ms
}

// image returns s's image, imported first if it comes in an archive, and
// unpacked.
func (r *Runner) image(ctx context.Context, s Spec) (containerd.Image, error) {
	var img containerd.Image
	if s.Archive != "" {
		f, err := os.Open(s.Archive)
		if err != nil {
			return nil, fmt.Errorf("box %s: %w", s.ID, err)
		}
		defer f.Close()
		// Name each image by digest, which is stable and unique; a bare OCI
		// tag ("latest") is no name. Docker archives keep their own names.
		imgs, err := r.client.Import(ctx, f,
			containerd.WithImageRefTranslator(func(string) string { return "" }),
			containerd.WithDigestRef(archive.DigestTranslator("impyard-import")))
		if err != nil {
			return nil, fmt.Errorf("box %s: import %s: %w", s.ID, s.Archive, err)
		}
		if len(imgs) == 0 {
			return nil, fmt.Errorf("box %s: import %s: no image in the archive", s.ID, s.Archive)
		}
		img = containerd.NewImage(r.client, imgs[0])
	} else {
		var err error
		if img, err = r.client.GetImage(ctx, s.Image); err != nil {
			return nil, fmt.Errorf("box %s: image %s: %w", s.ID, s.Image, err)
		}
	}
	ok, err := img.IsUnpacked(ctx, snapshotter)
	if err == nil && !ok {
		err = img.Unpack(ctx, snapshotter)
	}
	if err != nil {
		return nil, fmt.Errorf("box %s: unpack %s: %w", s.ID, img.Name(), err)
	}
	return img, nil
}

// dropCapabilities empties all five capability sets, where the defaults
// would leave Docker's usual fourteen.
func dropCapabilities(_ context.Context, _ oci.Client, _ *containers.Container, s *oci.Spec) error {
	s.Process.Capabilities = &specs.LinuxCapabilities{}
	return nil
}

// withSeccomp is containerd's default profile for the box's capabilities
// (none), narrowed to the native syscall ABI. The profile also allows the
// 32-bit x86 and x32 ABIs, which no box needs and which cost runc about
// 6 ms each to compile at every start; a syscall through them now kills
// the calling thread.
func withSeccomp(ctx context.Context, c oci.Client, ctr *containers.Container, s *oci.Spec) error {
	if err := seccomp.WithDefaultProfile()(ctx, c, ctr, s); err != nil {
		return err
	}
	s.Linux.Seccomp.Architectures = nil
	return nil
}

// withMemory limits memory and memory plus swap alike, so a host with swap
// cannot stretch the limit.
func withMemory(limit int64) oci.SpecOpts {
	return func(_ context.Context, _ oci.Client, _ *containers.Container, s *oci.Spec) error {
		if s.Linux.Resources.Memory == nil {
			s.Linux.Resources.Memory = &specs.LinuxMemory{}
		}
		s.Linux.Resources.Memory.Limit = &limit
		s.Linux.Resources.Memory.Swap = &limit
		return nil
	}
}

// stdio is the box's cio.IO: the shim appends stdout and stderr to the log
// file itself and reads stdin from a FIFO that this process writes; an
// output sent to a writer goes through a FIFO this process reads.
type stdio struct {
	cfg  cio.Config
	src  io.Reader      // what to feed, nil without stdin
	w    io.WriteCloser // write end of the stdin FIFO
	outs []pipe         // read ends of the output FIFOs, with their writers
	dir  string         // holds the FIFOs until both ends have them open
}

type pipe struct {
	r   io.ReadCloser
	dst io.Writer
}

// newStdio hands the shim plain paths rather than a file:// URI. For
// equal stdout and stderr paths, which a file:// URI always gives, the
// shim (containerd 1.6 and 1.7, pkg/process/io.go copyPipes) shares one
// descriptor between the two copies and stdout's closes it at EOF, so
// whatever stderr writes after stdout ends, such as a last error before
// exit, is lost. Two spellings of the path give each stream its own
// O_APPEND descriptor on the same file.
func newStdio(log string, src io.Reader, stdout, stderr io.Writer) (_ *stdio, err error) {
	s := &stdio{}
	if stdout == nil || stderr == nil {
		log = filepath.Clean(log)
		// The shim opens plain paths as they are, without O_CREATE.
		if err := os.MkdirAll(filepath.Dir(log), 0o755); err != nil {
			return nil, fmt.Errorf("log: %w", err)
		}
		f, err := os.OpenFile(log, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
		if err != nil {
			return nil, fmt.Errorf("log: %w", err)
		}
		f.Close()
		s.cfg = cio.Config{Stdout: log, Stderr: filepath.Dir(log) + "/./" + filepath.Base(log)}
	}
	if src == nil && stdout == nil && stderr == nil {
		return s, nil
	}
	if s.dir, err = os.MkdirTemp("", "impyard-stdio-"); err != nil {
		return nil, fmt.Errorf("stdio: %w", err)
	}
	defer func() {
		if err != nil {
			s.Close()
			s.unlink()
		}
	}()
	// Non-blocking: each open completes when the shim opens the other end.
	for _, o := range []struct {
		name string
		dst  io.Writer
		path *string
	}{{"stdout", stdout, &s.cfg.Stdout}, {"stderr", stderr, &s.cfg.Stderr}} {
		if o.dst == nil {
			continue
		}
		p := filepath.Join(s.dir, o.name)
		r, err := fifo.OpenFifo(context.Background(), p, syscall.O_RDONLY|syscall.O_CREAT|syscall.O_NONBLOCK, 0o600)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", o.name, err)
		}
		s.outs = append(s.outs, pipe{r, o.dst})
		*o.path = p
	}
	if src != nil {
		path := filepath.Join(s.dir, "stdin")
		w, err := fifo.OpenFifo(context.Background(), path, syscall.O_WRONLY|syscall.O_CREAT|syscall.O_NONBLOCK, 0o600)
		if err != nil {
			return nil, fmt.Errorf("stdin: %w", err)
		}
		s.cfg.Stdin, s.src, s.w = path, src, w
	}
	return s, nil
}

// feed copies the source to the box's stdin and closes it, so the box
// sees EOF, and the box's outputs to their writers until the shim closes
// them.
func (s *stdio) feed() {
	for _, o := range s.outs {
		go func() {
			io.Copy(o.dst, o.r)
			o.r.Close()
			if c, ok := o.dst.(io.Closer); ok {
				c.Close()
			}
		}()
	}
	if s.w != nil {
		io.Copy(s.w, s.src)
		s.w.Close()
	}
}

// unlink removes the FIFOs' names once the shim holds them open (or never
// will): the open ends keep the pipes.
func (s *stdio) unlink() {
	if s.dir != "" {
		os.RemoveAll(s.dir)
	}
}

func (s *stdio) Config() cio.Config { return s.cfg }
func (s *stdio) Cancel()            {}
func (s *stdio) Wait()              {}
func (s *stdio) Close() error {
	for _, o := range s.outs {
		o.r.Close()
	}
	if s.w == nil {
		return nil
	}
	return s.w.Close()
}
