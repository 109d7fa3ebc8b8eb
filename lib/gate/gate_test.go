package gate

import (
	"errors"
	"os"
	"strings"
	"testing"

	"github.com/impyard/impyard/lib/state"
	"github.com/impyard/impyard/lib/yard"
	"github.com/impyard/impyard/lib/yard/yardtest"
)

func file(t *testing.T, y *yard.Yard, payload string) *Gate {
	t.Helper()
	g, err := File(y, FileOptions{Imp: "yuko", Intent: "email-send", Payload: []byte(payload), Rationale: "weekly digest", By: "yuko", Actor: "test"})
	if err != nil {
		t.Fatal(err)
	}
	return g
}

func TestCanonical(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{`{"b":1,"a":[1.50,"x<y>&"]}`, `{"a":[1.50,"x<y>&"],"b":1}`},
		{` { "z" : {"y":null,"x":true} } `, `{"z":{"x":true,"y":null}}`},
		{`"text"`, `"text"`},
	} {
		got, err := Canonical([]byte(tc.in))
		if err != nil || string(got) != tc.want {
			t.Errorf("Canonical(%s) = %s, %v; want %s", tc.in, got, err, tc.want)
		}
	}
	for _, bad := range []string{`{"to":"a","to":"b"}`, `{"a":`, ``, `{} {}`} {
		if _, err := Canonical([]byte(bad)); err == nil {
			t.Errorf("Canonical(%s) succeeded", bad)
		}
	}
}

func TestFileApproveDeny(t *testing.T) {
	y := newYard(t)
	g := file(t, y, `{"to":["team@ourco.com"],"subject":"digest","body":"hi"}`)
	if g.State != state.Filed || len(g.SHA256) != 64 {
		t.Fatalf("filed %+v", g)
	}
	if _, err := os.Stat(y.Path("gates", "pending", g.ID+".json")); err != nil {
		t.Fatal(err)
	}
	if _, err := Move(y, g.ID, Change{To: state.Approved, Signer: testKey, By: "alice", SHA: "00000000"}); err == nil || !strings.Contains(err.Error(), "not the payload that was reviewed") {
		t.Errorf("wrong sha: %v", err)
	}
	if got, _ := Get(y, g.ID); got.State != state.Filed {
		t.Errorf("wrong sha changed the gate to %s", got.State)
	}
	a, err := Move(y, g.ID, Change{To: state.Approved, Signer: testKey, By: "alice", SHA: g.SHA256[:8], Why: "looks right"})
	if err != nil {
		t.Fatal(err)
	}
	if a.State != state.Approved || a.History[1].By != "alice" {
		t.Errorf("approved %+v", a)
	}
	if _, err := os.Stat(y.Path("gates", "pending", g.ID+".json")); !os.IsNotExist(err) {
		t.Errorf("pending file still there: %v", err)
	}
	if _, err := Move(y, g.ID, Change{To: state.Approved, Signer: testKey, By: "bob"}); err == nil || !strings.Contains(err.Error(), "already approved") {
		t.Errorf("second approve: %v", err)
	}
	if _, err := Move(y, g.ID, Change{To: state.Denied, By: "bob"}); err == nil {
		t.Errorf("deny after approve succeeded")
	}

	d := file(t, y, `{"to":["x@elsewhere.com"]}`)
	if _, err := Move(y, d.ID, Change{To: state.Denied, By: "alice", Why: "external"}); err != nil {
		t.Fatal(err)
	}
	if _, err := Move(y, d.ID, Change{To: state.Approved, Signer: testKey, By: "alice"}); err == nil || !strings.Contains(err.Error(), "denied, which is final") {
		t.Errorf("approve after deny: %v", err)
	}
	pending, _ := List(y, Filter{})
	all, _ := List(y, Filter{All: true})
	if len(pending) != 0 || len(all) != 2 {
		t.Errorf("pending %d, all %d; want 0 and 2", len(pending), len(all))
	}
}

// A payload whose record file holds it with other whitespace (indented,
// as the store writes it, or spaced out) is the payload filed: Frozen
// gives the canonical bytes hashed at filing. One whose bytes differ in
// anything but whitespace is canonicalised, and if that changes nothing
// (keys reordered) it still matches; an escape written differently too.
func TestFrozenAcrossWhitespace(t *testing.T) {
	y := newYard(t)
	canon := `{"a":"<b>","n":1.50,"to":["team@ourco.com"]}`
	g := file(t, y, `{"to":["team@ourco.com"],"n":1.50,"a":"<b>"}`)
	for _, payload := range []string{
		canon,
		"{\n  \"a\": \"<b>\",\n  \"n\": 1.50,\n  \"to\": [\n    \"team@ourco.com\"\n  ]\n}",
		`{"to":["team@ourco.com"],"n":1.50,"a":"<b>"}`,
		`{"a":"\u003cb\u003e","n":1.50,"to":["team@ourco.com"]}`,
	} {
		g.Payload = []byte(payload)
		b, err := g.Frozen()
		if err != nil || string(b) != canon {
			t.Errorf("payload %s: frozen %s, %v; want %s", payload, b, err, canon)
		}
	}
	for _, payload := range []string{`{"a":"<b>","n":1.5,"to":["team@ourco.com"]}`, `{"a":"<b>","n":1.50,"to":["all@world.com"]}`, `{"a":"<b>","n":1.50,"to":["team@ourco.com"]`} {
		g.Payload = []byte(payload)
		if b, err := g.Frozen(); err == nil {
			t.Errorf("payload %s: frozen %s; want it refused", payload, b)
		}
	}
}

func TestEditedPayloadRefused(t *testing.T) {
	y := newYard(t)
	g := file(t, y, `{"to":["team@ourco.com"]}`)
	if !g.Matches() {
		t.Fatal("a gate as filed does not match its sha256")
	}
	p := y.Path("gates", "pending", g.ID+".json")
	b, _ := os.ReadFile(p)
	os.WriteFile(p, []byte(strings.Replace(string(b), "team@ourco.com", "all@world.com", 1)), 0o640)
	// Edited, the payload no longer matches,
	// and ls marks it so.
	if edited, _ := List(y, Filter{}); len(edited) != 1 || edited[0].Matches() {
		t.Errorf("an edited payload matches its sha256: %v", edited)
	}
	_, err := Move(y, g.ID, Change{To: state.Approved, Signer: testKey, By: "alice"})
	if err == nil || !strings.Contains(err.Error(), "no longer matches its sha256") {
		t.Fatalf("approve of an edited gate: %v", err)
	}
	got, err := Get(y, g.ID)
	if err != nil || got.State != state.Filed {
		t.Errorf("edited gate changed state: %v %v", got, err)
	}
}

// TestListDamagedResolvedCopy: a resolved copy that cannot be read is
// reported by name, and its pending twin is not listed as if the gate
// were still open.
func TestListDamagedResolvedCopy(t *testing.T) {
	y := newYard(t)
	g := leftoverPendingCopy(t, y)
	os.WriteFile(y.Path("gates", "resolved", g.ID+".json"), []byte("{"), 0o640)
	for _, f := range []Filter{{}, {All: true}} {
		gates, bad := List(y, f)
		if len(gates) != 0 {
			t.Errorf("%+v: listed %+v, want nothing: the resolved copy wins even damaged", f, gates)
		}
		if f.All && (len(bad) != 1 || !strings.Contains(bad[0].Error(), y.Path("gates", "resolved", g.ID+".json"))) {
			t.Errorf("%+v: bad %v, want the damaged resolved copy by name", f, bad)
		}
	}
}

// leftoverPendingCopy files a gate, approves it and puts its pending copy
// back, as if the approver died after writing the decision but before
// removing the pending file.
func leftoverPendingCopy(t *testing.T, y *yard.Yard) *Gate {
	t.Helper()
	g := file(t, y, `{"n":1}`)
	pendingBytes, _ := os.ReadFile(y.Path("gates", "pending", g.ID+".json"))
	if _, err := Move(y, g.ID, Change{To: state.Approved, Signer: testKey, By: "alice"}); err != nil {
		t.Fatal(err)
	}
	os.WriteFile(y.Path("gates", "pending", g.ID+".json"), pendingBytes, 0o640)
	return g
}

func TestCrashLeftoverPendingCopy(t *testing.T) {
	y := newYard(t)
	g := leftoverPendingCopy(t, y)
	if got, _ := Get(y, g.ID); got.State != state.Approved {
		t.Errorf("Get = %s, want approved", got.State)
	}
	if all, _ := List(y, Filter{All: true}); len(all) != 1 {
		t.Errorf("listed %d gates, want 1", len(all))
	}
	if p, _ := List(y, Filter{}); len(p) != 0 {
		t.Errorf("the stale pending copy is listed as pending")
	}
	if _, err := Move(y, g.ID, Change{To: state.Approved, Signer: testKey, By: "bob"}); err == nil {
		t.Errorf("re-approved through the stale copy")
	}
	if _, err := os.Stat(y.Path("gates", "pending", g.ID+".json")); !os.IsNotExist(err) {
		t.Errorf("stale pending copy not cleaned: %v", err)
	}
}

func TestFileRefusesBadInput(t *testing.T) {
	y := newYard(t)
	for _, o := range []FileOptions{
		{Imp: "Yuko", Intent: "email-send", Payload: []byte(`{}`)},
		{Imp: "yuko", Intent: "../x", Payload: []byte(`{}`)},
		{Imp: "yuko", Intent: "email-send", Payload: []byte(`not json`)},
		{Imp: "yuko", Intent: "email-send", Payload: []byte(`{"a":1,"a":2}`)},
		{Imp: "yuko", Intent: "email-send", Payload: []byte(`{}`), Task: "t-../"},
	} {
		if _, err := File(y, o); err == nil {
			t.Errorf("File(%+v) succeeded", o)
		}
	}
	if _, err := Get(y, "g-../../x"); err == nil {
		t.Errorf("Get(g-../../x) succeeded")
	}
}

func TestFileSameIDTwice(t *testing.T) {
	y := newYard(t)
	o := FileOptions{ID: "g-0000000000000042", Imp: "yuko", Intent: "email-send", Payload: []byte(`{"to":["a@b.c"]}`), By: "yuko", Actor: "test"}
	g, err := File(y, o)
	if err != nil || g.ID != o.ID {
		t.Fatalf("%v %v", g, err)
	}
	o.Payload = []byte(` { "to" : ["a@b.c"] } `)
	if again, err := File(y, o); err != nil || again.ID != g.ID || len(again.History) != 1 {
		t.Errorf("same payload again: %v %v", again, err)
	}
	o.Payload = []byte(`{"to":["all@world.com"]}`)
	if _, err := File(y, o); !errors.Is(err, ErrConflict) || !strings.Contains(err.Error(), g.SHA256) {
		t.Errorf("different payload: %v", err)
	}
	if got, _ := Get(y, g.ID); got.SHA256 != g.SHA256 {
		t.Errorf("the conflict changed the gate")
	}
	if all, _ := List(y, Filter{All: true}); len(all) != 1 {
		t.Errorf("%d gates, want 1", len(all))
	}
}

func newYard(t *testing.T) *yard.Yard { return yardtest.New(t) }

// tree lists every path below root with its mode and contents, to show
// that an operation changed nothing.
func tree(t *testing.T, root string) string { return yardtest.Tree(t, root) }
