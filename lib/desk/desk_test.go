package desk

import (
	"encoding/json"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/impyard/impyard/internal/approvaltest"
	"github.com/impyard/impyard/lib/gate"
	"github.com/impyard/impyard/lib/pause"
	"github.com/impyard/impyard/lib/state"
	"github.com/impyard/impyard/lib/yard"
	"github.com/impyard/impyard/lib/yard/yardtest"
)

const org = `
[executors.email-send]
kind = "http"
method = "PUT"
url = "https://api.resend.com/emails"
`

func newYard(t *testing.T) *yard.Yard {
	t.Helper()
	y := yardtest.New(t)
	if err := os.WriteFile(y.Path("org.toml"), []byte(org), 0o640); err != nil {
		t.Fatal(err)
	}
	return y
}

func file(t *testing.T, y *yard.Yard, intent string, tr *gate.Trust) *gate.Gate {
	t.Helper()
	g, err := gate.File(y, gate.FileOptions{Imp: "yuko", Intent: intent, Payload: []byte(`{"to":["team@ourco.com"]}`), By: "yuko", Actor: "test", Trust: tr})
	if err != nil {
		t.Fatal(err)
	}
	return g
}

// A pending gate: where it goes, why it waits, its payload matches, no
// approval to check, and the command that approves exactly its sha256.
func TestInspectPending(t *testing.T) {
	y := newYard(t)
	g := file(t, y, "email-send", &gate.Trust{Level: "gate", Why: "no trust entry matches: gated for a human"})
	r := Inspect(y, t.TempDir(), g)
	if !r.PayloadMatches || r.PayloadError != "" {
		t.Errorf("payload: %v %q", r.PayloadMatches, r.PayloadError)
	}
	if d := r.Destination; d == nil || d.Kind != "http" || d.Method != "PUT" || d.URL != "https://api.resend.com/emails" {
		t.Errorf("destination %+v (%s)", d, r.DestinationError)
	}
	if r.Verdict != "gated: no trust entry matches: gated for a human" {
		t.Errorf("verdict %q", r.Verdict)
	}
	if r.Verifies != nil {
		t.Errorf("a pending gate's approval checked: %v", *r.Verifies)
	}
	if want := "impgate approve --sha " + g.SHA256[:16] + " " + g.ID; r.Approve != want {
		t.Errorf("approve %q, want %q", r.Approve, want)
	}
	b, _ := json.Marshal(r)
	for _, f := range []string{`"payload_matches":true`, `"destination":{"kind":"http"`, `"trust_verdict":"gated: `, `"approve_command":"impgate approve --sha `, `"sha256":"` + g.SHA256} {
		if !strings.Contains(string(b), f) {
			t.Errorf("JSON lacks %s: %s", f, b)
		}
	}
}

// A payload edited after filing is reported, and nothing offers to
// approve it.
func TestInspectTampered(t *testing.T) {
	y := newYard(t)
	g := file(t, y, "email-send", nil)
	g.Payload = json.RawMessage(`{"to":["attacker@evil.com"]}`)
	r := Inspect(y, t.TempDir(), g)
	if r.PayloadMatches || !strings.Contains(r.PayloadError, "no longer matches its sha256") || r.Approve != "" {
		t.Errorf("tampered: %v %q approve %q", r.PayloadMatches, r.PayloadError, r.Approve)
	}
}

// An approval is checked against the keys of the home given: it verifies
// with the home that signed it, not with another.
func TestInspectApproval(t *testing.T) {
	y := newYard(t)
	home := t.TempDir()
	g := approvaltest.Approve(t, y, home, file(t, y, "email-send", nil).ID)
	r := Inspect(y, home, g)
	if r.Verifies == nil || !*r.Verifies || !strings.HasPrefix(r.Key, "owner ed25519:") || r.Approve != "" {
		t.Errorf("signed approval: %+v", r)
	}
	other := t.TempDir()
	approvaltest.Key(t, other)
	r = Inspect(y, other, g)
	if r.Verifies == nil || *r.Verifies || r.Error == "" {
		t.Errorf("approval checked against another home's key: %+v", r)
	}
}

// No executor for the intent: the destination says so.
func TestInspectNoExecutor(t *testing.T) {
	y := newYard(t)
	g := file(t, y, "open-pr", nil)
	r := Inspect(y, t.TempDir(), g)
	if r.Destination != nil || !strings.Contains(r.DestinationError, `no executor is configured for intent "open-pr"`) {
		t.Errorf("%+v %q", r.Destination, r.DestinationError)
	}
}

func TestVerdict(t *testing.T) {
	at := time.Now()
	for _, tc := range []struct {
		g    gate.Gate
		want string
	}{
		{gate.Gate{Trust: &gate.Trust{Level: "auto", Entry: "org.toml [[trust]] #1", Why: "org.toml [[trust]] #1: level auto"}}, "auto-approved by org.toml [[trust]] #1: level auto"},
		{gate.Gate{Trust: &gate.Trust{Level: "gate", Entry: "org.toml [[trust]] #2", Why: "org.toml [[trust]] #2: level gate"}}, "gated by org.toml [[trust]] #2: level gate"},
		{gate.Gate{Trust: &gate.Trust{Level: "gate", Entry: "org.toml [[trust]] #3", Why: "executor x declares no fields"}}, "gated by org.toml [[trust]] #3: executor x declares no fields"},
		{gate.Gate{Trust: &gate.Trust{Level: "auto", Entry: "e", Why: "matched"}}, "auto-approved by e: matched"},
		{gate.Gate{Trust: &gate.Trust{Level: "gate", Why: "no trust entry matches: gated for a human"}}, "gated: no trust entry matches: gated for a human"},
		{gate.Gate{History: []state.Transition{{To: state.Filed, By: "yuko", At: at}, {From: state.Filed, To: state.Approved, By: "trust: org.toml [[trust]] #1", At: at}}}, "auto-approved by org.toml [[trust]] #1 (its reason was not recorded)"},
		{gate.Gate{History: []state.Transition{{To: state.Filed, By: "yuko", At: at}}}, "not recorded (filed before gates recorded their trust verdict)"},
	} {
		if got := Verdict(&tc.g); got != tc.want {
			t.Errorf("got %q, want %q", got, tc.want)
		}
	}
}

// A trust-promote gate shows the entry it proposes and the gates it
// rests on; one it names that is gone, or a payload that is not an entry,
// is said so.
func TestInspectPromotion(t *testing.T) {
	y := newYard(t)
	rest := file(t, y, "email-send", nil)
	approvaltest.Approve(t, y, t.TempDir(), rest.ID)
	body := `{"intent":"email-send","match":{"to":"*@ourco.com"},"free":["body"],"level":"auto","earned":true,"gates":["` + rest.ID + `","g-0000000000000001"]}`
	g, err := gate.File(y, gate.FileOptions{Imp: "yuko", Intent: "trust-promote", Payload: []byte(body), By: "impexec", Actor: "impexec"})
	if err != nil {
		t.Fatal(err)
	}
	r := Inspect(y, t.TempDir(), g)
	p := r.Promotion
	if p == nil || p.Error != "" || !strings.Contains(p.TOML, `match = { to = "*@ourco.com" }`) || len(p.Gates) != 2 {
		t.Fatalf("promotion %+v", p)
	}
	if strings.Join(p.Wide, "; ") != "to: any address at ourco.com, not only the addresses approved; body: free, any value" {
		t.Errorf("wide %q", p.Wide)
	}
	if p.Gates[0].ID != rest.ID || p.Gates[0].State != state.Approved || p.Gates[0].By == "" || p.Gates[0].Error != "" || p.Gates[1].Error == "" {
		t.Errorf("gates %+v", p.Gates)
	}
	if r.Destination == nil || r.Destination.Kind != "trust-promote" {
		t.Errorf("destination %+v %s", r.Destination, r.DestinationError)
	}
	bad, err := gate.File(y, gate.FileOptions{Imp: "yuko", Intent: "trust-promote", Payload: []byte(`{"intent":"email-send","level":"gate"}`), By: "impexec", Actor: "impexec"})
	if err != nil {
		t.Fatal(err)
	}
	if p := Inspect(y, t.TempDir(), bad).Promotion; p == nil || !strings.Contains(p.Error, "not an earned trust entry") {
		t.Errorf("bad promotion %+v", p)
	}
	if Inspect(y, t.TempDir(), rest).Promotion != nil {
		t.Errorf("an email gate shows a promotion")
	}
}

// An approved gate of a paused imp is held by impexec until resume: the
// desk says so, naming the pause, as impsup status does. A gate of an
// imp not paused is not marked.
func TestInspectHeldByPause(t *testing.T) {
	y := newYard(t)
	home := t.TempDir()
	g := approvaltest.Approve(t, y, home, file(t, y, "email-send", nil).ID)
	if r := Inspect(y, home, g); r.Waiting != "" {
		t.Fatalf("not paused, yet waiting: %q", r.Waiting)
	}
	if _, err := pause.Pause(y, pause.Change{Imps: []string{"nova"}, By: "alice", At: time.Now(), Reason: "another imp"}); err != nil {
		t.Fatal(err)
	}
	if r := Inspect(y, home, g); r.Waiting != "" {
		t.Fatalf("another imp paused, yet waiting: %q", r.Waiting)
	}
	if _, err := pause.Pause(y, pause.Change{Imps: []string{"yuko"}, By: "alice", At: time.Now(), Reason: "travelling"}); err != nil {
		t.Fatal(err)
	}
	r := Inspect(y, home, g)
	if !strings.HasPrefix(r.Waiting, "impexec holds it, approved, nothing sent: imp yuko is paused") || !strings.Contains(r.Waiting, "travelling") {
		t.Errorf("waiting %q, want held by yuko's pause", r.Waiting)
	}
}
