package tests

import (
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/impyard/impyard/internal/crashstate"
	"github.com/impyard/impyard/lib/home"
	runrec "github.com/impyard/impyard/lib/run"
	"github.com/impyard/impyard/lib/state"
	"github.com/impyard/impyard/lib/store"
)

// TestCrashStatesDispatch: impsup once dispatching a queued task into a
// real box (the test containerd), with the gateway it waits for traced
// beside it, the box running to its end. A power cut takes containerd's
// tasks and every box with it, so each state is recovered the way the
// yard comes back: impsup once on the tree with no box left and the
// gateway not up yet. In every state: no torn file; the task is there; an
// acknowledged pass's task is done; after the recovery no task or run is
// left running, no token of a run still looks up (a box that kept its
// token must not be let back in), and every transition of the task and
// its runs has exactly one record in the journal and the audit log.
func TestCrashStatesDispatch(t *testing.T) {
	boxes.Need(t)
	r := newCrashRig(t)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	listen := l.Addr().String()
	l.Close()
	ns := fmt.Sprintf("crash-%d", time.Now().UnixNano()%1e9)
	org := crashOrg + fmt.Sprintf("\n[gateway]\nlisten = %q\nwait = \"10s\"\n[containerd]\naddress = %q\nnamespace = %q\n", listen, boxes.Sock, ns)
	if err := os.WriteFile(r.y.Path("org.toml"), []byte(org), 0o640); err != nil {
		t.Fatal(err)
	}
	imp := fmt.Sprintf("rootfs = %q\ncommand = [\"/bin/true\"]\nceiling = \"60s\"\n", boxes.Rootfs)
	if err := os.WriteFile(r.y.Path("imps", "yuko", "imp.toml"), []byte(imp), 0o640); err != nil {
		t.Fatal(err)
	}
	os.MkdirAll(r.y.Path("policies"), 0o750)
	if err := os.WriteFile(r.y.PolicyPath(), []byte(`{"schema":"impyard.policy/1","rules":[]}`), 0o640); err != nil {
		t.Fatal(err)
	}
	if _, err := r.run(bin, false, "impgw", "ca", "init"); err != nil {
		t.Fatal(err)
	}
	out, err := r.run(bin, false, "impq", "add", "--imp", "yuko", "the task")
	if err != nil {
		t.Fatal(err)
	}
	id := strings.TrimSpace(out)
	t.Cleanup(func() { removeBoxes(ns) })

	h, err := crashstate.Load(r.base)
	if err != nil {
		t.Fatal(err)
	}
	_, stop := r.serve(t, crashBin, listen, true)
	out, err = r.run(crashBin, true, "impsup", "once")
	stop()
	if err != nil {
		t.Fatal(err)
	}
	if err := crashstate.Mark(r.trace, "ack"); err != nil {
		t.Fatal(err)
	}
	if tk := r.task(id); tk == nil || tk.State != state.Done || len(tk.Runs) != 1 {
		t.Fatalf("the traced pass (%s) left the task %+v, want done after one run", strings.TrimSpace(out), tk)
	}
	r.replay(t, h)
	checkStates(t, r, h, func(s *crashstate.State) []string {
		bad := r.torn()
		tk := r.task(id)
		if tk == nil {
			return append(bad, "the task is missing")
		}
		if s.Marked("ack") && tk.State != state.Done {
			bad = append(bad, "the acknowledged pass's task is "+tk.State)
		}
		// The gateway is not up: the recovery pass settles what the cut
		// left and starts nothing (exit 111 when a task waits for it).
		if _, err := r.run(bin, false, "impsup", "once"); err != nil {
			var exit *exec.ExitError
			if !errors.As(err, &exit) || exit.ExitCode() != 111 {
				return append(bad, "the recovery pass fails: "+firstLine(err.Error()))
			}
		}
		if tk := r.task(id); tk == nil || tk.State == state.Running {
			bad = append(bad, "after the recovery the task is not settled")
		}
		ids, _ := runrec.List(r.y)
		for _, rid := range ids {
			// A run directory without run.json is a run never filed (the
			// cut came before its first write was durable): nothing reads it
			// as a run.
			if rr, err := runrec.Read(r.y, rid); err != nil && !store.IsNotExist(err) {
				bad = append(bad, "a run is unreadable after the recovery")
			} else if err == nil && rr.Live() {
				bad = append(bad, "after the recovery a run is "+rr.State)
			}
		}
		bad = append(bad, r.runTokens()...)
		return append(bad, r.records()...)
	})
}

// runTokens names each token left in IMPYARD_HOME that was issued for a
// run: after a recovery no run is live, so none may remain.
func (r *crashRig) runTokens() []string {
	d, err := home.Dir(r.home).Tokens()
	if err != nil {
		return []string{"the tokens directory: " + err.Error()}
	}
	var bad []string
	entries, _ := os.ReadDir(d.Path())
	for _, e := range entries {
		b, err := store.ReadFile(filepath.Join(d.Path(), e.Name()))
		var s struct {
			Run string `json:"run"`
		}
		if err == nil && json.Unmarshal(b, &s) == nil && s.Run != "" {
			bad = append(bad, "a token of a run that is not live still looks up")
		}
	}
	return bad
}
