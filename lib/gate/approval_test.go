package gate

import (
	"encoding/json"
	"errors"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/impyard/impyard/internal/testclock"
	"github.com/impyard/impyard/lib/approval"
	"github.com/impyard/impyard/lib/state"
	"github.com/impyard/impyard/lib/store"
	"github.com/impyard/impyard/lib/yard/yardtest"
)

var testKey = func() *approval.Key {
	k, err := approval.Generate("owner")
	if err != nil {
		panic(err)
	}
	return k
}()

// ring writes testKey's public half into a home and returns its keyring.
func ring(t testing.TB, keys ...*approval.Key) *approval.Keyring {
	t.Helper()
	home := t.TempDir()
	for _, k := range keys {
		if err := approval.WritePublic(home, k); err != nil {
			t.Fatal(err)
		}
	}
	kr, err := approval.LoadKeyring(home)
	if err != nil {
		t.Fatal(err)
	}
	return kr
}

func TestApprovalSigned(t *testing.T) {
	y := newYard(t)
	g := file(t, y, `{"to":["team@ourco.com"]}`)
	if _, err := Move(y, g.ID, Change{To: state.Approved, By: "alice"}); !errors.Is(err, ErrNoSigner) {
		t.Fatalf("unsigned approval: %v", err)
	}
	if got, _ := Get(y, g.ID); got.State != state.Filed {
		t.Fatalf("an unsigned approval moved the gate to %s", got.State)
	}
	a, err := Move(y, g.ID, Change{To: state.Approved, Signer: testKey, By: "alice"})
	if err != nil {
		t.Fatal(err)
	}
	onDisk, _ := Get(y, g.ID)
	kr := ring(t, testKey)
	if k, err := onDisk.VerifyApproval(kr); err != nil || k.Name != "owner" || onDisk.Approval.By != "alice" || !onDisk.Approval.At.Equal(a.History[1].At) {
		t.Fatalf("verify %+v: %v", onDisk.Approval, err)
	}
	other, _ := approval.Generate("owner")
	if _, err := onDisk.VerifyApproval(ring(t, other)); !errors.Is(err, approval.ErrInvalid) || !strings.Contains(err.Error(), "not in") {
		t.Errorf("a key not in the ring verified: %v", err)
	}
	for name, edit := range map[string]func(g *Gate){
		"decider":       func(g *Gate) { g.Approval.By, g.History[1].By = "mallory", "mallory" },
		"time":          func(g *Gate) { g.Approval.At = g.Approval.At.Add(time.Second); g.History[1].At = g.Approval.At },
		"timeline only": func(g *Gate) { g.History[1].By = "mallory" },
		"id":            func(g *Gate) { g.ID = "g-0000000000000042" },
		"payload and sha": func(g *Gate) {
			g.Payload = json.RawMessage(`{"to":["all@world.com"]}`)
			g.SHA256 = Sum(g.Payload)
		},
		"signature":                   func(g *Gate) { g.Approval.Sig = g.Approval.Sig[:10] + "AAAA" + g.Approval.Sig[14:] },
		"no approval in the timeline": func(g *Gate) { g.History = g.History[:1] },
	} {
		c, _ := Get(y, g.ID)
		edit(c)
		if _, err := c.VerifyApproval(kr); !errors.Is(err, approval.ErrInvalid) {
			t.Errorf("%s edited: %v, want it to fail", name, err)
		}
	}
}

func TestApproveAgainAddsSignature(t *testing.T) {
	y := newYard(t)
	g := file(t, y, `{"n":1}`)
	if _, err := Move(y, g.ID, Change{To: state.Approved, Signer: testKey, By: "alice"}); err != nil {
		t.Fatal(err)
	}
	// As a gate approved before approvals were signed.
	p := y.Path("gates", "resolved", g.ID+".json")
	var raw map[string]any
	b, _ := os.ReadFile(p)
	json.Unmarshal(b, &raw)
	delete(raw, "approval")
	b, _ = json.Marshal(raw)
	os.WriteFile(p, b, 0o640)
	old, _ := Get(y, g.ID)
	if _, err := old.VerifyApproval(ring(t, testKey)); !errors.Is(err, approval.ErrUnsigned) {
		t.Fatalf("unsigned: %v", err)
	}
	a, err := Move(y, g.ID, Change{To: state.Approved, Signer: testKey, By: "bob", Why: "checked"})
	if err != nil {
		t.Fatal(err)
	}
	h := a.History[len(a.History)-1]
	if a.State != state.Approved || h.From != state.Approved || h.By != "bob" || !strings.Contains(h.Why, "approved again with a signature") || !strings.Contains(h.Why, "checked") {
		t.Errorf("re-approval recorded as %+v", h)
	}
	got, _ := Get(y, g.ID)
	if _, err := got.VerifyApproval(ring(t, testKey)); err != nil {
		t.Errorf("re-approved gate: %v", err)
	}
	if _, err := Move(y, g.ID, Change{To: state.Approved, Signer: testKey, By: "carol"}); err == nil || !strings.Contains(err.Error(), "already approved") {
		t.Errorf("a signed approval was approved again: %v", err)
	}
}

func TestFileApprovedSigned(t *testing.T) {
	y := newYard(t)
	o := FileOptions{Imp: "yuko", Intent: "email-send", Payload: []byte(`{}`), By: "trust: x", Actor: "test", Approved: true}
	if _, err := File(y, o); !errors.Is(err, ErrNoSigner) {
		t.Fatalf("unsigned auto-approval: %v", err)
	}
	if all, _ := List(y, Filter{All: true}); len(all) != 0 {
		t.Fatalf("an unsigned auto-approval left %d gates", len(all))
	}
	o.Signer = testKey
	g, err := File(y, o)
	if err != nil {
		t.Fatal(err)
	}
	got, _ := Get(y, g.ID)
	if _, err := got.VerifyApproval(ring(t, testKey)); err != nil || got.Approval.By != "trust: x" {
		t.Errorf("auto-approval %+v: %v", got.Approval, err)
	}
}

// FuzzVerifyApproval is a malleability check: whatever bytes replace a
// signed gate's file, an approval that still verifies is for the same gate
// id, payload bytes, decider and time.
func FuzzVerifyApproval(f *testing.F) {
	y := yardtest.New(f)
	g, err := File(y, FileOptions{Imp: "yuko", Intent: "email-send", Payload: []byte(`{"to":["team@ourco.com"],"n":1.50}`), By: "yuko", Actor: "test"})
	if err != nil {
		f.Fatal(err)
	}
	orig, err := Move(y, g.ID, Change{To: state.Approved, Signer: testKey, By: "alice"})
	if err != nil {
		f.Fatal(err)
	}
	p := y.Path("gates", "resolved", g.ID+".json")
	b, _ := os.ReadFile(p)
	canon, _ := orig.Frozen()
	f.Add(b)
	f.Add([]byte(strings.Replace(string(b), "team@ourco.com", "all@world.com", 1)))
	f.Add([]byte(strings.Replace(string(b), "1.50", "1.5", 1)))
	f.Add([]byte(strings.Replace(string(b), `"alice"`, `"alic\u0065"`, -1)))
	kr := ring(f, testKey)
	f.Fuzz(func(t *testing.T, data []byte) {
		var got Gate
		if store.Decode(p, data, Kind, Major, &got) != nil {
			return
		}
		if _, err := got.VerifyApproval(kr); err != nil {
			return
		}
		frozen, _ := got.Frozen()
		if got.ID != orig.ID || got.SHA256 != orig.SHA256 || string(frozen) != string(canon) ||
			got.Approval.By != orig.Approval.By || !got.Approval.At.Equal(orig.Approval.At) {
			t.Fatalf("a changed gate verifies: %s", data)
		}
	})
}

// TestApprovalTimes: an approval signs its transition's time as written,
// in whole seconds, so what is read back verifies; a gate approved by an
// older impyard, whose time has nanoseconds, still verifies, also after
// a later transition rewrote the file.
func TestApprovalTimes(t *testing.T) {
	y := newYard(t)
	kr := ring(t, testKey)
	g := file(t, y, `{"n":1}`)
	a, err := Move(y, g.ID, Change{To: state.Approved, Signer: testKey, By: "alice"})
	if err != nil {
		t.Fatal(err)
	}
	b, _ := os.ReadFile(y.Path("gates", "resolved", g.ID+".json"))
	if at := a.History[1].At; at.Nanosecond() != 0 || !strings.Contains(string(b), `"at": "`+at.Format("2006-01-02T15:04:05Z")+`"`) {
		t.Errorf("approval time %v not written in whole seconds:\n%s", at, b)
	}
	if got, _ := Get(y, g.ID); strings.Contains(string(b), "at_ms") {
		t.Errorf("at_ms in a strictly read state file:\n%s", b)
	} else if _, err := got.VerifyApproval(kr); err != nil {
		t.Fatalf("whole-second approval: %v", err)
	}

	// As an older impyard wrote it: the time with nanoseconds, signed so.
	// (The signature is made anew: impyard.approval/1 no longer verifies.)
	old := file(t, y, `{"n":2}`)
	if _, err := Move(y, old.ID, Change{To: state.Approved, Signer: testKey, By: "alice"}); err != nil {
		t.Fatal(err)
	}
	p := y.Path("gates", "resolved", old.ID+".json")
	c, _ := Get(y, old.ID)
	at := time.Date(2026, 11, 30, 5, 47, 39, 123456789, time.UTC)
	c.History[1].At, c.History[1].AtMS = at, 0
	c.Approval = testKey.Sign(c.Subject(), "alice", at)
	nb, err := store.Encode(c)
	if err != nil {
		t.Fatal(err)
	}
	os.WriteFile(p, nb, 0o640)
	for _, to := range []string{"", state.Executing} {
		if to != "" {
			if _, err := Move(y, old.ID, Change{To: to, By: "impexec"}); err != nil {
				t.Fatal(err)
			}
		}
		got, err := Get(y, old.ID)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := got.VerifyApproval(kr); err != nil || !got.Approval.At.Equal(at) {
			t.Errorf("old approval (state %s): %v, at %v", got.State, err, got.Approval.At)
		}
	}
}

// TestApprovalCoversTheGate: a gate auto-approved by a trust entry, then
// edited on disk in any field that decides what runs, where or for whom,
// no longer verifies; an edit of a field outside the approval (the
// rationale) leaves it verifying.
func TestApprovalCoversTheGate(t *testing.T) {
	y := newYard(t)
	kr := ring(t, testKey)
	rule := json.RawMessage(`{"free":["text"],"intent":"message-user","level":"auto"}`)
	g, err := File(y, FileOptions{Imp: "yuko", Intent: "message-user", Payload: []byte(`{"text":"hi"}`), Rationale: "tell the owner",
		Task: "t-0000000000000001", Run: "r-0000000000000001", By: "trust: org.toml [[trust]] #1", Actor: "impgw",
		Approved: true, Signer: testKey, Trust: &Trust{Level: "auto", Entry: "org.toml [[trust]] #1", Why: "org.toml [[trust]] #1: level auto", Rule: rule}})
	if err != nil {
		t.Fatal(err)
	}
	p := y.Path("gates", "resolved", g.ID+".json")
	orig, _ := os.ReadFile(p)
	check := func(name string, edit func(g *Gate), verifies bool) {
		t.Helper()
		c, err := parseGate(p, orig)
		if err != nil {
			t.Fatal(err)
		}
		edit(c)
		b, _ := store.Encode(c)
		os.WriteFile(p, b, 0o640)
		got, err := Get(y, g.ID)
		if err != nil {
			t.Fatal(err)
		}
		_, err = got.VerifyApproval(kr)
		if verifies && err != nil || !verifies && !errors.Is(err, approval.ErrInvalid) {
			t.Errorf("%s: verify: %v, want verifies=%v", name, err, verifies)
		}
	}
	check("as filed", func(*Gate) {}, true)
	check("rationale", func(g *Gate) { g.Rationale = "something else" }, true)
	for name, edit := range map[string]func(g *Gate){
		"imp":         func(g *Gate) { g.Imp = "rex" },
		"intent":      func(g *Gate) { g.Intent = "memory-promote" },
		"task":        func(g *Gate) { g.Task = "t-0000000000000002" },
		"no task":     func(g *Gate) { g.Task = "" },
		"run":         func(g *Gate) { g.Run = "r-0000000000000002" },
		"created":     func(g *Gate) { g.Created = g.Created.Add(time.Second) },
		"filer":       func(g *Gate) { g.History[0].By = "rex" },
		"program":     func(g *Gate) { g.History[0].Actor = "impgate" },
		"trust level": func(g *Gate) { g.Trust.Level = "gate" },
		"trust entry": func(g *Gate) { g.Trust.Entry = "imps/rex/imp.toml [[trust]] #1" },
		"trust rule": func(g *Gate) {
			g.Trust.Rule = json.RawMessage(`{"free":["text","to"],"intent":"message-user","level":"auto"}`)
		},
		"no trust":      func(g *Gate) { g.Trust = nil },
		"decider":       func(g *Gate) { g.Approval.By, g.History[1].By = "alice", "alice" },
		"approval time": func(g *Gate) { g.Approval.At = g.Approval.At.Add(time.Second); g.History[1].At = g.Approval.At },
	} {
		check(name, edit, false)
	}
}

// TestVersion1ApprovedAgain: a gate approved as impyard.approval/1 does
// not verify, as an unsigned one; approving it again signs it anew and
// it verifies, while Decide does not take the old approval as the
// decision already made.
func TestVersion1ApprovedAgain(t *testing.T) {
	y := newYard(t)
	home := t.TempDir()
	approval.WritePublic(home, testKey)
	kr, _ := approval.LoadKeyring(home)
	g := file(t, y, `{"n":1}`)
	if _, err := Move(y, g.ID, Change{To: state.Approved, Signer: testKey, By: "alice"}); err != nil {
		t.Fatal(err)
	}
	p := y.Path("gates", "resolved", g.ID+".json")
	c, _ := Get(y, g.ID)
	c.Approval.Schema = "" // as impyard.approval/1 wrote it
	b, _ := store.Encode(c)
	os.WriteFile(p, b, 0o640)
	c, _ = Get(y, g.ID)
	if _, err := c.VerifyApproval(kr); !errors.Is(err, approval.ErrOutdated) || !errors.Is(err, approval.ErrUnsigned) {
		t.Fatalf("a /1 approval: %v", err)
	}
	again, repeated, err := Decide(y, g.ID, Change{To: state.Approved, Signer: testKey, By: "alice"}, func() (*approval.Keyring, error) { return kr, nil })
	if err != nil || repeated {
		t.Fatalf("approved again: repeated %v, %v", repeated, err)
	}
	if _, err := again.VerifyApproval(kr); err != nil || !strings.Contains(again.History[len(again.History)-1].Why, "older schema") {
		t.Fatalf("after approving again: %v; %q", err, again.History[len(again.History)-1].Why)
	}
}

// Signing again a gate whose approval had no signature is an approval
// made now: past the gate's deadline it is refused as one of a filed gate
// is, so an unsigned "approved" written into the yard for a gate that
// expired undecided is not turned into a signed one.
func TestApproveAgainPastDeadline(t *testing.T) {
	t0 := testclock.Freeze(t, &state.Now)
	y := newYard(t)
	g, err := File(y, FileOptions{Imp: "yuko", Intent: "message-user", Payload: []byte(`{"n":1}`), By: "yuko", Actor: "test", Expires: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Move(y, g.ID, Change{To: state.Approved, Signer: testKey, By: "alice"}); err != nil {
		t.Fatal(err)
	}
	p := y.Path("gates", "resolved", g.ID+".json")
	var raw map[string]any
	b, _ := os.ReadFile(p)
	json.Unmarshal(b, &raw)
	delete(raw, "approval")
	b, _ = json.Marshal(raw)
	os.WriteFile(p, b, 0o640)
	state.Now = func() time.Time { return t0.Add(2 * time.Hour) }
	deadline := func(g *Gate) time.Time { return g.Deadline(nil) }
	if _, err := Move(y, g.ID, Change{To: state.Approved, Signer: testKey, By: "bob", Deadline: deadline}); !errors.Is(err, ErrExpired) {
		t.Errorf("signing again past the deadline: %v, want ErrExpired", err)
	}
	if got, _ := Get(y, g.ID); got.Approval != nil {
		t.Errorf("a signature was written past the deadline: %+v", got.Approval)
	}
}
