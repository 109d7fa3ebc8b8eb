package executor

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"strings"
	"testing"

	"github.com/impyard/impyard/internal/approvaltest"
	"github.com/impyard/impyard/lib/config"
	"github.com/impyard/impyard/lib/gate"
	"github.com/impyard/impyard/lib/state"
	"github.com/impyard/impyard/lib/store"
	"github.com/impyard/impyard/lib/yard/yardtest"
)

func setup(t *testing.T, org string) *Runner {
	t.Helper()
	y := yardtest.New(t)
	os.WriteFile(y.Path("org.toml"), []byte(org), 0o640)
	return &Runner{Yard: y, Home: t.TempDir(), Logf: t.Logf}
}

func approved(t *testing.T, r *Runner, intent, payload string) *gate.Gate {
	t.Helper()
	g, err := gate.File(r.Yard, gate.FileOptions{Imp: "yuko", Intent: intent, Payload: []byte(payload), By: "yuko", Actor: "test"})
	if err != nil {
		t.Fatal(err)
	}
	return approvaltest.Approve(t, r.Yard, r.Home, g.ID)
}

func notices(t *testing.T, r *Runner) []Notice {
	var out []Notice
	store.ReadJSONL(r.Yard.Path("notifications.jsonl"), func(line []byte) error {
		var n Notice
		json.Unmarshal(line, &n)
		out = append(out, n)
		return nil
	})
	return out
}

func TestMessageUser(t *testing.T) {
	r := setup(t, "[executors.message-user]\nkind = \"message-user\"\n")
	g := approved(t, r, "message-user", `{"text":"disk nearly full"}`)
	out, err := r.Execute(context.Background(), g.ID)
	if err != nil || out.State != state.Executed {
		t.Fatalf("%v %v", out, err)
	}
	n := notices(t, r)
	if len(n) != 1 || n[0].Gate != g.ID || string(n[0].Message) != `{"text":"disk nearly full"}` {
		t.Errorf("notices %+v", n)
	}
	var res Result
	json.Unmarshal(out.Result, &res)
	if res.Kind != "message-user" || res.Attempts != 1 {
		t.Errorf("result %+v", res)
	}
	// A terminal gate never changes again, and executing it again sends
	// nothing.
	again, err := r.Execute(context.Background(), g.ID)
	if err != nil || again.State != state.Executed || len(again.History) != len(out.History) || len(notices(t, r)) != 1 {
		t.Errorf("second execute changed something: %v %v", again, err)
	}
}

func TestResumeIdempotent(t *testing.T) {
	r := setup(t, "[executors.message-user]\nkind = \"message-user\"\n")
	g := approved(t, r, "message-user", `{"text":"hi"}`)
	// As if an executor died after marking the gate executing.
	gate.Move(r.Yard, g.ID, gate.Change{To: state.Executing, By: Actor})
	out, err := r.Execute(context.Background(), g.ID)
	if err != nil || out.State != state.Executed || len(notices(t, r)) != 1 {
		t.Fatalf("resume: %v %v", out, err)
	}
}

func TestOutcomeUnknown(t *testing.T) {
	r := setup(t, "[executors.notify]\nkind = \"message-user\"\ncommand = [\"true\"]\n")
	g := approved(t, r, "notify", `{"text":"hi"}`)
	// As if an executor died after its began mark: it may have acted.
	gate.Move(r.Yard, g.ID, gate.Change{To: state.Executing, By: Actor})
	if err := r.markStarted(g.ID); err != nil {
		t.Fatal(err)
	}
	out, err := r.Execute(context.Background(), g.ID)
	if err != nil || out.State != state.Failed || !strings.Contains(out.History[len(out.History)-1].Why, "outcome unknown") {
		t.Fatalf("got %v %v, want failed with outcome unknown", out, err)
	}
	if len(notices(t, r)) != 0 {
		t.Errorf("a non-idempotent interrupted gate was run again")
	}
	if _, err := gate.Move(r.Yard, g.ID, gate.Change{To: state.Approved, By: "alice", Signer: approvaltest.Key(t, r.Home)}); err == nil {
		t.Errorf("a failed gate was approved again")
	}
}

func TestNoExecutorAndTampered(t *testing.T) {
	r := setup(t, "[executors.message-user]\nkind = \"message-user\"\n")
	g := approved(t, r, "email-send", `{"to":["a@b.c"]}`)
	out, err := r.Execute(context.Background(), g.ID)
	if !errors.Is(err, config.ErrNoExecutor) || out.State != state.Approved || !strings.Contains(err.Error(), `no executor is configured for intent "email-send"`) {
		t.Errorf("missing executor: %v %v; want the gate left approved, saying why", out, err)
	}

	g = approved(t, r, "message-user", `{"text":"send this"}`)
	p := r.Yard.Path("gates", "resolved", g.ID+".json")
	b, _ := os.ReadFile(p)
	os.WriteFile(p, []byte(strings.Replace(string(b), "send this", "send that", 1)), 0o640)
	out, err = r.Execute(context.Background(), g.ID)
	if err != nil || out.State != state.Failed || !strings.Contains(out.History[len(out.History)-1].Why, "no longer matches its sha256") {
		t.Errorf("tampered: %v %v", out, err)
	}
	if len(notices(t, r)) != 0 {
		t.Errorf("a tampered payload was sent")
	}
}

func TestBrokenConfigWaits(t *testing.T) {
	r := setup(t, "[executors.message-user]\nkind = \"message-user\"\nbogus = 1\n")
	g := approved(t, r, "message-user", `{"text":"hi"}`)
	out, err := r.Execute(context.Background(), g.ID)
	if err == nil || !strings.Contains(err.Error(), "unknown key") || out.State != state.Approved {
		t.Errorf("broken config: %v %v; want an error and the gate still approved", out, err)
	}
}

func TestFiledIsNotExecuted(t *testing.T) {
	r := setup(t, "[executors.message-user]\nkind = \"message-user\"\n")
	g, _ := gate.File(r.Yard, gate.FileOptions{Imp: "yuko", Intent: "message-user", Payload: []byte(`{}`), By: "yuko", Actor: "test"})
	if _, err := r.Execute(context.Background(), g.ID); err == nil || !strings.Contains(err.Error(), "not approved") {
		t.Errorf("filed gate: %v", err)
	}
	if len(notices(t, r)) != 0 {
		t.Errorf("an unapproved gate was sent")
	}
}

func TestRenderTemplate(t *testing.T) {
	got, err := render(`{"from":"imp@ourco.com","to":{{json .to}},"subject":{{json .subject}}}`, []byte(`{"to":["a@b.c"],"subject":"x \"y\""}`))
	if err != nil || string(got) != `{"from":"imp@ourco.com","to":["a@b.c"],"subject":"x \"y\""}` {
		t.Errorf("%s %v", got, err)
	}
	if _, err := render(`{{.missing}}`, []byte(`{}`)); err == nil {
		t.Errorf("missing key rendered")
	}
}
