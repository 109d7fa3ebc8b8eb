package executor

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/impyard/impyard/lib/gate"
	"github.com/impyard/impyard/lib/ledger"
	"github.com/impyard/impyard/lib/state"
	"github.com/impyard/impyard/lib/store"
)

func lastWhy(g *gate.Gate) string { return g.History[len(g.History)-1].Why }

// ledgerLines reads ledger/<imp>.jsonl as it is on disk.
func ledgerLines(t *testing.T, r *Runner, imp string) []ledger.Entry {
	t.Helper()
	var out []ledger.Entry
	if _, err := store.ReadJSONL(r.Yard.Path("ledger", imp+".jsonl"), func(line []byte) error {
		var e ledger.Entry
		if err := json.Unmarshal(line, &e); err != nil {
			t.Fatal(err)
		}
		out = append(out, e)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	return out
}

// A command that ran and failed may have had its effect: a gate whose
// executor is not idempotent fails as "outcome unknown" after one run; an
// idempotent one is retried and fails with the plain reason.
func TestExecuteFailedCommand(t *testing.T) {
	for _, c := range []struct {
		name       string
		idempotent bool
		runs       int
		prefix     string
	}{
		{"not idempotent", false, 1, "outcome unknown: "},
		{"idempotent", true, 3, ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			runs := filepath.Join(t.TempDir(), "runs")
			org := "[executors.notify]\nkind = \"message-user\"\ntimeout = \"20s\"\nretries = 2\ncost = 0.5\n" +
				"command = [\"sh\", \"-c\", \"echo ran >> " + runs + "; echo boom; exit 3\"]\n"
			if c.idempotent {
				org += "idempotent = true\n"
			}
			r := setup(t, org)
			r.Backoff = time.Millisecond
			g := approved(t, r, "notify", `{"text":"hi"}`)
			out, err := r.Execute(context.Background(), g.ID)
			if err != nil {
				t.Fatal(err)
			}
			if want := c.prefix + "sh: exit status 3: boom\n"; out.State != state.Failed || lastWhy(out) != want {
				t.Errorf("got %s %q, want failed with %q", out.State, lastWhy(out), want)
			}
			b, _ := os.ReadFile(runs)
			if n := strings.Count(string(b), "ran\n"); n != c.runs {
				t.Errorf("the command ran %d times, want %d", n, c.runs)
			}
			// The owner's log has the notice once however often the
			// command ran; a failed action costs nothing.
			if n := len(notices(t, r)); n != 1 {
				t.Errorf("%d notices, want 1", n)
			}
			if l := ledgerLines(t, r, "yuko"); len(l) != 0 {
				t.Errorf("a failed gate was debited: %+v", l)
			}
		})
	}
}

func TestExecuteDebitsItsCost(t *testing.T) {
	r := setup(t, "[executors.message-user]\nkind = \"message-user\"\ncost = 0.25\n")
	g := approved(t, r, "message-user", `{"text":"hi"}`)
	out, err := r.Execute(context.Background(), g.ID)
	if err != nil || out.State != state.Executed {
		t.Fatalf("%v %v", out, err)
	}
	l := ledgerLines(t, r, "yuko")
	if len(l) != 1 || l[0].Gate != g.ID || l[0].Cost != 0.25 || l[0].Kind != ledger.Action || l[0].Intent != "message-user" || l[0].Imp != "yuko" {
		t.Errorf("ledger %+v, want one action of 0.25 for %s", l, g.ID)
	}
	if got := lastWhy(out); got != "message-user: appended to "+r.Yard.Path("notifications.jsonl") {
		t.Errorf("executed with %q", got)
	}

	// A free executor writes no ledger line.
	r = setup(t, "[executors.message-user]\nkind = \"message-user\"\n")
	g = approved(t, r, "message-user", `{"text":"hi"}`)
	if out, err := r.Execute(context.Background(), g.ID); err != nil || out.State != state.Executed {
		t.Fatalf("%v %v", out, err)
	}
	if _, err := os.Stat(r.Yard.Path("ledger", "yuko.jsonl")); !os.IsNotExist(err) {
		t.Errorf("a free action touched the ledger: %v", err)
	}
}

// An interrupted idempotent execution whose payload was edited on disk
// since is not resumed: it fails, and nothing is sent.
func TestExecuteResumeRechecksThePayload(t *testing.T) {
	r := setup(t, "[executors.message-user]\nkind = \"message-user\"\n")
	g := approved(t, r, "message-user", `{"text":"send this"}`)
	if _, err := gate.Move(r.Yard, g.ID, gate.Change{To: state.Executing, By: Actor}); err != nil {
		t.Fatal(err)
	}
	p := r.Yard.Path("gates", "resolved", g.ID+".json")
	b, _ := os.ReadFile(p)
	os.WriteFile(p, []byte(strings.Replace(string(b), "send this", "send that", 1)), 0o640)
	out, err := r.Execute(context.Background(), g.ID)
	if err != nil || out.State != state.Failed || !strings.HasSuffix(lastWhy(out), "(edited after filing?); not resumed") {
		t.Errorf("got %v %v, want failed, nothing sent", out, err)
	}
	if n := len(notices(t, r)); n != 0 {
		t.Errorf("%d notices sent for an edited payload", n)
	}
}

// A gate another executor holds is left alone.
func TestExecuteBusy(t *testing.T) {
	r := setup(t, "[executors.message-user]\nkind = \"message-user\"\n")
	g := approved(t, r, "message-user", `{"text":"hi"}`)
	lockDir, err := store.MkdirAll(r.Yard.Root, "gates/.exec")
	if err != nil {
		t.Fatal(err)
	}
	unlock, ok, err := store.TryLock(filepath.Join(lockDir, g.ID+".lock"))
	if err != nil || !ok {
		t.Fatal(err)
	}
	out, err := r.Execute(context.Background(), g.ID)
	if err != ErrBusy || out.State != state.Approved || len(notices(t, r)) != 0 {
		t.Errorf("got %v %v, want ErrBusy and the gate untouched", out, err)
	}
	unlock()
	if out, err := r.Execute(context.Background(), g.ID); err != nil || out.State != state.Executed {
		t.Errorf("after the lock is released: %v %v", out, err)
	}
}

// Each outcome is logged once, as it happened: executed or failed, never
// both.
func TestExecuteLogsItsOutcome(t *testing.T) {
	r := setup(t, "[executors.message-user]\nkind = \"message-user\"\n")
	var logs []string
	r.Logf = func(format string, a ...any) { logs = append(logs, fmt.Sprintf(format, a...)) }
	g := approved(t, r, "message-user", `{"text":"hi"}`)
	if _, err := r.Execute(context.Background(), g.ID); err != nil {
		t.Fatal(err)
	}
	want := []string{"gate " + g.ID + ": executed (message-user: appended to " + r.Yard.Path("notifications.jsonl") + ")"}
	if !slices.Equal(logs, want) {
		t.Errorf("logged %q, want %q", logs, want)
	}
	logs = nil
	f := approved(t, r, "message-user", `{"text":"send this"}`)
	p := r.Yard.Path("gates", "resolved", f.ID+".json")
	b, _ := os.ReadFile(p)
	os.WriteFile(p, []byte(strings.Replace(string(b), "send this", "send that", 1)), 0o640)
	if _, err := r.Execute(context.Background(), f.ID); err != nil {
		t.Fatal(err)
	}
	if len(logs) != 1 || !strings.HasPrefix(logs[0], "gate "+f.ID+": failed: ") || !strings.Contains(logs[0], "no longer matches its sha256") {
		t.Errorf("logged %q, want one failure", logs)
	}
}
