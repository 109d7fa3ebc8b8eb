// Package netns makes the network namespaces that boxes live in: fresh,
// with loopback up and nothing else, no interface, no route and so no way
// out. The trusted side reaches into one with Listen, which opens a listener
// inside the namespace; that listener is the box's only peer.
//
// A namespace is persistent while its file exists: New bind-mounts it onto
// Dir/NAME (as ip-netns does on /run/netns), so it outlives the thread that
// made it and any process in it, and a box joins it by path. Remove
// unmounts and deletes the file; the namespace itself goes when the last
// process and socket in it are gone.
//
// Guarantees: New and Listen never change the network namespace of any
// thread the caller's other goroutines can run on. They work on a
// dedicated OS thread that is thrown away afterwards (a goroutine that
// exits while locked to its thread takes the thread with it), so a
// failed switch back cannot leak a namespace into the Go runtime.
//
// Limits: Linux only; needs root (CAP_SYS_ADMIN) for unshare, setns and
// mount. Listen's address must be a literal IP: a name would be resolved
// by goroutines on other threads, outside the namespace.
package netns

import (
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"runtime"

	"golang.org/x/sys/unix"
)

// Dir holds the namespace files. It is a mount point with shared
// propagation, as /run/netns is for ip-netns, so that unmounting a
// namespace here also unmounts the copies that mount namespaces cloned
// meanwhile hold (otherwise its file could not be deleted).
var Dir = "/run/impyard/netns"

// New creates a network namespace with only loopback, up, and pins it at
// Dir/name. It returns the path to give to the box and to Listen.
func New(name string) (string, error) {
	if name == "" || name != filepath.Base(name) || name == "." || name == ".." {
		return "", fmt.Errorf("netns: bad name %q", name)
	}
	if err := sharedDir(Dir); err != nil {
		return "", err
	}
	path := filepath.Join(Dir, name)
	f, err := os.OpenFile(path, os.O_CREATE|os.O_EXCL|os.O_RDONLY, 0o444)
	if err != nil {
		return "", fmt.Errorf("netns: create %s: %w", path, err)
	}
	f.Close()
	err = onThread(func() error {
		if err := unix.Unshare(unix.CLONE_NEWNET); err != nil {
			return fmt.Errorf("unshare: %w", err)
		}
		if err := loopbackUp(); err != nil {
			return err
		}
		self := fmt.Sprintf("/proc/self/task/%d/ns/net", unix.Gettid())
		if err := unix.Mount(self, path, "none", unix.MS_BIND, ""); err != nil {
			return fmt.Errorf("bind %s: %w", self, err)
		}
		return nil
	})
	if err != nil {
		os.Remove(path)
		return "", fmt.Errorf("netns: new %s: %w", path, err)
	}
	return path, nil
}

// Remove unpins the namespace at path and deletes its file. A path that is
// already gone is not an error, so cleanup can run twice.
func Remove(path string) error {
	err := unix.Unmount(path, unix.MNT_DETACH)
	if err != nil && !errors.Is(err, unix.EINVAL) && !errors.Is(err, unix.ENOENT) {
		return fmt.Errorf("netns: unmount %s: %w", path, err)
	}
	if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("netns: %w", err)
	}
	return nil
}

// Listen opens a listener inside the namespace at nsPath. The socket
// belongs to that namespace for life, so it can be used, accepted on and
// closed from any goroutine.
func Listen(nsPath, network, addr string) (net.Listener, error) {
	var l net.Listener
	err := onThread(func() error {
		if err := enter(nsPath); err != nil {
			return err
		}
		var err error
		l, err = net.Listen(network, addr)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("netns: listen %s %s in %s: %w", network, addr, nsPath, err)
	}
	return l, nil
}

// onThread runs fn on a fresh goroutine locked to its OS thread and never
// unlocks it: when the goroutine ends the runtime kills the thread, with
// whatever namespace fn left it in.
func onThread(fn func() error) error {
	done := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		done <- fn()
	}()
	return <-done
}

func enter(nsPath string) error {
	fd, err := unix.Open(nsPath, unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("open %s: %w", nsPath, err)
	}
	defer unix.Close(fd)
	if err := unix.Setns(fd, unix.CLONE_NEWNET); err != nil {
		return fmt.Errorf("setns %s: %w", nsPath, err)
	}
	return nil
}

// loopbackUp sets IFF_UP on lo of the calling thread's namespace with the
// SIOCSIFFLAGS ioctl, which needs no netlink library.
func loopbackUp() error {
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("socket: %w", err)
	}
	defer unix.Close(fd)
	ifr, err := unix.NewIfreq("lo")
	if err != nil {
		return err
	}
	if err := unix.IoctlIfreq(fd, unix.SIOCGIFFLAGS, ifr); err != nil {
		return fmt.Errorf("get lo flags: %w", err)
	}
	ifr.SetUint16(ifr.Uint16() | unix.IFF_UP)
	if err := unix.IoctlIfreq(fd, unix.SIOCSIFFLAGS, ifr); err != nil {
		return fmt.Errorf("set lo up: %w", err)
	}
	return nil
}

// sharedDir makes dir a mount point with shared propagation, binding it
// onto itself first if it is not a mount point yet.
func sharedDir(dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("netns: %w", err)
	}
	err := unix.Mount("", dir, "none", unix.MS_SHARED|unix.MS_REC, "")
	if errors.Is(err, unix.EINVAL) {
		if err = unix.Mount(dir, dir, "none", unix.MS_BIND|unix.MS_REC, ""); err == nil {
			err = unix.Mount("", dir, "none", unix.MS_SHARED|unix.MS_REC, "")
		}
	}
	if err != nil {
		return fmt.Errorf("netns: make %s a shared mount: %w", dir, err)
	}
	return nil
}
