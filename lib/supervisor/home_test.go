package supervisor

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/impyard/impyard/lib/box"
	"github.com/impyard/impyard/lib/config"
	"github.com/impyard/impyard/lib/id"
	"github.com/impyard/impyard/lib/pause"
	"github.com/impyard/impyard/lib/queue"
	"github.com/impyard/impyard/lib/state"
)

// TestDispatchRefusesHome: an imp.toml naming IMPYARD_HOME as its repo,
// with the owner's uid as its user, or a rootfs that holds it, or a code
// task whose repository is a symlink into it, fails the task at dispatch,
// naming the key, before anything is made: no box, no run, no token.
func TestDispatchRefusesHome(t *testing.T) {
	for _, tc := range []struct {
		name, imp string
		task      queue.AddOptions
		key       string
	}{
		{"repo is IMPYARD_HOME", "rootfs = %[2]q\ncommand = [\"x\"]\nrepo = %[1]q\nuser = \"1000:1000\"\n", queue.AddOptions{Text: "read"}, "repo"},
		{"rootfs holds it", "rootfs = %[3]q\ncommand = [\"x\"]\n", queue.AddOptions{Text: "read"}, "rootfs"},
		{"a code task's repo links into it", "rootfs = %[2]q\ncommand = [\"x\"]\n", queue.AddOptions{Text: "read", Kind: queue.Code, Repo: "LINK"}, "repo"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, _ := newSup(t)
			if err := os.MkdirAll(filepath.Join(s.Home, "keys"), 0o700); err != nil {
				t.Fatal(err)
			}
			link := filepath.Join(t.TempDir(), "repo")
			if err := os.Symlink(filepath.Join(s.Home, "keys"), link); err != nil {
				t.Fatal(err)
			}
			gw := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
			defer gw.Close()
			writeImp(t, s.Yard, "yuko", fmt.Sprintf(tc.imp, s.Home, t.TempDir(), filepath.Dir(s.Home)))
			opts := tc.task
			opts.Imp, opts.By, opts.Actor = "yuko", "alice", "test"
			if opts.Repo == "LINK" {
				opts.Repo = link
			}
			taskID, _, err := queue.Add(s.Yard, opts)
			if err != nil {
				t.Fatal(err)
			}
			org := &config.Org{}
			org.Supervisor.Concurrency = 1
			org.Gateway.Listen = strings.TrimPrefix(gw.URL, "http://")
			if n, err := s.dispatch(context.Background(), org, &pause.State{}); n != 0 || err != nil {
				t.Fatalf("dispatch: %d started, %v; want the task failed, nothing started", n, err)
			}
			task, _ := queue.Get(s.Yard, taskID)
			if task.State != state.Failed || !strings.Contains(task.Reason, tc.key+" ") || !strings.Contains(task.Reason, box.ErrHome.Error()) {
				t.Fatalf("task is %s: %q; want failed naming %s and IMPYARD_HOME", task.State, task.Reason, tc.key)
			}
			if runs, err := s.Yard.IDs(id.Run, "", "runs"); err != nil || len(runs) != 0 {
				t.Fatalf("runs made: %v, %v; want none", runs, err)
			}
		})
	}
}

// TestHomelessSpec: the spec as mounted is checked once more, whatever
// was checked before: every mount but the CA certificate read-only.
func TestHomelessSpec(t *testing.T) {
	home := t.TempDir()
	ca := filepath.Join(home, "ca", "ca.crt")
	if err := os.MkdirAll(filepath.Dir(ca), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(ca, []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	work := t.TempDir()
	good := box.Spec{Rootfs: work, Mounts: []box.Mount{{Source: work, Target: BoxWorkspace}, {Source: ca, Target: BoxCA, ReadOnly: true}}}
	if _, err := homeless(home, ca, good); err != nil {
		t.Fatalf("the CA read-only: %v", err)
	}
	for name, spec := range map[string]box.Spec{
		"the CA writable":  {Rootfs: work, Mounts: []box.Mount{{Source: ca, Target: BoxCA}}},
		"a repo under it":  {Rootfs: work, Mounts: []box.Mount{{Source: filepath.Dir(ca), Target: BoxRepo, ReadOnly: true}}},
		"rootfs is home's": {Rootfs: filepath.Dir(home)},
	} {
		if _, err := homeless(home, ca, spec); !strings.Contains(fmt.Sprint(err), box.ErrHome.Error()) {
			t.Errorf("%s: %v; want it refused", name, err)
		}
	}
}

// TestDispatchKeepsLastGoodImp: a writer of the yard's imp.toml naming
// IMPYARD_HOME as repo is refused, and the imp's last good imp.toml stays
// in force: the task goes on as the owner configured it (here to the
// missing gateway CA, which leaves it waiting), and the refusal is logged
// once, naming the file.
func TestDispatchKeepsLastGoodImp(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to give a file to another uid")
	}
	s, _ := newSup(t)
	var logged []string
	s.Logf = func(f string, a ...any) { logged = append(logged, fmt.Sprintf(f, a...)) }
	gw := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	defer gw.Close()
	rootfs := t.TempDir()
	writeImp(t, s.Yard, "yuko", fmt.Sprintf("rootfs = %q\ncommand = [\"x\"]\n", rootfs))
	taskID, _, err := queue.Add(s.Yard, queue.AddOptions{Imp: "yuko", Text: "digest", By: "alice", Actor: "test"})
	if err != nil {
		t.Fatal(err)
	}
	org := &config.Org{}
	org.Supervisor.Concurrency = 1
	org.Gateway.Listen = strings.TrimPrefix(gw.URL, "http://")
	caMissing := filepath.Join(s.Home, "ca", "ca.crt")
	if _, err := s.dispatch(context.Background(), org, &pause.State{}); err == nil || !strings.Contains(err.Error(), caMissing) {
		t.Fatalf("first pass: %v; want the missing CA", err)
	}
	p := config.ImpPath(s.Yard, "yuko")
	writeImp(t, s.Yard, "yuko", fmt.Sprintf("rootfs = %q\ncommand = [\"x\"]\nrepo = %q\nuser = \"1000:1000\"\n", rootfs, s.Home))
	if err := os.Chown(p, 65534, 65534); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if _, err := s.dispatch(context.Background(), org, &pause.State{}); err == nil || !strings.Contains(err.Error(), caMissing) {
			t.Fatalf("after the writer's edit: %v; want the missing CA, as the last good imp.toml goes", err)
		}
	}
	if task, _ := queue.Get(s.Yard, taskID); task.State != state.Waiting {
		t.Fatalf("task is %s: %q; want it waiting", task.State, task.Reason)
	}
	n := 0
	for _, l := range logged {
		if strings.Contains(l, p+" is owned by uid 65534") && strings.Contains(l, "last good") {
			n++
		}
	}
	if n != 1 {
		t.Fatalf("refusal logged %d times, want once: %q", n, logged)
	}
}
