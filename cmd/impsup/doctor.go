package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/impyard/impyard/lib/box"
	"github.com/impyard/impyard/lib/ca"
	"github.com/impyard/impyard/lib/cli"
	"github.com/impyard/impyard/lib/config"
	"github.com/impyard/impyard/lib/id"
	"github.com/impyard/impyard/lib/memory"
	"github.com/impyard/impyard/lib/netns"
	runpkg "github.com/impyard/impyard/lib/run"
	"github.com/impyard/impyard/lib/store"
	"github.com/impyard/impyard/lib/yard"
)

const doctorUsage = `usage: impsup doctor [--json]

Print the version impsup was built from, then check every prerequisite
of running boxes and print one line per check: containerd reachable (and
its version), runc, network namespaces, cgroups, the gateway CA, the
policy (its schema; impgw judge checks its rules), org.toml and every
imp.toml, each imp's charter.md and memory.md (present, within the size
cap a brief carries whole, and for memory.md well-formed entry markers), a
writable yard, the gateway answering.
Exits 1 if any check fails.

Examples:
  impsup doctor
`

// doctorCheck is one check as doctor --json prints it.
type doctorCheck struct {
	Check  string `json:"check"`
	OK     bool   `json:"ok"`
	Detail string `json:"detail,omitempty"`
	Error  string `json:"error,omitempty"`
}

func doctor(ctx context.Context, e *cli.Env, args []string) error {
	fs := e.FlagSet("doctor", doctorUsage)
	root := cli.RootFlag(fs)
	asJSON := fs.Bool("json", false, "print one JSON object per check")
	if err := cli.Parse(fs, args); err != nil {
		return err
	}
	failed := 0
	check := func(name string, detail string, err error) {
		if *asJSON {
			c := doctorCheck{Check: name, OK: err == nil, Detail: detail}
			if err != nil {
				failed++
				c.Detail, c.Error = "", err.Error()
			}
			if jerr := cli.JSONLine(e.Stdout, c); jerr != nil {
				e.Warn(jerr)
			}
			return
		}
		if err != nil {
			failed++
			fmt.Fprintf(e.Stdout, "FAIL  %-10s %v\n", name, err)
			return
		}
		fmt.Fprintf(e.Stdout, "ok    %-10s %s\n", name, detail)
	}
	y, err := yard.Open(*root)
	if err != nil {
		return err
	}
	check("version", cli.Version(e.Name), nil)
	home, err := yard.Home()
	if err != nil {
		return err
	}
	org, orgErr := config.LoadOrg(y)
	check("org.toml", config.OrgPath(y), orgErr)
	if orgErr != nil {
		org = config.Default()
	}
	cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	r, err := box.New(cctx, org.Containerd.Address, org.Containerd.Namespace)
	if err == nil {
		v, verr := r.Version(cctx)
		check("containerd", fmt.Sprintf("%s at %s, namespace %s", v, org.Containerd.Address, org.Containerd.Namespace), verr)
		r.Close()
	} else {
		check("containerd", "", err)
	}
	cancel()
	if p, err := exec.LookPath("runc"); err == nil {
		out, _ := exec.Command(p, "--version").Output()
		check("runc", strings.SplitN(string(out), "\n", 2)[0]+" at "+p, nil)
	} else {
		check("runc", "", errors.New("runc is not on PATH (apt-get install runc)"))
	}
	name := "doctor-" + strings.TrimPrefix(id.New(id.Run), "r-")
	if p, err := netns.New(name); err == nil {
		check("netns", "can make a loopback-only network namespace", netns.Remove(p))
	} else {
		check("netns", "", err)
	}
	if _, err := os.Stat("/sys/fs/cgroup/pids"); err == nil {
		check("cgroups", "v1 (pids and memory controllers)", statAll("/sys/fs/cgroup/memory"))
	} else {
		check("cgroups", "v2", statAll("/sys/fs/cgroup/cgroup.controllers"))
	}
	if a, err := ca.Load(home); err == nil {
		check("ca", ca.CertPath(home)+" "+a.Fingerprint(), nil)
	} else {
		check("ca", "", fmt.Errorf("%w (impgw ca init)", err))
	}
	check("policy", y.PolicyPath(), policyReadable(y.PolicyPath()))
	imps, _ := config.ImpNames(y)
	for _, im := range imps {
		_, err := config.LoadImp(y, im)
		check("imp.toml", config.ImpPath(y, im), err)
		for _, k := range kept(y, im) {
			check(k.name, k.detail, k.err)
		}
	}
	if dir, err := runpkg.MkRoot(y); err == nil {
		probe := filepath.Join(dir, ".doctor")
		err = os.WriteFile(probe, []byte("ok"), 0o600)
		os.Remove(probe)
		check("yard", y.Root+" is writable", err)
	} else {
		check("yard", "", err)
	}
	if err := runpkg.GatewayUp(org.Gateway.Listen); err == nil {
		check("gateway", "impgw answers at "+org.Gateway.Listen, nil)
	} else {
		check("gateway", "", err)
	}
	if failed > 0 {
		return fmt.Errorf("%d check(s) failed", failed)
	}
	return nil
}

// keptFile is doctor's line for an imp's charter.md or memory.md.
type keptFile struct {
	name, detail string
	err          error
}

// kept checks the imp's charter.md and memory.md, where present: their
// size against the cap, and memory.md's entry markers, which impexec
// needs to add to it.
func kept(y *yard.Yard, imp string) []keptFile {
	var out []keptFile
	for _, f := range []struct{ name, path string }{{"charter", config.CharterPath(y, imp)}, {"memory", config.MemoryPath(y, imp)}} {
		b, err := y.ReadFile(f.path)
		if store.IsNotExist(err) {
			continue
		}
		if err == nil {
			err = memory.CheckSize(f.path, len(b))
		}
		detail := fmt.Sprintf("%s %d of %d bytes", f.path, len(b), memory.MaxBytes)
		if err == nil && f.name == "memory" {
			var entries []memory.Entry
			if entries, err = memory.Parse(f.path, b); err == nil {
				detail += fmt.Sprintf(", %d promoted or owner entries", len(entries))
			}
		}
		out = append(out, keptFile{f.name, detail, err})
	}
	return out
}

func statAll(paths ...string) error {
	for _, p := range paths {
		if _, err := os.Stat(p); err != nil {
			return err
		}
	}
	return nil
}

// policyReadable checks that the policy is there and of a schema this
// impyard reads. Its rules are the gateway's to judge (impgw judge loads
// them the way impgw serve does), so that impsup links no judge.
func policyReadable(path string) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	return store.CheckSchema(path, b, "policy", 1)
}
