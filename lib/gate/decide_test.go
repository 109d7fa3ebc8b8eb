package gate

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/impyard/impyard/lib/approval"
	"github.com/impyard/impyard/lib/state"
	"github.com/impyard/impyard/lib/transition"
)

// TestDecideRepeats: a decision asked again is left as it was and
// reported repeated when it is the same decision (a deny whatever its
// reason; an approval whose sha256 prefix matches, in either case, and
// whose recorded approval verifies), refused wrapping ErrDecided when it
// cannot stand as a repeat, and refused as an illegal transition when it
// is another decision. Move never repeats.
func TestDecideRepeats(t *testing.T) {
	y := newYard(t)
	keys := func() (*approval.Keyring, error) { return ring(t, testKey), nil }
	noKeys := func() (*approval.Keyring, error) {
		t.Error("keys loaded for a deny")
		return nil, errors.New("no keys")
	}

	denied := file(t, y, `{"n":1}`)
	if _, repeated, err := Decide(y, denied.ID, Change{To: state.Denied, By: "alice", Why: "first"}, noKeys); err != nil || repeated {
		t.Fatalf("deny: repeated %v, %v", repeated, err)
	}
	g, repeated, err := Decide(y, denied.ID, Change{To: state.Denied, By: "bob", Why: "second"}, noKeys)
	if err != nil || !repeated || g.State != state.Denied || len(g.History) != 2 || g.History[1].Why != "first" {
		t.Fatalf("deny again: repeated %v, %v, %+v; want the first deny left as it was", repeated, err, g)
	}
	if _, err := Move(y, denied.ID, Change{To: state.Denied, By: "bob"}); err == nil {
		t.Error("Move repeated a deny")
	}
	if _, _, err := Decide(y, denied.ID, Change{To: state.Approved, Signer: testKey, By: "bob"}, keys); err == nil || errors.Is(err, ErrDecided) {
		t.Errorf("approve of a denied gate: %v, want an illegal transition", err)
	}

	approved := file(t, y, `{"n":2}`)
	if _, repeated, err := Decide(y, approved.ID, Change{To: state.Approved, Signer: testKey, By: "alice"}, keys); err != nil || repeated {
		t.Fatalf("approve: repeated %v, %v", repeated, err)
	}
	sha := strings.ToUpper(approved.SHA256[:12])
	if g, repeated, err := Decide(y, approved.ID, Change{To: state.Approved, Signer: testKey, By: "bob", SHA: sha}, keys); err != nil || !repeated || len(g.History) != 2 || g.History[1].By != "alice" {
		t.Fatalf("approve again with the reviewed sha %s: repeated %v, %v", sha, repeated, err)
	}
	if _, _, err := Decide(y, approved.ID, Change{To: state.Denied, By: "bob"}, noKeys); err == nil || errors.Is(err, ErrDecided) {
		t.Errorf("deny of an approved gate: %v, want an illegal transition", err)
	}
	for _, tc := range []struct {
		name string
		c    Change
		keys func() (*approval.Keyring, error)
		want []string
	}{
		{"another sha", Change{SHA: "00ff"}, keys, []string{"approved by alice at ", "for payload sha256 " + approved.SHA256 + ", which does not start with 00ff"}},
		{"keys unreadable", Change{}, func() (*approval.Keyring, error) { return nil, os.ErrPermission }, []string{"approved by alice at ", "that approval cannot be verified", os.ErrPermission.Error()}},
		{"another key", Change{}, func() (*approval.Keyring, error) {
			other, err := approval.Generate("owner")
			if err != nil {
				return nil, err
			}
			return ring(t, other), nil
		}, []string{"approved by alice at ", "that approval does not verify"}},
	} {
		tc.c.To, tc.c.Signer, tc.c.By = state.Approved, testKey, "bob"
		_, repeated, err := Decide(y, approved.ID, tc.c, tc.keys)
		if !errors.Is(err, ErrDecided) || repeated {
			t.Errorf("%s: repeated %v, %v; want ErrDecided", tc.name, repeated, err)
			continue
		}
		for _, w := range tc.want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("%s: %q lacks %q", tc.name, err, w)
			}
		}
	}
	if g, _ := Get(y, approved.ID); len(g.History) != 2 || g.State != state.Approved {
		t.Errorf("refused repeats changed the gate: %+v", g.History)
	}
}

// TestTrustString: the one line that says which trust entry applied, or
// why the gate waits, for every shape of Trust.
func TestTrustString(t *testing.T) {
	for _, tc := range []struct {
		t    *Trust
		want string
	}{
		{nil, ""},
		{&Trust{Level: "auto", Entry: "org.toml [[trust]] #1", Why: "level auto"}, "auto-approved by org.toml [[trust]] #1: level auto"},
		{&Trust{Level: "auto", Entry: "org.toml [[trust]] #1", Why: "org.toml [[trust]] #1: level auto"}, "auto-approved by org.toml [[trust]] #1: level auto"},
		{&Trust{Level: "gate", Entry: "imps/kai/imp.toml [[trust]] #2", Why: "body holds back"}, "gated by imps/kai/imp.toml [[trust]] #2: body holds back"},
		{&Trust{Level: "gate", Entry: "imps/kai/imp.toml [[trust]] #2", Why: "imps/kai/imp.toml [[trust]] #2: level gate"}, "gated by imps/kai/imp.toml [[trust]] #2: level gate"},
		{&Trust{Level: "gate", Why: "no trust entry matches"}, "gated: no trust entry matches"},
		{&Trust{Level: "auto", Why: "filed by impyard"}, "gated: filed by impyard"},
	} {
		if got := tc.t.String(); got != tc.want {
			t.Errorf("%+v: %q, want %q", tc.t, got, tc.want)
		}
	}
}

// TestListPassesOverSettled: with Known and Settled, a second listing
// passes over the gates the first found settled, and still lists the
// rest.
func TestListPassesOverSettled(t *testing.T) {
	y := newYard(t)
	open, done := file(t, y, `{"n":1}`), file(t, y, `{"n":2}`)
	if _, err := Move(y, done.ID, Change{To: state.Denied, By: "alice"}); err != nil {
		t.Fatal(err)
	}
	f := Filter{All: true, Known: transition.NewKnown(), Settled: func(g *Gate) bool { return g.State == state.Denied }}
	ids := func() (got []string) {
		t.Helper()
		gs, bad := List(y, f)
		if len(bad) > 0 {
			t.Fatal(bad)
		}
		for _, g := range gs {
			got = append(got, g.ID)
		}
		return got
	}
	if got := ids(); len(got) != 2 {
		t.Fatalf("first listing %v, want both gates", got)
	}
	if got := ids(); len(got) != 1 || got[0] != open.ID {
		t.Errorf("second listing %v, want only the open %s", got, open.ID)
	}
}

// TestExecLock: the lock path of a gate's execution, below gates/.exec/,
// made on demand; a bad id or an unmakable directory is an error.
func TestExecLock(t *testing.T) {
	y := newYard(t)
	g := file(t, y, `{}`)
	p, err := ExecLock(y, g.ID)
	if want := filepath.Join(y.Root, "gates", ".exec", g.ID+".lock"); err != nil || p != want {
		t.Fatalf("ExecLock = %q, %v; want %q", p, err, want)
	}
	if fi, err := os.Stat(filepath.Dir(p)); err != nil || !fi.IsDir() {
		t.Fatalf("gates/.exec: %v", err)
	}
	if p, err := ExecLock(y, "../g-0000000000000001"); err == nil {
		t.Errorf("a bad id gave %q", p)
	}
	y2 := newYard(t)
	if err := os.MkdirAll(y2.Path("gates"), 0o750); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(y2.Path("gates", ".exec"), nil, 0o640); err != nil {
		t.Fatal(err)
	}
	if p, err := ExecLock(y2, g.ID); err == nil {
		t.Errorf("gates/.exec a file gave %q", p)
	}
}

// TestResolve finds a gate by a unique prefix, pending or decided.
func TestResolve(t *testing.T) {
	y := newYard(t)
	g := file(t, y, `{}`)
	prefix := g.ID[:len(g.ID)-2]
	if got, err := Resolve(y, prefix); err != nil || got != g.ID {
		t.Fatalf("pending: Resolve(%s) = %q, %v", prefix, got, err)
	}
	if _, err := Move(y, g.ID, Change{To: state.Denied, By: "alice"}); err != nil {
		t.Fatal(err)
	}
	if got, err := Resolve(y, strings.TrimPrefix(prefix, "g-")); err != nil || got != g.ID {
		t.Fatalf("decided: Resolve(%s) = %q, %v", prefix, got, err)
	}
	if got, err := Resolve(y, "g-zzzzzzzzzzzz"); err == nil {
		t.Errorf("no such gate: %q", got)
	}
}

// TestTrustSum: the verdict's sum is over its canonical JSON, so a rule
// written with its keys in another order or other spacing sums the same
// and a changed rule does not; a rule that is not JSON sums to no
// sha256; no verdict sums to "".
func TestTrustSum(t *testing.T) {
	rule := func(s string) *Trust {
		return &Trust{Level: "auto", Entry: "org.toml [[trust]] #1", Why: "level auto", Rule: json.RawMessage(s)}
	}
	a := rule(`{"intent":"email-send","level":"auto","match":{"to":"team@ourco.com"}}`)
	b := rule(`{ "match" : {"to":"team@ourco.com"}, "level":"auto", "intent":"email-send" }`)
	if a.Sum() != b.Sum() || len(a.Sum()) != 64 {
		t.Errorf("one rule in two spellings: %s and %s", a.Sum(), b.Sum())
	}
	if c := rule(`{"intent":"email-send","level":"auto","match":{"to":"*@ourco.com"}}`); c.Sum() == a.Sum() {
		t.Error("a wider rule sums the same")
	}
	if got := rule(`{"intent":`).Sum(); !strings.HasPrefix(got, "unencodable: ") {
		t.Errorf("a rule that is not JSON: %q", got)
	}
	if got := (*Trust)(nil).Sum(); got != "" {
		t.Errorf("no verdict: %q", got)
	}
}

// TestSubjectWithoutTimeline: a gate file with no timeline (a damaged
// one) still gives a subject, with no filer, which no approval signed.
func TestSubjectWithoutTimeline(t *testing.T) {
	g := &Gate{ID: "g-0000000000000001", Imp: "yuko", Intent: "email-send", SHA256: Sum([]byte(`{}`))}
	if s := g.Subject(); s.Gate != g.ID || s.Filer != "" || s.Via != "" {
		t.Errorf("subject %+v", s)
	}
	g.History = []state.Transition{{To: state.Filed, By: "yuko", Actor: "impgw"}}
	if s := g.Subject(); s.Filer != "yuko" || s.Via != "impgw" {
		t.Errorf("subject %+v, want filed by yuko via impgw", s)
	}
}

// TestDecideResignsForeignApproval: an approval signed by a key the
// decider's keyring does not hold (made with another IMPYARD_HOME), when
// that keyring holds the decider's own key, is signed anew rather than
// repeated: impexec would leave it approved for ever. A decider whose
// own key its keyring does not hold repeats it as before.
func TestDecideResignsForeignApproval(t *testing.T) {
	y := newYard(t)
	g := file(t, y, `{"n":3}`)
	elsewhere, err := approval.Generate("owner")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Move(y, g.ID, Change{To: state.Approved, Signer: elsewhere, By: "alice"}); err != nil {
		t.Fatal(err)
	}
	keys := func(k ...*approval.Key) func() (*approval.Keyring, error) {
		return func() (*approval.Keyring, error) { return ring(t, k...), nil }
	}
	if _, repeated, err := Decide(y, g.ID, Change{To: state.Approved, Signer: testKey, By: "bob"}, keys(elsewhere)); err != nil || !repeated {
		t.Fatalf("decider's key not in its ring: repeated %v, %v; want the approval repeated", repeated, err)
	}
	a, repeated, err := Decide(y, g.ID, Change{To: state.Approved, Signer: testKey, By: "bob"}, keys(testKey))
	if err != nil || repeated || len(a.History) != 3 || a.Approval.Key != testKey.Fingerprint() {
		t.Fatalf("foreign approval: repeated %v, %v, %+v; want it signed anew by %s", repeated, err, a, testKey.Fingerprint())
	}
	if got, _ := Get(y, g.ID); got.Approval.Key != testKey.Fingerprint() {
		t.Errorf("on disk the approval is by %s", got.Approval.Key)
	} else if _, err := got.VerifyApproval(ring(t, testKey)); err != nil {
		t.Errorf("signed anew: %v", err)
	}
}
