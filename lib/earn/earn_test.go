package earn

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/impyard/impyard/internal/approvaltest"
	"github.com/impyard/impyard/lib/approval"
	"github.com/impyard/impyard/lib/config"
	"github.com/impyard/impyard/lib/gate"
	"github.com/impyard/impyard/lib/intent"
	"github.com/impyard/impyard/lib/notify"
	"github.com/impyard/impyard/lib/state"
	"github.com/impyard/impyard/lib/yard"
	"github.com/impyard/impyard/lib/yard/yardtest"
)

const orgTOML = `
[[earn]]
intent = "email-send"
imp = "yuko"
after = 3
[executors.email-send]
kind = "http"
url = "https://api.resend.com/emails"
fields = { to = "addresses", cc = "addresses", subject = "text", body = "text", n = "number", link = "url", meta = "object" }
# A receiver, for trust taken back alone: without one no entry is owed.
[notify]
on = []
command = ["true"]
`

type fixture struct {
	y    *yard.Yard
	org  *config.Org
	key  *gate.Change
	home string // IMPYARD_HOME, with key's public half
}

// keys is the keyring of the fixture's home.
func (f *fixture) keys(t *testing.T) *approval.Keyring {
	t.Helper()
	kr, err := approval.LoadKeyring(f.home)
	if err != nil {
		t.Fatal(err)
	}
	return kr
}

// newFixture is a yard whose clock moves one second per transition, so
// decisions have an order.
func newFixture(t *testing.T) *fixture {
	t.Helper()
	y := yardtest.New(t)
	if err := os.WriteFile(y.Path("org.toml"), []byte(orgTOML), 0o640); err != nil {
		t.Fatal(err)
	}
	org, err := config.LoadOrg(y)
	if err != nil {
		t.Fatal(err)
	}
	clock := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	old := state.Now
	state.Now = func() time.Time { clock = clock.Add(time.Second); return clock }
	t.Cleanup(func() { state.Now = old })
	home := t.TempDir()
	key := approvaltest.Key(t, home)
	return &fixture{y: y, org: org, key: &gate.Change{Signer: key}, home: home}
}

func (f *fixture) file(t *testing.T, body, actor string) *gate.Gate {
	t.Helper()
	g, err := gate.File(f.y, gate.FileOptions{Imp: "yuko", Intent: "email-send", Payload: []byte(body), By: "yuko", Actor: actor})
	if err != nil {
		t.Fatal(err)
	}
	return g
}

func (f *fixture) move(t *testing.T, gid, to, by, actor string) *gate.Gate {
	t.Helper()
	g, err := gate.Move(f.y, gid, gate.Change{To: to, By: by, Actor: actor, Signer: f.key.Signer})
	if err != nil {
		t.Fatal(err)
	}
	return g
}

// approved files a proposal, has the owner approve it and executes it.
func (f *fixture) approved(t *testing.T, body string) *gate.Gate {
	t.Helper()
	g := f.file(t, body, "impgw")
	f.move(t, g.ID, state.Approved, "alice", "impgate")
	f.move(t, g.ID, state.Executing, "impexec", "impexec")
	return f.move(t, g.ID, state.Executed, "impexec", "impexec")
}

func (f *fixture) denied(t *testing.T, body string) *gate.Gate {
	t.Helper()
	g := f.file(t, body, "impgw")
	return f.move(t, g.ID, state.Denied, "alice", "impgate")
}

func (f *fixture) propose(t *testing.T) *gate.Gate {
	t.Helper()
	g, err := Propose(f.y, f.org, "yuko", "email-send")
	if err != nil {
		t.Fatal(err)
	}
	return g
}

func mail(to string) string {
	return fmt.Sprintf(`{"to":[%q],"subject":"digest","body":"b%d"}`, to, time.Now().UnixNano())
}

// Three clean approvals file exactly one trust-promote gate; a fourth
// while it waits files none; once approved, its gates never count again.
func TestProposeOnce(t *testing.T) {
	f := newFixture(t)
	var ids []string
	for i := range 3 {
		if g := f.propose(t); g != nil {
			t.Fatalf("promotion after %d approvals: %s", i, g.ID)
		}
		ids = append(ids, f.approved(t, mail("team@ourco.com")).ID)
	}
	p := f.propose(t)
	if p == nil || p.Intent != intent.TrustPromote || p.Imp != "yuko" || p.State != state.Filed {
		t.Fatalf("want a filed trust-promote gate, got %+v", p)
	}
	e, err := Parse(p.Payload)
	if err != nil {
		t.Fatal(err)
	}
	if e.Match["to"] != "team@ourco.com" || e.Match["subject"] != "digest" || strings.Join(e.Free, ",") != "body" || strings.Join(e.Gates, ",") != strings.Join(ids, ",") {
		t.Errorf("entry %+v", e)
	}
	for range 3 {
		f.approved(t, mail("team@ourco.com"))
		if g := f.propose(t); g != nil {
			t.Fatalf("a second promotion while the first waits: %s", g.ID)
		}
	}
	f.move(t, p.ID, state.Approved, "alice", "impgate")
	f.approved(t, mail("team@ourco.com"))
	if g := f.propose(t); g != nil {
		t.Fatalf("a promotion from approvals made before the first was decided: %s", g.ID)
	}
	streak, waiting, err := Streak(f.y, "yuko", "email-send")
	if err != nil || waiting != nil || len(streak) != 1 {
		t.Errorf("after the promotion the streak is %d (waiting %v, %v); want the one approval decided after it", len(streak), waiting, err)
	}
}

// A deny of the (imp, intent) resets the count; an auto-approval, a gate
// filed from the trusted side, a failed execution and another intent or
// imp do not count.
func TestStreak(t *testing.T) {
	f := newFixture(t)
	f.approved(t, mail("a@ourco.com"))
	f.approved(t, mail("a@ourco.com"))
	f.denied(t, mail("a@ourco.com"))
	f.approved(t, mail("a@ourco.com"))
	auto, err := gate.File(f.y, gate.FileOptions{Imp: "yuko", Intent: "email-send", Payload: []byte(mail("a@ourco.com")), By: "trust: org#1", Actor: "impgw", Approved: true, Signer: f.key.Signer})
	if err != nil {
		t.Fatal(err)
	}
	f.move(t, auto.ID, state.Executing, "impexec", "impexec")
	f.move(t, auto.ID, state.Executed, "impexec", "impexec")
	byHand := f.file(t, mail("a@ourco.com"), "impgate")
	f.move(t, byHand.ID, state.Approved, "alice", "impgate")
	f.move(t, byHand.ID, state.Executing, "impexec", "impexec")
	f.move(t, byHand.ID, state.Executed, "impexec", "impexec")
	failed := f.file(t, mail("a@ourco.com"), "impgw")
	f.move(t, failed.ID, state.Approved, "alice", "impgate")
	f.move(t, failed.ID, state.Failed, "impexec", "impexec")
	other, err := gate.File(f.y, gate.FileOptions{Imp: "rex", Intent: "email-send", Payload: []byte(mail("a@ourco.com")), By: "rex", Actor: "impgw"})
	if err != nil {
		t.Fatal(err)
	}
	f.move(t, other.ID, state.Denied, "alice", "impgate")
	streak, _, err := Streak(f.y, "yuko", "email-send")
	if err != nil || len(streak) != 1 {
		t.Fatalf("streak %d (%v), want 1: only the approval after the deny", len(streak), err)
	}
	if g := f.propose(t); g != nil {
		t.Fatalf("promotion with a streak of 1: %s", g.ID)
	}
	f.approved(t, mail("b@ourco.com"))
	f.approved(t, mail("a@ourco.com"))
	p := f.propose(t)
	if p == nil {
		t.Fatal("no promotion after three approvals since the deny")
	}
	e, _ := Parse(p.Payload)
	if e.Match["to"] != "{a@ourco.com,b@ourco.com}" {
		t.Errorf("to: %q", e.Match["to"])
	}
}

func gates(t *testing.T, f *fixture, bodies ...string) []*gate.Gate {
	var gs []*gate.Gate
	for _, b := range bodies {
		gs = append(gs, f.file(t, b, "impgw"))
	}
	return gs
}

func TestNarrowest(t *testing.T) {
	f := newFixture(t)
	var many, spread []string
	for i := range MaxAddresses + 1 {
		many = append(many, fmt.Sprintf(`{"to":["u%d@ourco.com"]}`, i))
		spread = append(spread, fmt.Sprintf(`{"to":["u@d%d.com"]}`, i))
	}
	for _, tc := range []struct {
		name   string
		bodies []string
		match  map[string]string
		free   string
		err    string
	}{
		{"same", []string{`{"to":["A@OurCo.com"],"subject":"s","n":3}`, `{"to":["a@ourco.com"],"subject":"s","n":3}`}, map[string]string{"to": "a@ourco.com", "subject": "s", "n": "3"}, "", ""},
		{"varied", []string{`{"to":["a@x.com"],"subject":"s1"}`, `{"to":["b@x.com","a@x.com"],"subject":"s2","body":"b"}`}, map[string]string{"to": "{a@x.com,b@x.com}"}, "body,subject", ""},
		{"metacharacters", []string{`{"to":["a*b@x.com"]}`, `{"to":["c{d}?@x.com"]}`}, map[string]string{"to": `{a\*b@x.com,c\{d\}\?@x.com}`}, "", ""},
		{"a domain", many, map[string]string{"to": "*@ourco.com"}, "", ""},
		{"no one domain", spread, nil, "", "more than one domain"},
		{"a URL that varied", []string{`{"to":["a@x.com"],"link":"https://x.com/a"}`, `{"to":["a@x.com"],"link":"https://y.com/b"}`}, nil, "", `field "link" (url) varied`},
		{"an object", []string{`{"to":["a@x.com"],"meta":{"k":1}}`, `{"to":["a@x.com"],"meta":{"k":1}}`}, nil, "", `field "meta" (object)`},
		{"address sometimes absent", []string{`{"to":["a@x.com"],"cc":["b@x.com"]}`, `{"to":["a@x.com"]}`}, nil, "", `address field "cc" is absent`},
	} {
		gs := gates(t, f, tc.bodies...)
		e, err := Narrowest(f.org, "email-send", gs)
		if tc.err != "" {
			if err == nil || !errors.Is(err, ErrNoNarrowEntry) || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("%s: got %v, want %q", tc.name, err, tc.err)
			}
			continue
		}
		if err != nil {
			t.Errorf("%s: %v", tc.name, err)
			continue
		}
		if fmt.Sprint(e.Match) != fmt.Sprint(tc.match) || strings.Join(e.Free, ",") != tc.free || !e.Earned || e.Level != config.Auto || len(e.Gates) != len(gs) {
			t.Errorf("%s: %+v", tc.name, e)
		}
	}
	if _, err := Narrowest(f.org, "message-user", nil); !errors.Is(err, ErrNoNarrowEntry) {
		t.Errorf("untyped intent: %v", err)
	}
}

const impTOML = `# yuko writes the digest
rootfs = "/srv/rootfs"

[[trust]]
intent = "email-send"
match = { to = "*@spam.example" }
level = "deny"

[[trust]]
intent = "email-send"
match = { body = "*password*" }
level = "gate"
`

// An approved promotion is appended to imp.toml, the old file kept; a
// resumed execution does not append it again; a deny the entry would have
// approved removes it and keeps everything else as written.
func TestAppendAndDenied(t *testing.T) {
	f := newFixture(t)
	p := config.ImpPath(f.y, "yuko")
	os.MkdirAll(filepath.Dir(p), 0o750)
	os.WriteFile(p, []byte(impTOML), 0o640)
	gs := []*gate.Gate{f.approved(t, mail("team@ourco.com")), f.approved(t, mail("team@ourco.com")), f.approved(t, mail("team@ourco.com"))}
	promote := f.propose(t)
	promote = f.move(t, promote.ID, state.Approved, "alice", "impgate")

	if _, err := Append(f.y, f.org, f.keys(t), promote, []byte(`{"intent":"email-send","level":"auto","earned":false,"gates":["`+gs[0].ID+`"]}`)); !errors.Is(err, ErrNotEntry) {
		t.Errorf("not earned: %v", err)
	}
	if _, err := Append(f.y, f.org, f.keys(t), promote, []byte(`{"intent":"email-send","match":{"from":"x"},"level":"auto","earned":true,"gates":["`+gs[0].ID+`"]}`)); err == nil || !strings.Contains(err.Error(), `match key "from" names no declared field`) {
		t.Errorf("undeclared field: %v", err)
	}
	if b, _ := os.ReadFile(p); string(b) != impTOML {
		t.Fatalf("a refused entry changed imp.toml:\n%s", b)
	}

	detail, err := Append(f.y, f.org, f.keys(t), promote, promote.Payload)
	if err != nil || !strings.Contains(detail, "previous kept as imp.toml.1") {
		t.Fatalf("Append: %q %v", detail, err)
	}
	if b, _ := os.ReadFile(p + ".1"); string(b) != impTOML {
		t.Errorf("backup:\n%s", b)
	}
	im, err := config.LoadImp(f.y, "yuko")
	if err != nil || len(im.Trust) != 3 || !im.Trust[2].Earned || len(im.Trust[2].Gates) != 3 || im.Trust[2].Match["to"] != "team@ourco.com" {
		t.Fatalf("imp.toml after: %+v %v", im, err)
	}
	if b, _ := os.ReadFile(p); !strings.HasPrefix(string(b), impTOML) || !strings.Contains(string(b), "# earned: approved with trust-promote gate "+promote.ID) {
		t.Errorf("imp.toml:\n%s", b)
	}
	if detail, err := Append(f.y, f.org, f.keys(t), promote, promote.Payload); err != nil || !strings.Contains(detail, "already") {
		t.Errorf("second Append: %q %v", detail, err)
	}
	if _, err := os.Stat(p + ".2"); err == nil {
		t.Errorf("a second Append rewrote imp.toml")
	}

	// A deny the entry would not have approved leaves it.
	if detail, err := denyRecorded(f, f.denied(t, mail("new@ourco.com"))); detail != "" || err != nil {
		t.Errorf("Denied of an uncovered gate: %q %v", detail, err)
	}
	// Nor does one a hand-written gate entry holds back: the owner agrees
	// with the ladder.
	if detail, err := denyRecorded(f, f.denied(t, `{"to":["team@ourco.com"],"subject":"digest","body":"the password"}`)); detail != "" || err != nil {
		t.Errorf("Denied of a gate a hand-written entry gated: %q %v", detail, err)
	}
	covered := f.denied(t, `{"to":["team@ourco.com"],"subject":"digest","body":"other"}`)
	detail, err = denyRecorded(f, covered)
	if err != nil || !strings.Contains(detail, "1 earned entry for email-send removed") || !strings.Contains(detail, covered.ID) {
		t.Fatalf("Denied: %q %v", detail, err)
	}
	if b, _ := os.ReadFile(p); string(b) != impTOML {
		t.Errorf("after the removal imp.toml is not what the owner wrote:\n%s", b)
	}
	if _, err := os.Stat(p + ".2"); err != nil {
		t.Errorf("no backup of the file with the earned entry: %v", err)
	}
	// An execution of the promotion resumed after the removal does not
	// put the entry back.
	if _, err := Append(f.y, f.org, f.keys(t), promote, promote.Payload); !errors.Is(err, ErrStreakBroken) {
		t.Errorf("Append after a deny removed the entry: %v", err)
	}
	if b, _ := os.ReadFile(p); string(b) != impTOML {
		t.Errorf("a resumed Append put the removed entry back:\n%s", b)
	}
	// The owner is told, once, under the id of the deny.
	var told []*notify.Entry
	for _, where := range []func(*yard.Yard) ([]*notify.Entry, []error){notify.Pending, notify.Sent} {
		es, _ := where(f.y)
		for _, e := range es {
			if e.Event == notify.TrustEarnedRemoved {
				told = append(told, e)
			}
		}
	}
	if len(told) != 1 || told[0].Subject != covered.ID || told[0].ID != notify.EventID(covered.ID, len(covered.History)) {
		t.Errorf("outbox entries of the removal: %+v, want one for %s", told, covered.ID)
	}
	journal, _ := os.ReadFile(f.y.Path("journal", "yuko", "events.jsonl"))
	audit, _ := os.ReadFile(f.y.Decisions())
	for _, want := range []string{`"event":"` + EventEarned + `"`, `"event":"` + EventRemoved + `"`} {
		if !strings.Contains(string(journal), want) || !strings.Contains(string(audit), want) {
			t.Errorf("journal or audit log lacks %s", want)
		}
	}
}

// An earned entry written in a form the remover does not know is not
// removed silently: the owner is told to remove it by hand.
func TestRemoveOddForm(t *testing.T) {
	odd := "trust = [{ intent = \"email-send\", level = \"auto\", earned = true, gates = [\"g-0000000000000001\"] }]\n"
	if _, _, err := removeEarned("imp.toml", []byte(odd), "email-send"); err == nil || !strings.Contains(err.Error(), "remove it by hand") {
		t.Errorf("got %v", err)
	}
	next, n, err := removeEarned("imp.toml", []byte(impTOML), "email-send")
	if err != nil || n != 0 || string(next) != impTOML {
		t.Errorf("nothing to remove: %q %d %v", next, n, err)
	}
	// A match table written below an earned entry would, with the entry
	// cut, narrow the hand-written entry above it.
	sub := "[[trust]]\nintent = \"email-send\"\nlevel = \"gate\"\n\n[[trust]]\nintent = \"email-send\"\nlevel = \"auto\"\nearned = true\ngates = [\"g-0000000000000001\"]\n[trust.match]\nto = \"a@x.com\"\n"
	if next, _, err := removeEarned("imp.toml", []byte(sub), "email-send"); err == nil || !strings.Contains(err.Error(), "would change others") {
		t.Errorf("an earned entry with a [trust.match] table: %v\n%s", err, next)
	}
	// Every form the remover writes, and others beside it, still go.
	both := impTOML + "\n[[trust]]\nintent = \"email-send\"\nmatch = { to = \"a@x.com\" }\nlevel = \"auto\"\nearned = true\ngates = [\"g-0000000000000001\"]\n" +
		"\n[[trust]]\nintent = \"pr-open\"\nlevel = \"auto\"\nearned = true\ngates = [\"g-0000000000000002\"]\n"
	next, n, err = removeEarned("imp.toml", []byte(both), "email-send")
	if err != nil || n != 1 || !strings.HasPrefix(string(next), impTOML) || !strings.Contains(string(next), "pr-open") || strings.Contains(string(next), "a@x.com") {
		t.Errorf("removing one of two earned entries: %d %v\n%s", n, err, next)
	}
}

// An imp.toml that does not load is not rewritten.
func TestAppendBrokenImp(t *testing.T) {
	f := newFixture(t)
	p := config.ImpPath(f.y, "yuko")
	os.MkdirAll(filepath.Dir(p), 0o750)
	os.WriteFile(p, []byte("rootfs = \n"), 0o640)
	gs := []*gate.Gate{f.approved(t, mail("a@ourco.com")), f.approved(t, mail("a@ourco.com")), f.approved(t, mail("a@ourco.com"))}
	promote := f.propose(t)
	if promote == nil {
		t.Fatal("no promotion")
	}
	_ = gs
	promote = f.move(t, promote.ID, state.Approved, "alice", "impgate")
	if _, err := Append(f.y, f.org, f.keys(t), promote, promote.Payload); err == nil || !strings.Contains(err.Error(), "not changed") {
		t.Errorf("got %v", err)
	}
	if b, _ := os.ReadFile(p); string(b) != "rootfs = \n" {
		t.Errorf("imp.toml changed: %q", b)
	}
}

// Of a deny and approvals decided in the same second, the deny counts as
// the later: whole seconds cannot say which came first, and a deny is
// never outrun.
func TestStreakSameSecond(t *testing.T) {
	f := newFixture(t)
	now := time.Date(2026, 12, 1, 1, 0, 0, 0, time.UTC)
	state.Now = func() time.Time { return now }
	f.approved(t, mail("a@ourco.com"))
	f.denied(t, mail("a@ourco.com"))
	f.approved(t, mail("a@ourco.com"))
	f.approved(t, mail("a@ourco.com"))
	if streak, _, err := Streak(f.y, "yuko", "email-send"); err != nil || len(streak) != 0 {
		t.Errorf("streak %d (%v), want 0", len(streak), err)
	}
	now = now.Add(time.Second)
	f.approved(t, mail("a@ourco.com"))
	f.approved(t, mail("a@ourco.com"))
	if streak, _, err := Streak(f.y, "yuko", "email-send"); err != nil || len(streak) != 2 {
		t.Errorf("streak %d (%v), want the 2 approvals of the next second", len(streak), err)
	}
}

// A deny of the imp's proposal while its promotion waits breaks the
// approvals the promotion rests on: approved after that, it appends
// nothing. Denies that are not the owner's breaking a proposal's streak
// (a trust entry's, one of a gate no imp proposed, one of another intent,
// one before the filing) leave it whole.
func TestAppendAfterStreakBroken(t *testing.T) {
	f := newFixture(t)
	p := config.ImpPath(f.y, "yuko")
	os.MkdirAll(filepath.Dir(p), 0o750)
	os.WriteFile(p, []byte(impTOML), 0o640)
	for range 3 {
		f.approved(t, mail("team@ourco.com"))
	}
	f.denied(t, mail("team@ourco.com"))
	for range 3 {
		f.approved(t, mail("team@ourco.com"))
	}
	promote := f.propose(t)
	if promote == nil {
		t.Fatal("no promotion after three clean approvals")
	}
	byTrust := f.file(t, mail("team@ourco.com"), "impgw")
	byTrust = f.move(t, byTrust.ID, state.Denied, "trust: imps/yuko/imp.toml:3", "impgw")
	byHand := f.file(t, mail("team@ourco.com"), "impgate")
	byHand = f.move(t, byHand.ID, state.Denied, "alice", "impgate")
	other, err := gate.File(f.y, gate.FileOptions{Imp: "yuko", Intent: "message-user", Payload: []byte(`{"text":"hi"}`), By: "yuko", Actor: "impgw"})
	if err != nil {
		t.Fatal(err)
	}
	other = f.move(t, other.ID, state.Denied, "alice", "impgate")
	for _, g := range []*gate.Gate{byTrust, byHand, other} {
		if w, err := Broke(f.y, g); w != nil || err != nil {
			t.Errorf("deny of %s (%s by %s) broke %v (%v)", g.ID, g.Intent, g.History[len(g.History)-1].By, w, err)
		}
	}
	if d, _, err := brokenBy(f.y, "yuko", "email-send", promote.Created); d != nil || err != nil {
		t.Errorf("the promotion counts as broken by %v (%v) before the owner denied a proposal", d, err)
	}
	// A gate that cannot be read might be the deny: nothing is appended.
	damaged := filepath.Join(f.y.Root, "gates", "resolved", "g-0000000000000009.json")
	if err := os.WriteFile(damaged, []byte("{not json"), 0o640); err != nil {
		t.Fatal(err)
	}
	if _, _, err := brokenBy(f.y, "yuko", "email-send", promote.Created); err == nil || !strings.Contains(err.Error(), "g-0000000000000009") {
		t.Errorf("a damaged gate file: %v", err)
	}
	os.Remove(damaged)

	broken := f.denied(t, mail("team@ourco.com"))
	if w, err := Broke(f.y, broken); err != nil || w == nil || w.ID != promote.ID {
		t.Fatalf("Broke after the owner's deny: %v %v, want %s", w, err, promote.ID)
	}
	promote = f.move(t, promote.ID, state.Approved, "alice", "impgate")
	if w, err := Broke(f.y, broken); w != nil || err != nil {
		t.Errorf("Broke once the promotion was decided: %v %v", w, err)
	}
	_, err = Append(f.y, f.org, f.keys(t), promote, promote.Payload)
	if !errors.Is(err, ErrStreakBroken) || !strings.Contains(err.Error(), broken.ID) || !strings.Contains(err.Error(), promote.ID) {
		t.Fatalf("Append after the streak was broken: %v", err)
	}
	if b, _ := os.ReadFile(p); string(b) != impTOML {
		t.Errorf("a refused promotion changed imp.toml:\n%s", b)
	}
	if _, err := os.Stat(p + ".1"); err == nil {
		t.Error("a refused promotion left imp.toml.1")
	}
}

// Wide names an address field matched by its domain and each free field,
// and nothing for exact matches.
func TestWide(t *testing.T) {
	f := newFixture(t)
	var many []string
	for i := range MaxAddresses + 1 {
		many = append(many, fmt.Sprintf(`{"to":["u%d@ourco.com"],"subject":"s","body":"b%d"}`, i, i))
	}
	e, err := Narrowest(f.org, "email-send", gates(t, f, many...))
	if err != nil {
		t.Fatal(err)
	}
	if got, want := strings.Join(e.Wide(), "; "), "to: any address at ourco.com, not only the addresses approved; body: free, any value"; got != want {
		t.Errorf("Wide of %+v:\n got %s\nwant %s", e, got, want)
	}
	exact, err := Narrowest(f.org, "email-send", gates(t, f, `{"to":["a@x.com","b@x.com"],"subject":"s"}`, `{"to":["b@x.com"],"subject":"s"}`))
	if err != nil {
		t.Fatal(err)
	}
	if w := exact.Wide(); len(w) != 0 {
		t.Errorf("Wide of exact matches: %q", w)
	}
}

// denyRecorded runs Denied for a gate the owner has denied, as a repeated
// deny does.
func denyRecorded(f *fixture, g *gate.Gate) (string, error) {
	return Denied(f.y, g, "alice", len(g.History))
}

// handPromotion files a trust-promote gate by hand, as a writer of the
// yard can, with body as its payload, and has the owner approve it.
func (f *fixture) handPromotion(t *testing.T, body string) *gate.Gate {
	t.Helper()
	g, err := gate.File(f.y, gate.FileOptions{Imp: "yuko", Intent: intent.TrustPromote, Payload: []byte(body),
		Rationale: "3 consecutive approvals of email-send by the owner, no deny between them: this auto entry covers them",
		By:        Actor, Actor: Actor, Trust: &gate.Trust{Level: config.Gate, Why: "a trust-promote gate always waits for the owner"}})
	if err != nil {
		t.Fatal(err)
	}
	return f.move(t, g.ID, state.Approved, "alice", "impgate")
}

// TestAppendRederives: a trust-promote gate written by hand and approved
// by the owner appends nothing unless its entry is exactly the one the
// owner's signed approvals derive: not one that frees an address field,
// not a wider one, not one filed after another consumed the streak, not
// one resting on a forged approval, not one with no [[earn]] behind it.
// The promotion impyard files itself is appended.
func TestAppendRederives(t *testing.T) {
	// setup is a yard where yuko's last three email-sends were approved
	// by the owner and executed.
	setup := func() (f *fixture, p, ids string, gs []*gate.Gate) {
		f = newFixture(t)
		p = config.ImpPath(f.y, "yuko")
		os.MkdirAll(filepath.Dir(p), 0o750)
		os.WriteFile(p, []byte(impTOML), 0o640)
		gs = []*gate.Gate{f.approved(t, mail("team@ourco.com")), f.approved(t, mail("team@ourco.com")), f.approved(t, mail("team@ourco.com"))}
		return f, p, fmt.Sprintf(`[%q,%q,%q]`, gs[0].ID, gs[1].ID, gs[2].ID), gs
	}
	unchanged := func(p, name string) {
		t.Helper()
		if b, _ := os.ReadFile(p); string(b) != impTOML {
			t.Fatalf("%s changed imp.toml:\n%s", name, b)
		}
	}

	f, p, ids, _ := setup()
	free := f.handPromotion(t, `{"intent":"email-send","free":["body","subject","to","cc"],"level":"auto","earned":true,"gates":`+ids+`}`)
	if _, err := Append(f.y, f.org, f.keys(t), free, free.Payload); !errors.Is(err, ErrNotEntry) || !strings.Contains(err.Error(), `field "to" (addresses) is free`) {
		t.Errorf("addresses free: %v", err)
	}
	unchanged(p, "a promotion freeing addresses")

	f, p, ids, gs := setup()
	wide := f.handPromotion(t, `{"intent":"email-send","match":{"to":"*@ourco.com"},"free":["body"],"level":"auto","earned":true,"gates":`+ids+`}`)
	if _, err := Append(f.y, f.org, f.keys(t), wide, wide.Payload); !errors.Is(err, ErrNotDerived) ||
		!strings.Contains(err.Error(), `the approvals it rests on derive {"intent":"email-send","match":{"subject":"digest","to":"team@ourco.com"},"free":["body"]`) {
		t.Errorf("wider than derived: %v", err)
	}
	unchanged(p, "a promotion wider than derived")

	// The entry the approvals derive, written by hand after the wide one
	// was decided: that decision consumed the approvals.
	derived, err := Narrowest(f.org, "email-send", gs)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := json.Marshal(derived)
	same := f.handPromotion(t, string(body))
	if _, err := Append(f.y, f.org, f.keys(t), same, same.Payload); !errors.Is(err, ErrNotDerived) || !strings.Contains(err.Error(), "which consumed it") {
		t.Errorf("a promotion filed after another consumed the streak: %v", err)
	}
	unchanged(p, "a promotion with no streak")

	f, p, _, gs = setup()
	// Two of three approvals, skipping the one between them, with
	// [[earn]] asking for two: refused; with [[earn]] asking for three,
	// refused for naming two.
	skip := f.handPromotion(t, fmt.Sprintf(`{"intent":"email-send","match":{"subject":"digest","to":"team@ourco.com"},"free":["body"],"level":"auto","earned":true,"gates":[%q,%q]}`, gs[0].ID, gs[2].ID))
	two := *f.org
	two.Earn = slices.Clone(f.org.Earn)
	two.Earn[0].After = 2
	if _, err := Append(f.y, &two, f.keys(t), skip, skip.Payload); !errors.Is(err, ErrNotDerived) || !strings.Contains(err.Error(), "leaves out gate "+gs[1].ID) {
		t.Errorf("skipping an approval: %v", err)
	}
	if _, err := Append(f.y, f.org, f.keys(t), skip, skip.Payload); !errors.Is(err, ErrNotDerived) || !strings.Contains(err.Error(), "rests on 2 gates, [[earn]] for yuko email-send asks for 3") {
		t.Errorf("fewer gates than [[earn]] asks for: %v", err)
	}
	unchanged(p, "a promotion skipping an approval")

	// Three approvals with a deny by the owner after the first: no
	// streak, however the promotion is written; nor one naming the deny.
	f, p, _, before := setup()
	first := before[2]
	denied := f.denied(t, mail("team@ourco.com"))
	gs = []*gate.Gate{f.approved(t, mail("team@ourco.com")), f.approved(t, mail("team@ourco.com"))}
	across := f.handPromotion(t, fmt.Sprintf(`{"intent":"email-send","match":{"subject":"digest","to":"team@ourco.com"},"free":["body"],"level":"auto","earned":true,"gates":[%q,%q,%q]}`, first.ID, gs[0].ID, gs[1].ID))
	if _, err := Append(f.y, f.org, f.keys(t), across, across.Payload); !errors.Is(err, ErrStreakBroken) || !strings.Contains(err.Error(), "denied gate "+denied.ID) {
		t.Errorf("across a deny: %v", err)
	}
	withDeny := f.handPromotion(t, fmt.Sprintf(`{"intent":"email-send","match":{"subject":"digest","to":"team@ourco.com"},"free":["body"],"level":"auto","earned":true,"gates":[%q,%q,%q]}`, denied.ID, gs[0].ID, gs[1].ID))
	if _, err := Append(f.y, f.org, f.keys(t), withDeny, withDeny.Payload); !errors.Is(err, ErrNotDerived) || !strings.Contains(err.Error(), "gate "+denied.ID+" is not a proposal of yuko email-send approved by the owner and executed") {
		t.Errorf("naming a denied gate: %v", err)
	}
	unchanged(p, "a promotion across a deny")

	// One of three approvals made with the gateway's key, as the owner:
	// the gateway approves only by trust entries, so it is refused.
	f, p, _, _ = setup()
	gw, err := approval.Ensure(f.home, approval.Gateway, io.Discard, "test")
	if err != nil {
		t.Fatal(err)
	}
	byGateway := f.file(t, mail("team@ourco.com"), "impgw")
	if _, err := gate.Move(f.y, byGateway.ID, gate.Change{To: state.Approved, By: "alice", Actor: "impgate", Signer: gw}); err != nil {
		t.Fatal(err)
	}
	f.move(t, byGateway.ID, state.Executing, "impexec", "impexec")
	f.move(t, byGateway.ID, state.Executed, "impexec", "impexec")
	promote := f.propose(t)
	promote = f.move(t, promote.ID, state.Approved, "alice", "impgate")
	if _, err := Append(f.y, f.org, f.keys(t), promote, promote.Payload); !errors.Is(err, ErrNotDerived) || !strings.Contains(err.Error(), "gate "+byGateway.ID+" was approved with the gateway's key") {
		t.Errorf("resting on the gateway's approval: %v", err)
	}
	unchanged(p, "a promotion resting on the gateway's approval")

	// The promotion impyard files, once one approval it rests on is
	// forged on disk: nothing is appended.
	f, p, _, gs = setup()
	promote = f.propose(t)
	if promote == nil {
		t.Fatal("no promotion")
	}
	promote = f.move(t, promote.ID, state.Approved, "alice", "impgate")
	gp := f.y.Path("gates", "resolved", gs[1].ID+".json")
	orig, _ := os.ReadFile(gp)
	os.WriteFile(gp, []byte(strings.ReplaceAll(string(orig), `"by": "alice"`, `"by": "mallory"`)), 0o640)
	if _, err := Append(f.y, f.org, f.keys(t), promote, promote.Payload); !errors.Is(err, approval.ErrInvalid) || !strings.Contains(err.Error(), gs[1].ID) {
		t.Errorf("resting on a forged approval: %v", err)
	}
	unchanged(p, "a promotion resting on a forged approval")
	os.WriteFile(gp, orig, 0o640)

	// Without [[earn]] for the (imp, intent), nothing derives a promotion.
	noEarn := *f.org
	noEarn.Earn = nil
	if _, err := Append(f.y, &noEarn, f.keys(t), promote, promote.Payload); !errors.Is(err, ErrNotDerived) || !strings.Contains(err.Error(), "no [[earn]]") {
		t.Errorf("without [[earn]]: %v", err)
	}
	unchanged(p, "a promotion without [[earn]]")

	if detail, err := Append(f.y, f.org, f.keys(t), promote, promote.Payload); err != nil || !strings.Contains(detail, "appended") {
		t.Fatalf("the genuine promotion: %q %v", detail, err)
	}
}
