package executor

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/impyard/impyard/internal/approvaltest"
	"github.com/impyard/impyard/lib/config"
	"github.com/impyard/impyard/lib/earn"
	"github.com/impyard/impyard/lib/gate"
	"github.com/impyard/impyard/lib/intent"
	"github.com/impyard/impyard/lib/state"
)

const earnOrg = "[executors.message-user]\nkind = \"message-user\"\n[[earn]]\nintent = \"message-user\"\nimp = \"yuko\"\nafter = 1\n"

// An executed gate the owner approved files the promotion it makes due;
// the promotion, approved, is executed by the built-in trust-promote
// executor into imp.toml.
func TestTrustPromote(t *testing.T) {
	r := setup(t, earnOrg)
	g, err := gate.File(r.Yard, gate.FileOptions{Imp: "yuko", Intent: "message-user", Payload: []byte(`{"text":"disk full"}`), By: "yuko", Actor: "impgw"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := gate.Move(r.Yard, g.ID, gate.Change{To: state.Approved, By: "alice", Actor: "impgate", Signer: approvaltest.Key(t, r.Home)}); err != nil {
		t.Fatal(err)
	}
	if out, err := r.Execute(context.Background(), g.ID); err != nil || out.State != state.Executed {
		t.Fatalf("execute: %v %v", out, err)
	}
	all, _ := gate.List(r.Yard, gate.Filter{Imp: "yuko"})
	if len(all) != 1 || all[0].Intent != intent.TrustPromote {
		t.Fatalf("pending gates after the approval: %v", all)
	}
	p := all[0]
	org, _ := config.LoadOrg(r.Yard)
	if d, err := Where(r.Yard, org, p); err != nil || d.Config != config.ImpPath(r.Yard, "yuko") || !strings.Contains(d.String(), "trust-promote an earned [[trust]] entry appended to") {
		t.Errorf("where: %+v %v", d, err)
	}
	approvaltest.Approve(t, r.Yard, r.Home, p.ID)
	out, err := r.Execute(context.Background(), p.ID)
	if err != nil || out.State != state.Executed || !strings.Contains(string(out.Result), "earned entry for message-user appended") {
		t.Fatalf("trust-promote: %v %v", out, err)
	}
	im, err := config.LoadImp(r.Yard, "yuko")
	if err != nil || len(im.Trust) != 1 || !im.Trust[0].Earned || im.Trust[0].Match["text"] != "disk full" || im.Trust[0].Gates[0] != g.ID {
		t.Errorf("imp.toml: %+v %v", im, err)
	}
	r.earnedAll(org)
	if all, _ := gate.List(r.Yard, gate.Filter{Imp: "yuko"}); len(all) != 0 {
		t.Errorf("a second promotion from the same approval: %v", all)
	}
}

// A trust-promote payload that is not an earned entry fails the gate and
// leaves imp.toml as it was.
func TestTrustPromoteRefused(t *testing.T) {
	r := setup(t, earnOrg)
	p := config.ImpPath(r.Yard, "yuko")
	os.MkdirAll(filepath.Dir(p), 0o750)
	os.WriteFile(p, []byte("# mine\n"), 0o640)
	g := approved(t, r, intent.TrustPromote, `{"intent":"message-user","level":"auto","earned":false,"gates":["g-0000000000000001"]}`)
	out, err := r.Execute(context.Background(), g.ID)
	if err != nil || out.State != state.Failed || !strings.Contains(out.History[len(out.History)-1].Why, earn.ErrNotEntry.Error()) {
		t.Fatalf("got %v %v", out, err)
	}
	if b, _ := os.ReadFile(p); string(b) != "# mine\n" {
		t.Errorf("imp.toml changed: %q", b)
	}
}

// A promotion that cannot be made narrow is logged after the execution,
// not again at every rescan.
func TestTrustPromoteNotNarrow(t *testing.T) {
	r := setup(t, "[executors.email-send]\nkind = \"message-user\"\nfields = { to = \"addresses\", cc = \"addresses\" }\n[[earn]]\nintent = \"email-send\"\nimp = \"yuko\"\nafter = 2\n")
	var logged []string
	r.Logf = func(format string, a ...any) { logged = append(logged, fmt.Sprintf(format, a...)) }
	for _, body := range []string{`{"to":["a@ourco.com"],"cc":["b@ourco.com"]}`, `{"to":["a@ourco.com"]}`} {
		g, err := gate.File(r.Yard, gate.FileOptions{Imp: "yuko", Intent: "email-send", Payload: []byte(body), By: "yuko", Actor: "impgw"})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := gate.Move(r.Yard, g.ID, gate.Change{To: state.Approved, By: "alice", Actor: "impgate", Signer: approvaltest.Key(t, r.Home)}); err != nil {
			t.Fatal(err)
		}
		if _, err := r.Execute(context.Background(), g.ID); err != nil {
			t.Fatal(err)
		}
	}
	if n := len(logged); n == 0 || !strings.Contains(logged[n-1], `address field "cc" is absent`) {
		t.Fatalf("logged %q", logged)
	}
	before := len(logged)
	org, _ := config.LoadOrg(r.Yard)
	r.earnedAll(org)
	if len(logged) != before {
		t.Errorf("a rescan logged again: %q", logged[before:])
	}
	if all, _ := gate.List(r.Yard, gate.Filter{Imp: "yuko"}); len(all) != 0 {
		t.Errorf("a promotion that lets cc through: %v", all)
	}
}
