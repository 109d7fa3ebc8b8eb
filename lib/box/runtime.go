package box

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/impyard/impyard/lib/store"
)

// The OCI runtimes a box can run under, all through containerd's
// io.containerd.runc.v2 shim with the runtime binary set per container.
const (
	RunC  = "runc"  // the reference runtime: namespaces, cgroups, seccomp
	CRun  = "crun"  // the same isolation as runc, written in C: starts faster
	RunSC = "runsc" // gVisor: a user-space kernel between the box and the host
)

// Runtimes are the runtimes a box can run under, the default first.
var Runtimes = []string{RunC, CRun, RunSC}

// ErrRuntimeMissing means the runtime a box asks for is not installed on
// this host.
var ErrRuntimeMissing = errors.New("runtime not installed")

// RuntimeDir holds the runsc launcher Start writes: runsc reads its flags
// from its command line only, and the runc shim passes none of its own.
var RuntimeDir = "/run/impyard/runtime"

// CheckRuntime refuses a name that is not one of Runtimes; "" is runc.
func CheckRuntime(name string) error {
	if name == "" {
		return nil
	}
	for _, r := range Runtimes {
		if name == r {
			return nil
		}
	}
	return fmt.Errorf("%w: unknown runtime %q (want %s)", ErrSpec, name, strings.Join(Runtimes, ", "))
}

// Runtime is an installed runtime.
type Runtime struct {
	Name    string // one of Runtimes
	Path    string // its binary
	Version string // as it reports it: "1.1.5+ds1", "0.0~20221219.0"
	// Platform is how runsc intercepts the box's syscalls: "systrap"
	// where this runsc has it, else "ptrace"; "" for the other runtimes.
	Platform string
}

// LookRuntime finds runtime name ("" is runc) on PATH and asks its
// version. A runtime that is not installed is ErrRuntimeMissing, naming it.
func LookRuntime(name string) (Runtime, error) {
	if name == "" {
		name = RunC
	}
	if err := CheckRuntime(name); err != nil {
		return Runtime{}, err
	}
	path, err := exec.LookPath(name)
	if err != nil {
		return Runtime{}, fmt.Errorf("%s: %w (apt-get install %s): %w", name, ErrRuntimeMissing, name, err)
	}
	out, err := exec.Command(path, "--version").Output()
	if err != nil {
		return Runtime{}, fmt.Errorf("%s --version: %w", path, err)
	}
	rt := Runtime{Name: name, Path: path, Version: parseVersion(string(out))}
	if name == RunSC {
		rt.Platform = runscPlatform(path)
	}
	return rt, nil
}

// parseVersion takes "NAME version V" from the first line of --version.
func parseVersion(out string) string {
	first, _, _ := strings.Cut(out, "\n")
	f := strings.Fields(first)
	if len(f) >= 3 && f[1] == "version" {
		return f[2]
	}
	return strings.TrimSpace(first)
}

// runscPlatform is systrap where this runsc has it (it intercepts with
// seccomp, cheaper than ptrace), else ptrace, which works everywhere.
// KVM is not chosen by itself: nested in a virtual machine it may spin
// (runsc 20221219 on a cloud VM never started a box with it).
func runscPlatform(path string) string {
	out, _ := exec.Command(path, "flags").CombinedOutput()
	if strings.Contains(string(out), "systrap") {
		return "systrap"
	}
	return "ptrace"
}

// Binary is what the runc shim runs for rt: the runtime itself, or for
// runsc a launcher in RuntimeDir that adds the flags every box needs. The
// network is the host's as seen from the box's own namespace (loopback
// only, the gateway's listener its one peer): gVisor's own network stack
// would hide that listener. The spec's seccomp profile is applied inside
// the sandbox too, so the box is filtered as under runc. The launcher is
// rewritten when it differs, so an upgraded or moved runsc is picked up.
func (rt Runtime) Binary() (string, error) {
	if rt.Name != RunSC {
		return rt.Path, nil
	}
	if err := os.MkdirAll(RuntimeDir, 0o755); err != nil {
		return "", fmt.Errorf("runtime dir: %w", err)
	}
	p := filepath.Join(RuntimeDir, "runsc-"+rt.Platform)
	script := fmt.Sprintf("#!/bin/sh\n# Written by impyard's box package at each start: runsc with the flags its boxes need.\nexec %s --network=host --oci-seccomp --platform=%s \"$@\"\n", shellWord(rt.Path), rt.Platform)
	if b, err := os.ReadFile(p); err == nil && string(b) == script {
		return p, nil
	}
	if err := store.WriteMode(p, []byte(script), 0o755); err != nil {
		return "", fmt.Errorf("runsc launcher %s: %w", p, err)
	}
	return p, nil
}

// shellWord is p as one word of a shell script: as it is when it holds
// only characters no shell reads specially, else single-quoted, so a
// runsc found under a directory with a space or a $ runs as itself.
func shellWord(p string) string {
	if p != "" && strings.Trim(p, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_./+-") == "" {
		return p
	}
	return "'" + strings.ReplaceAll(p, "'", `'\''`) + "'"
}

// EscapeFixed reports whether runc version v (as LookRuntime reports it)
// carries the fixes of the 2025 container escapes CVE-2025-31133,
// CVE-2025-52565 and CVE-2025-52881: 1.2.8 and later 1.2, 1.3.3 and later
// 1.3, and 1.4 on. ok is false for a version it cannot read.
func EscapeFixed(v string) (fixed, ok bool) {
	num := v
	if i := strings.IndexAny(num, "+-~"); i >= 0 {
		num = num[:i]
	}
	parts := strings.Split(num, ".")
	if len(parts) != 3 {
		return false, false
	}
	var n [3]int
	for i, p := range parts {
		x, err := strconv.Atoi(p)
		if err != nil {
			return false, false
		}
		n[i] = x
	}
	switch {
	case n[0] != 1:
		return n[0] > 1, true
	case n[1] < 2:
		return false, true
	case n[1] == 2:
		return n[2] >= 8, true
	case n[1] == 3:
		return n[2] >= 3, true
	}
	return true, true
}

// EscapeCVEs are the runc container escapes of 2025 EscapeFixed checks.
const EscapeCVEs = "CVE-2025-31133, CVE-2025-52565, CVE-2025-52881"
