package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"io"
	"os"
	"strings"
	"testing"

	"github.com/impyard/impyard/lib/cli"
	"github.com/impyard/impyard/lib/gate"
	"github.com/impyard/impyard/lib/state"
	"github.com/impyard/impyard/lib/yard"
	"github.com/impyard/impyard/lib/yard/yardtest"
)

func reviewYard(t *testing.T, n int) (*yard.Yard, []*gate.Gate) {
	t.Helper()
	y := yardtest.New(t)
	t.Setenv("IMPYARD_HOME", t.TempDir())
	os.WriteFile(y.Path("org.toml"), []byte("[executors.email-send]\nkind = \"http\"\nurl = \"https://api.resend.com/emails\"\n"), 0o640)
	var gs []*gate.Gate
	for i := 0; i < n; i++ {
		g, err := gate.File(y, gate.FileOptions{Imp: "yuko", Intent: "email-send", Payload: []byte(`{"to":["team@ourco.com"],"n":` + string(rune('0'+i)) + `}`), By: "yuko", Actor: "test"})
		if err != nil {
			t.Fatal(err)
		}
		gs = append(gs, g)
	}
	return y, gs
}

func states(t *testing.T, y *yard.Yard, gs []*gate.Gate) []string {
	t.Helper()
	var out []string
	for _, g := range gs {
		got, err := gate.Get(y, g.ID)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, got.State)
	}
	return out
}

// The walk shows the pending gates oldest first and takes a, d (with a
// reason), s and q; an edited payload cannot be approved, a bad answer
// or an empty reason asks again.
func TestReviewWalk(t *testing.T) {
	y, gs := reviewYard(t, 4)
	p := y.Path("gates", "pending", gs[1].ID+".json")
	b, _ := os.ReadFile(p)
	os.WriteFile(p, bytes.Replace(b, []byte("team@ourco.com"), []byte("all@evil.com"), 1), 0o640)
	var out, errOut bytes.Buffer
	e := &cli.Env{Name: "impgate", Stdout: &out, Stderr: &errOut}
	answers := "x\na\n" + "a\nd\n\nd\nedited on disk\n" + "s\n" + "q\n"
	if err := walk(e, y.Root, "alice", "", bufio.NewReader(strings.NewReader(answers))); err != nil {
		t.Fatal(err)
	}
	if got := states(t, y, gs); strings.Join(got, " ") != "approved denied filed filed" {
		t.Errorf("states %v\n%s", got, out.String())
	}
	o := out.String()
	for _, want := range []string{"[1/4]", "[2/4]", "[3/4]", "[4/4]", "answer a (approve), d (deny), s (skip) or q (quit)",
		gs[1].ID + " cannot be approved: gate " + gs[1].ID + ": payload no longer matches", "a denial needs a reason; nothing was decided",
		gs[0].ID + " approved by alice", gs[1].ID + " denied by alice", "reviewed: 1 approved, 1 denied, 1 skipped, 1 not reached"} {
		if !strings.Contains(o, want) {
			t.Errorf("output lacks %q:\n%s", want, o)
		}
	}
	if strings.Index(o, gs[0].ID) > strings.Index(o, gs[1].ID) {
		t.Errorf("not oldest first:\n%s", o)
	}
	if g, _ := gate.Get(y, gs[1].ID); g.History[len(g.History)-1].Why != "edited on disk" {
		t.Errorf("denial reason %q", g.History[len(g.History)-1].Why)
	}
}

// swapper rewrites a gate's payload and sha256 together (a consistent
// forgery) on the first read, that is after the gate was shown and
// before the answer is taken.
type swapper struct {
	r    io.Reader
	done bool
	swap func()
}

func (s *swapper) Read(p []byte) (int, error) {
	if !s.done {
		s.done = true
		s.swap()
	}
	return s.r.Read(p)
}

// An approval is bound to the sha256 that was shown: a payload swapped,
// hash and all, between showing and answering is not approved.
func TestReviewApprovalBoundToShownSha(t *testing.T) {
	y, gs := reviewYard(t, 1)
	p := y.Path("gates", "pending", gs[0].ID+".json")
	in := &swapper{r: strings.NewReader("a\n"), swap: func() {
		var g map[string]any
		b, _ := os.ReadFile(p)
		json.Unmarshal(b, &g)
		g["payload"] = map[string]any{"to": []string{"all@evil.com"}}
		canon, _ := gate.Canonical([]byte(`{"to":["all@evil.com"]}`))
		g["sha256"] = gate.Sum(canon)
		b, _ = json.Marshal(g)
		os.WriteFile(p, b, 0o640)
	}}
	var out, errOut bytes.Buffer
	e := &cli.Env{Name: "impgate", Stdout: &out, Stderr: &errOut}
	if err := walk(e, y.Root, "alice", "", bufio.NewReader(in)); err != nil {
		t.Fatal(err)
	}
	if got := states(t, y, gs); got[0] != state.Filed {
		t.Errorf("a swapped payload was %s\n%s", got[0], out.String())
	}
	if !strings.Contains(errOut.String(), "not the payload that was reviewed") {
		t.Errorf("stderr: %s", errOut.String())
	}
}

// No pending gates: it says so and asks nothing.
func TestReviewNothingPending(t *testing.T) {
	y, _ := reviewYard(t, 0)
	var out bytes.Buffer
	e := &cli.Env{Name: "impgate", Stdout: &out, Stderr: io.Discard}
	if err := walk(e, y.Root, "alice", "", bufio.NewReader(strings.NewReader(""))); err != nil || out.String() != "no pending gates\n" {
		t.Errorf("%v %q", err, out.String())
	}
}
