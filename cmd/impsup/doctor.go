package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/impyard/impyard/lib/box"
	"github.com/impyard/impyard/lib/ca"
	"github.com/impyard/impyard/lib/cli"
	"github.com/impyard/impyard/lib/config"
	"github.com/impyard/impyard/lib/health"
	"github.com/impyard/impyard/lib/home"
	"github.com/impyard/impyard/lib/id"
	"github.com/impyard/impyard/lib/mcpserv"
	"github.com/impyard/impyard/lib/memory"
	"github.com/impyard/impyard/lib/netns"
	runpkg "github.com/impyard/impyard/lib/run"
	"github.com/impyard/impyard/lib/store"
	"github.com/impyard/impyard/lib/yard"
)

const doctorUsage = `usage: impsup doctor [--json]

Print the version impsup was built from, then check every prerequisite
of running boxes and print one line per check: containerd reachable (and
its version); each runtime (runc, crun, runsc) installed, its version and
a probe box started under it, with a warning when the runc lacks the 2025
escape fixes (a runtime no imp uses may be missing, with a warning);
network namespaces, cgroups, the gateway CA, the
policy (its schema, and every rule valid, by running impgw judge), every
secret a configuration names (there, 0600, in a 0700 secrets/ folder),
org.toml (when it does not load, containerd and the gateway are not
checked) and every
imp.toml (each also in strict modes: it and every directory up to the
yard root owned by root or the yard's owner and writable by no one
else, or every daemon refuses it), each imp's charter.md and memory.md (present, within the size
cap a brief carries whole, and for memory.md well-formed entry markers), a
writable yard, the gateway answering.
Exits 1 if any check fails.

Examples:
  impsup doctor
`

// doctorCheck is one check as doctor --json prints it.
type doctorCheck struct {
	Check   string `json:"check"`
	OK      bool   `json:"ok"`
	Detail  string `json:"detail,omitempty"`
	Error   string `json:"error,omitempty"`
	Warning string `json:"warning,omitempty"`
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
	// warn is a check that passes with something the owner should know.
	warn := func(name, warning string) {
		if *asJSON {
			if jerr := cli.JSONLine(e.Stdout, doctorCheck{Check: name, OK: true, Warning: warning}); jerr != nil {
				e.Warn(jerr)
			}
			return
		}
		fmt.Fprintf(e.Stdout, "WARN  %-10s %s\n", name, warning)
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
	// A broken org.toml is the one failure: the addresses it names are
	// unknown, and checking the defaults instead would report a
	// containerd and a gateway that are fine as down.
	notChecked := "not checked: org.toml does not load, and it names the address"
	var r *box.Runner
	if orgErr != nil {
		org = config.Default()
		warn("containerd", notChecked)
	} else {
		cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		r, err = box.New(cctx, org.Containerd.Address, org.Containerd.Namespace)
		if err == nil {
			v, verr := r.Version(cctx)
			check("containerd", fmt.Sprintf("%s at %s, namespace %s", v, org.Containerd.Address, org.Containerd.Namespace), verr)
			defer r.Close()
		} else {
			check("containerd", "", err)
			r = nil
		}
		cancel()
	}
	imps, _ := config.ImpNames(y)
	runtimes(ctx, check, warn, r, org, usedRuntimes(y, org, imps))
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
	rules, err := policyRules(ctx, y)
	check("policy", y.PolicyPath()+" "+rules, err)
	for _, sc := range secrets(y, home, org, orgErr == nil) {
		check("secret", sc.detail, sc.err)
	}
	for _, im := range imps {
		cfg, err := config.LoadImp(y, im)
		if err == nil && len(cfg.Schedule.Bad) > 0 {
			err = fmt.Errorf("skipped, the rest fires: %w", errors.Join(cfg.Schedule.Bad...))
		}
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
	switch err := health.GatewayUp(org.Gateway.Listen); {
	case orgErr != nil:
		warn("gateway", notChecked)
	case err == nil:
		check("gateway", "impgw answers at "+org.Gateway.Listen, nil)
	default:
		check("gateway", "", err)
	}
	mcpStates, err := mcpserv.ReadStatus(y)
	if err != nil {
		check("mcp", "", err)
		mcpStates = &mcpserv.Status{}
	}
	for _, name := range slices.Sorted(maps.Keys(org.MCP)) {
		spec := org.MCP[name]
		detail := fmt.Sprintf("isolation %s, %s", spec.Isolation, strings.Join(spec.Command, " "))
		for _, st := range mcpStates.Servers {
			if st.Server == name {
				detail += fmt.Sprintf("; %s %s, %d restart(s)", orAll(st.Imp), st.State, st.Restarts)
			}
		}
		check("mcp."+name, detail, mcpserv.Check(home, name, spec))
	}
	if failed > 0 {
		return fmt.Errorf("%d check(s) failed", failed)
	}
	return nil
}

// orAll names the imp a server process serves: all of them when shared.
func orAll(imp string) string {
	if imp == "" {
		return "shared"
	}
	return "for " + imp
}

// usedRuntimes maps each runtime some imp's boxes run under (org.toml's
// default counts, as the next imp takes it) to those imps.
func usedRuntimes(y *yard.Yard, org *config.Org, imps []string) map[string][]string {
	used := map[string][]string{org.RuntimeOf(&config.Imp{}): nil}
	for _, name := range imps {
		if im, err := config.LoadImp(y, name); err == nil {
			rt := org.RuntimeOf(im)
			used[rt] = append(used[rt], name)
		}
	}
	return used
}

// runtimes checks each runtime: installed and its version, a probe box
// started under it (when containerd answers, r not nil), and for runc the
// 2025 escape fixes. A runtime no imp uses may be missing; one in use may
// not.
func runtimes(ctx context.Context, check func(string, string, error), warn func(string, string), r *box.Runner, org *config.Org, used map[string][]string) {
	for _, name := range box.Runtimes {
		imps, inUse := used[name]
		rt, err := box.LookRuntime(name)
		if err != nil {
			if inUse {
				check(name, "", fmt.Errorf("%w, and %s", err, usedBy(org, name, imps)))
			} else {
				warn(name, fmt.Sprintf("not installed (apt-get install %s); no imp uses it", name))
			}
			continue
		}
		detail := fmt.Sprintf("%s at %s", rt.Version, rt.Path)
		if rt.Platform != "" {
			detail += ", platform " + rt.Platform
		}
		if inUse {
			detail += "; " + usedBy(org, name, imps)
		}
		if r == nil {
			check(name, detail+"; no probe box, containerd does not answer", nil)
		} else {
			pctx, cancel := context.WithTimeout(ctx, 30*time.Second)
			took, err := r.Probe(pctx, name)
			cancel()
			if err != nil {
				check(name, "", fmt.Errorf("%s: a probe box does not start: %w", detail, err))
			} else {
				check(name, fmt.Sprintf("%s; a probe box started in %d ms", detail, took.Milliseconds()), nil)
			}
		}
		if fixed, ok := box.EscapeFixed(rt.Version); name == box.RunC && ok && !fixed && inUse {
			warn(name, fmt.Sprintf("runc %s lacks the fixes for the container escapes %s (fixed in 1.2.8 and 1.3.3): "+
				"the hardening narrows them; for imps you do not fully trust set runtime = \"runsc\" (gVisor) in their imp.toml", rt.Version, box.EscapeCVEs))
		}
	}
}

// usedBy says which imps a runtime serves.
func usedBy(org *config.Org, name string, imps []string) string {
	var who []string
	if org.RuntimeOf(&config.Imp{}) == name {
		who = append(who, "the default")
	}
	if len(imps) > 0 {
		who = append(who, "used by "+strings.Join(imps, ", "))
	}
	return strings.Join(who, ", ")
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

// policyRules checks the policy: there, of a schema this impyard reads,
// and every rule valid. The rules are judged by impgw judge, which loads
// them the way impgw serve does, run as its own process so that impsup
// links no judge. It says how many rules there are.
func policyRules(ctx context.Context, y *yard.Yard) (string, error) {
	path := y.PolicyPath()
	b, err := y.ReadAuthority(path)
	if err != nil {
		return "", err
	}
	if err := store.CheckSchema(path, b, "policy", 1); err != nil {
		return "", err
	}
	var p policyNames
	if err := json.Unmarshal(b, &p); err != nil {
		return "", fmt.Errorf("%s: %w", path, err)
	}
	gw, err := sibling("impgw")
	if err != nil {
		return "", fmt.Errorf("%s: its rules are not checked: %w", path, err)
	}
	cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	var stdout, stderr bytes.Buffer
	cmd := exec.CommandContext(cctx, gw, "judge", "--root", y.Root, "--json", "GET", "https://doctor.invalid/")
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err = cmd.Run()
	var verdict struct {
		Verdict string `json:"verdict"`
	}
	if jerr := json.Unmarshal(stdout.Bytes(), &verdict); jerr == nil && verdict.Verdict != "" {
		return fmt.Sprintf("%d rules, each valid (impgw judge)", len(p.Rules)), nil
	}
	if why := strings.TrimSpace(stderr.String()); why != "" {
		why, _, _ = strings.Cut(why, "\n")
		return "", errors.New(strings.TrimPrefix(why, "impgw: error: "))
	}
	return "", fmt.Errorf("%s: impgw judge could not check it: %w", path, err)
}

// policyNames is what doctor reads of the policy itself: the rules, to
// count them, and the secrets they inject, to check those files.
type policyNames struct {
	Rules []struct {
		Name   string `json:"name"`
		Inject *struct {
			Secret string `json:"secret"`
		} `json:"inject"`
	} `json:"rules"`
}

// sibling finds another impyard binary: beside this one first, as make
// install and the release put them, then on PATH.
func sibling(name string) (string, error) {
	if self, err := os.Executable(); err == nil {
		p := filepath.Join(filepath.Dir(self), name)
		if fi, err := os.Stat(p); err == nil && fi.Mode().IsRegular() && fi.Mode()&0o111 != 0 {
			return p, nil
		}
	}
	return exec.LookPath(name)
}

// secretCheck is doctor's line for one secret a configuration names.
type secretCheck struct {
	detail string
	err    error
}

// Doctor's errors about a secret file, for a caller that tells them apart.
var (
	errSecretMissing = errors.New("secret named but missing")
	errSecretOpen    = errors.New("secret readable by others")
)

// secrets checks every secret a configuration names, the policy's
// injections and org.toml's inbound sources (when org.toml loads): each
// is a non-empty file of mode 0600 or stricter in a secrets/ folder of
// mode 0700 or stricter.
func secrets(y *yard.Yard, h string, org *config.Org, orgOK bool) []secretCheck {
	users := map[string][]string{}
	if b, err := y.ReadAuthority(y.PolicyPath()); err == nil {
		var p policyNames
		if json.Unmarshal(b, &p) == nil {
			for i, r := range p.Rules {
				if r.Inject != nil && r.Inject.Secret != "" {
					users[r.Inject.Secret] = append(users[r.Inject.Secret], fmt.Sprintf("policy rules[%d] %q", i, r.Name))
				}
			}
		}
	}
	if orgOK {
		for _, s := range org.Inbound.Sources {
			if s.Secret != "" {
				users[s.Secret] = append(users[s.Secret], "inbound source "+s.Name)
			}
		}
	}
	dir := home.Dir(h)
	var out []secretCheck
	dirErr := private(dir.Secrets(), 0o700)
	for _, name := range slices.Sorted(maps.Keys(users)) {
		p := dir.Secret(name)
		by := strings.Join(users[name], ", ")
		var err error
		if strings.ContainsAny(name, `/\`) || strings.HasPrefix(name, ".") {
			err = fmt.Errorf("secret %q, named by %s, is not a plain name", name, by)
		} else if err = private(p, 0o600); err == nil {
			err = dirErr
		}
		if err != nil {
			out = append(out, secretCheck{err: fmt.Errorf("%w (named by %s)", err, by)})
			continue
		}
		out = append(out, secretCheck{detail: p + " for " + by})
	}
	return out
}

// private checks that path exists, is not empty when a file, and allows
// no more than mode; a secret others can read is one they hold.
func private(path string, mode os.FileMode) error {
	fi, err := os.Stat(path)
	if errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("%w: %s", errSecretMissing, path)
	}
	if err != nil {
		return err
	}
	if perm := fi.Mode().Perm(); perm&^mode != 0 {
		return fmt.Errorf("%w: %s is mode %04o, want %04o (chmod %o %s)", errSecretOpen, path, perm, mode, mode, path)
	}
	if fi.Mode().IsRegular() && fi.Size() == 0 {
		return fmt.Errorf("secret %s is empty", path)
	}
	return nil
}
