package box

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/impyard/impyard/lib/netns"
)

func TestEscapeFixed(t *testing.T) {
	for v, want := range map[string]bool{
		"1.1.5+ds1": false, "1.1.15": false, "1.2.0": false, "1.2.7": false, "1.2.8": true,
		"1.2.9+ds1": true, "1.3.0": false, "1.3.2": false, "1.3.3": true, "1.4.0": true, "2.0.0": true, "0.9.1": false,
	} {
		got, ok := EscapeFixed(v)
		if !ok || got != want {
			t.Errorf("EscapeFixed(%q) = %v, %v; want %v, true", v, got, ok, want)
		}
	}
	for _, v := range []string{"", "unknown", "1.2", "1.x.3"} {
		if _, ok := EscapeFixed(v); ok {
			t.Errorf("EscapeFixed(%q) read a version", v)
		}
	}
}

func TestParseVersion(t *testing.T) {
	for out, want := range map[string]string{
		"runc version 1.1.5+ds1\ncommit: 1.1.5+ds1-1+deb12u1\n": "1.1.5+ds1",
		"crun version 1.8.1\ncommit: f8a096be\n":                "1.8.1",
		"runsc version 0.0~20221219.0\nspec: 1.0.2-dev":         "0.0~20221219.0",
		"odd\n": "odd",
	} {
		if got := parseVersion(out); got != want {
			t.Errorf("parseVersion(%q) = %q, want %q", out, got, want)
		}
	}
}

// A runtime not on PATH is ErrRuntimeMissing naming it; an unknown name
// is ErrSpec naming the ones there are.
func TestLookRuntimeRefused(t *testing.T) {
	t.Setenv("PATH", t.TempDir())
	for _, name := range Runtimes {
		_, err := LookRuntime(name)
		if !errors.Is(err, ErrRuntimeMissing) || !strings.Contains(err.Error(), "apt-get install "+name) {
			t.Errorf("LookRuntime(%s) = %v, want ErrRuntimeMissing naming it", name, err)
		}
	}
	_, err := LookRuntime("kata")
	if !errors.Is(err, ErrSpec) || !strings.Contains(err.Error(), "runc, crun, runsc") {
		t.Errorf("LookRuntime(kata) = %v, want ErrSpec listing the runtimes", err)
	}
	_, err = (&Runner{}).Runtime("crun")
	if !errors.Is(err, ErrRuntimeMissing) {
		t.Errorf("Runner.Runtime(crun) = %v, want ErrRuntimeMissing", err)
	}
}

// The runsc launcher passes the box flags before whatever the shim gives,
// and is rewritten when runsc moves.
func TestRunscLauncher(t *testing.T) {
	old := RuntimeDir
	RuntimeDir = filepath.Join(t.TempDir(), "runtime")
	t.Cleanup(func() { RuntimeDir = old })
	p, err := Runtime{Name: RunSC, Path: "/usr/bin/runsc", Platform: "ptrace"}.Binary()
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(p)
	if err != nil || !strings.Contains(string(b), `exec /usr/bin/runsc --network=host --oci-seccomp --platform=ptrace "$@"`) {
		t.Errorf("launcher %s = %q, %v", p, b, err)
	}
	if st, err := os.Stat(p); err != nil || st.Mode().Perm() != 0o755 {
		t.Errorf("launcher mode: %v, %v", st, err)
	}
	if _, err := (Runtime{Name: RunSC, Path: "/opt/runsc", Platform: "ptrace"}).Binary(); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(p); !strings.Contains(string(b), "exec /opt/runsc ") {
		t.Errorf("launcher not rewritten for a moved runsc: %q", b)
	}
	// A path the shell would split or expand is quoted.
	if _, err := (Runtime{Name: RunSC, Path: "/opt/my runs/$x'y", Platform: "ptrace"}).Binary(); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(p); !strings.Contains(string(b), `exec '/opt/my runs/$x'\''y' --network=host`) {
		t.Errorf("launcher of a path with a space, $ and ': %q", b)
	}
	if p, err := (Runtime{Name: CRun, Path: "/usr/bin/crun"}).Binary(); err != nil || p != "/usr/bin/crun" {
		t.Errorf("crun binary = %q, %v; want the binary itself", p, err)
	}
	// A launcher directory that cannot be made is an error naming it.
	RuntimeDir = "/proc/impyard-runtime"
	if _, err := (Runtime{Name: RunSC, Path: "/usr/bin/runsc", Platform: "ptrace"}).Binary(); err == nil {
		t.Error("launcher in /proc: no error")
	}
}

// A probe box starts under each runtime installed and leaves nothing.
func TestProbe(t *testing.T) {
	eachRuntime(t, func(t *testing.T, rt string) {
		r := runner(t)
		took, err := r.Probe(context.Background(), rt)
		if err != nil || took <= 0 {
			t.Fatalf("Probe(%s) = %s, %v", rt, took, err)
		}
		t.Logf("%s: probe box started in %s", rt, took)
		list, _ := r.List(context.Background())
		for _, in := range list {
			if strings.HasPrefix(in.ID, "probe-"+rt+"-") {
				t.Errorf("probe box left behind: %+v", in)
			}
		}
	})
}

// A probe under a runtime this host lacks says which, and leaves no
// namespace behind.
func TestProbeMissingRuntime(t *testing.T) {
	r := runner(t)
	t.Setenv("PATH", t.TempDir())
	_, err := r.Probe(context.Background(), RunSC)
	if !errors.Is(err, ErrRuntimeMissing) || !strings.Contains(err.Error(), "probe runsc") {
		t.Errorf("Probe without runsc = %v, want ErrRuntimeMissing naming it", err)
	}
	if left, _ := filepath.Glob(filepath.Join(netns.Dir, "probe-*")); len(left) > 0 {
		t.Errorf("namespaces left: %v", left)
	}
}

// A box whose command does not exist fails to start under each runtime,
// and leaves no container or task behind (runsc's created sandbox refuses
// the kill a running box gets).
func TestStartFailsCleanly(t *testing.T) {
	eachRuntime(t, func(t *testing.T, rt string) {
		r := runner(t)
		s := spec(t, rt, "/nonexistent")
		ctx := context.Background()
		b, err := r.Start(ctx, s)
		if err == nil {
			// Some runtimes find out only when the process execs.
			exit, werr := b.Wait(ctx)
			if werr != nil || exit.Code == 0 {
				t.Fatalf("a box of /nonexistent: exit %+v, %v", exit, werr)
			}
			return
		}
		list, _ := r.List(ctx)
		for _, in := range list {
			if in.ID == s.ID {
				t.Errorf("failed start left %+v", in)
			}
		}
	})
}
