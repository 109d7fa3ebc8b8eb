package box

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/impyard/impyard/lib/netns"
)

// Probe starts a box under runtime rt that runs the host's /usr/bin/true
// with the usual hardening, in a loopback-only namespace of its own, and
// reports how long it took to start; the box, its namespace and its rootfs
// are gone when it returns. The rootfs is empty but for the host's /usr
// (and its /bin, /lib, /lib64 and /sbin), bound read-only, so no image is
// needed.
func (r *Runner) Probe(ctx context.Context, rt string) (time.Duration, error) {
	var rnd [6]byte
	rand.Read(rnd[:])
	id := "probe-" + rt + "-" + hex.EncodeToString(rnd[:])
	dir, err := os.MkdirTemp("", "impyard-probe-")
	if err != nil {
		return 0, fmt.Errorf("probe %s: %w", rt, err)
	}
	defer os.RemoveAll(dir)
	rootfs := filepath.Join(dir, "rootfs")
	mounts, err := hostUsr(rootfs)
	if err != nil {
		return 0, fmt.Errorf("probe %s: %w", rt, err)
	}
	ns, err := netns.New(id)
	if err != nil {
		return 0, fmt.Errorf("probe %s: %w", rt, err)
	}
	defer netns.Remove(ns)
	s := Spec{ID: id, Rootfs: rootfs, Args: []string{"/usr/bin/true"}, Mounts: mounts,
		Log: filepath.Join(dir, "box.log"), NetNS: ns, Ceiling: 20 * time.Second, Runtime: rt}
	start := time.Now()
	b, err := r.Start(ctx, s)
	took := time.Since(start)
	if err != nil {
		return 0, fmt.Errorf("probe %s: %w", rt, err)
	}
	defer r.Delete(context.WithoutCancel(ctx), id)
	exit, err := b.Wait(ctx)
	if err != nil {
		return 0, fmt.Errorf("probe %s: %w", rt, err)
	}
	if exit.Code != 0 {
		log, _ := os.ReadFile(s.Log)
		return 0, fmt.Errorf("probe %s: /usr/bin/true in a box: %s: %q", rt, exit.Reason, log)
	}
	return took, nil
}

// hostUsr makes rootfs with the mount targets a box needs and returns the
// read-only binds of the host's /usr and its top-level links or folders.
func hostUsr(rootfs string) ([]Mount, error) {
	for _, d := range []string{"usr", "proc", "dev", "sys", "tmp", "etc"} {
		if err := os.MkdirAll(filepath.Join(rootfs, d), 0o755); err != nil {
			return nil, err
		}
	}
	mounts := []Mount{{Source: "/usr", Target: "/usr", ReadOnly: true}}
	for _, d := range []string{"bin", "lib", "lib64", "sbin"} {
		host := "/" + d
		fi, err := os.Lstat(host)
		switch {
		case err != nil:
			continue
		case fi.Mode()&os.ModeSymlink != 0:
			to, err := os.Readlink(host)
			if err != nil {
				return nil, err
			}
			if err := os.Symlink(to, filepath.Join(rootfs, d)); err != nil {
				return nil, err
			}
		case fi.IsDir():
			if err := os.Mkdir(filepath.Join(rootfs, d), 0o755); err != nil {
				return nil, err
			}
			mounts = append(mounts, Mount{Source: host, Target: host, ReadOnly: true})
		}
	}
	return mounts, nil
}
