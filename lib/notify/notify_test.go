package notify

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/impyard/impyard/lib/event"
	"github.com/impyard/impyard/lib/id"
	"github.com/impyard/impyard/lib/yard"
	"github.com/impyard/impyard/lib/yard/yardtest"
)

func filed(gateID string) event.Event {
	return event.Event{Event: GateFiled, ID: gateID, Imp: "yuko", Seq: 1, TS: time.Date(2026, 12, 1, 2, 0, 0, 0, time.UTC)}
}

func TestEnqueueOncePerEvent(t *testing.T) {
	y := yardtest.New(t)
	g := id.New(id.Gate)
	for range 3 {
		if err := Enqueue(y, filed(g), always); err != nil {
			t.Fatal(err)
		}
	}
	tk := id.New(id.Task)
	for _, e := range []event.Event{
		{Event: "task-added", ID: tk, Imp: "yuko", Seq: 1},
		{Event: "task-running", ID: tk, Imp: "yuko", Seq: 2},
		{Event: TaskFailed, ID: tk, Imp: "yuko", Seq: 3},
		{Event: "gate-approved", ID: g, Imp: "yuko", Seq: 2},
	} {
		if err := Enqueue(y, e, always); err != nil {
			t.Fatal(err)
		}
	}
	got, bad := Pending(y)
	if len(bad) != 0 || len(got) != 2 {
		t.Fatalf("pending %v, bad %v: want the gate-filed and task-failed entries only", got, bad)
	}
	ids := []string{got[0].ID, got[1].ID}
	want := map[string]bool{g + ".1": true, tk + ".3": true}
	if !want[ids[0]] || !want[ids[1]] || ids[0] == ids[1] {
		t.Fatalf("entries %v, want %v", ids, want)
	}
	// Delivered, it is in sent/, and enqueued again (a recovery that
	// runs after delivery) it is not owed again.
	if _, err := Delivered(y, g+".1", []string{"command"}, time.Now()); err != nil {
		t.Fatal(err)
	}
	if err := Enqueue(y, filed(g), always); err != nil {
		t.Fatal(err)
	}
	got, _ = Pending(y)
	if len(got) != 1 || got[0].ID != tk+".3" {
		t.Fatalf("pending after delivery %v", got)
	}
	sent, _ := Sent(y)
	if len(sent) != 1 || sent[0].ID != g+".1" || sent[0].Sent.IsZero() || strings.Join(sent[0].Done, ",") != "command" {
		t.Fatalf("sent %+v", sent)
	}
}

func TestEnqueueRefusesABadID(t *testing.T) {
	y := yardtest.New(t)
	for _, rec := range []string{"../../x", "g-short", "r-0000000000000001", ""} {
		e := filed(rec)
		err := Enqueue(y, e, always)
		if err == nil || !strings.Contains(err.Error(), "invalid notification id") {
			t.Errorf("Enqueue(%q) = %v, want an invalid id", rec, err)
		}
	}
	if _, err := os.Lstat(y.Path("outbox")); !os.IsNotExist(err) {
		t.Fatalf("a refused entry made outbox/: %v", err)
	}
	if err := Enqueue(y, event.Event{Event: GateFiled, ID: id.New(id.Gate), Seq: 0}, always); err == nil {
		t.Fatal("a transition number 0 was accepted")
	}
}

func TestFailedBacksOffThenDelivered(t *testing.T) {
	y := yardtest.New(t)
	g := id.New(id.Gate)
	if err := Enqueue(y, filed(g), always); err != nil {
		t.Fatal(err)
	}
	now := time.Date(2026, 12, 1, 3, 0, 0, 0, time.UTC)
	var en *Entry
	var err error
	for i, wait := range []time.Duration{time.Second, 2 * time.Second, 4 * time.Second} {
		if en, err = Failed(y, g+".1", nil, errors.New("receiver answered 500"), now, time.Second); err != nil {
			t.Fatal(err)
		}
		if en.Attempts != i+1 || !en.Next.Equal(now.Add(wait)) || en.LastError != "receiver answered 500" {
			t.Fatalf("after failure %d: %+v", i+1, en)
		}
	}
	if en, err = Failed(y, g+".1", []string{"webhook"}, errors.New("command: exit 1"), now, time.Second); err != nil {
		t.Fatal(err)
	}
	if strings.Join(en.Done, ",") != "webhook" {
		t.Fatalf("done %v, want the webhook kept", en.Done)
	}
	en, err = Delivered(y, g+".1", []string{"command"}, now)
	if err != nil || strings.Join(en.Done, ",") != "command,webhook" || en.Attempts != 4 {
		t.Fatalf("delivered %+v, %v", en, err)
	}
	// Once sent, it is gone from pending: a second deliverer's record fails.
	if _, err := Delivered(y, g+".1", nil, now); !errors.Is(err, ErrGone) {
		t.Fatalf("delivered twice: %v, want ErrGone", err)
	}
	if _, err := Failed(y, g+".1", nil, errors.New("x"), now, time.Second); !errors.Is(err, ErrGone) {
		t.Fatalf("failed after sent: %v, want ErrGone", err)
	}
}

func TestDrop(t *testing.T) {
	y := yardtest.New(t)
	g := id.New(id.Gate)
	if err := Enqueue(y, filed(g), always); err != nil {
		t.Fatal(err)
	}
	if err := Drop(y, g+".1"); err != nil {
		t.Fatal(err)
	}
	if got, _ := Pending(y); len(got) != 0 {
		t.Fatalf("pending after drop: %v", got)
	}
	if err := Drop(y, "../x.1"); err == nil {
		t.Fatal("Drop took a path")
	}
}

func TestPendingReportsDamagedFiles(t *testing.T) {
	y := yardtest.New(t)
	g := id.New(id.Gate)
	if err := Enqueue(y, filed(g), always); err != nil {
		t.Fatal(err)
	}
	other := id.New(id.Gate) + ".1"
	os.WriteFile(y.Path("outbox", "pending", other+".json"), []byte(`{"schema":"impyard.notification/9"}`), 0o600)
	os.WriteFile(y.Path("outbox", "pending", "stray.json"), []byte(`{}`), 0o600)
	// An entry whose id is not its file name is refused.
	b, _ := os.ReadFile(y.Path("outbox", "pending", g+".1.json"))
	misnamed := id.New(id.Gate) + ".2"
	os.WriteFile(y.Path("outbox", "pending", misnamed+".json"), b, 0o600)
	got, bad := Pending(y)
	if len(got) != 1 || got[0].ID != g+".1" || len(bad) != 3 {
		t.Fatalf("got %v, bad %v", got, bad)
	}
	for _, err := range bad {
		if !strings.Contains(err.Error(), filepath.Join("outbox", "pending")) {
			t.Errorf("error does not name the file: %v", err)
		}
	}
	if _, err := Failed(y, other, nil, errors.New("x"), time.Now(), time.Second); err == nil || !strings.Contains(err.Error(), "notification/9") {
		t.Fatalf("a damaged entry was updated: %v", err)
	}
}

func TestPendingCreatesNothing(t *testing.T) {
	y := yardtest.New(t)
	if got, bad := Pending(y); got != nil || bad != nil {
		t.Fatalf("%v %v", got, bad)
	}
	if _, err := os.Lstat(y.Path("outbox")); !os.IsNotExist(err) {
		t.Fatalf("Pending made outbox/: %v", err)
	}
}

func TestBackoff(t *testing.T) {
	for n, want := range map[int]time.Duration{1: time.Second, 2: 2 * time.Second, 3: 4 * time.Second, 11: MaxBackoff, 100: MaxBackoff} {
		if got := Backoff(time.Second, n); got != want {
			t.Errorf("Backoff(1s, %d) = %v, want %v", n, got, want)
		}
	}
}

func message() *Message {
	m := &Message{Schema: "impyard.notification/1", ID: "g-01m8qhxgdvttn3je.1", Event: GateFiled, At: "2026-12-01T01:01:14Z", Imp: "yuko",
		Gate: "g-01m8qhxgdvttn3je", Intent: "email-send", SHA256: "80706c860dd0bd10", Rationale: "weekly digest",
		Summary: Summarize([]byte(`{"to":["team@ourco.com"],"subject":"Weekly digest","api_key":"sk-live-123","body":"Three things happened this week, and more besides that a summary has no room for."}`), 200, nil),
		Approve: "impgate approve --sha 80706c860dd0bd10 g-01m8qhxgdvttn3je"}
	m.Compose()
	return m
}

const wantText = `yuko wants email-send: gate g-01m8qhxgdvttn3je waits
why: weekly digest
payload: api_key=[redacted]; body=Three things happened this week, and mor…; subject=Weekly digest; to=team@ourco.com
sha256: 80706c860dd0bd10
approve with: impgate approve --sha 80706c860dd0bd10 g-01m8qhxgdvttn3je
id: g-01m8qhxgdvttn3je.1`

func TestRenderFormats(t *testing.T) {
	m := message()
	if m.Text != wantText {
		t.Fatalf("text:\n%s\nwant:\n%s", m.Text, wantText)
	}
	for _, tc := range []struct {
		format, body, ctype, title string
	}{
		{JSON, `{"schema":"impyard.notification/1","id":"g-01m8qhxgdvttn3je.1","event":"gate-filed","at":"2026-12-01T01:01:14Z","imp":"yuko","gate":"g-01m8qhxgdvttn3je","intent":"email-send","sha256":"80706c860dd0bd10","rationale":"weekly digest","summary":"api_key=[redacted]; body=Three things happened this week, and mor…; subject=Weekly digest; to=team@ourco.com","approve":"impgate approve --sha 80706c860dd0bd10 g-01m8qhxgdvttn3je","text":` + jsonString(wantText) + `}`, "application/json", ""},
		{Discord, `{"allowed_mentions":{"parse":[]},"content":` + jsonString(wantText) + `,"username":"impyard"}`, "application/json", ""},
		{Slack, `{"mrkdwn":false,"text":` + jsonString(wantText) + `}`, "application/json", ""},
		{Ntfy, wantText, "text/plain; charset=utf-8", "yuko wants email-send: gate g-01m8qhxgdvttn3je waits"},
	} {
		body, h, err := Render(tc.format, m)
		if err != nil {
			t.Fatal(err)
		}
		if string(body) != tc.body {
			t.Errorf("%s body:\n%s\nwant:\n%s", tc.format, body, tc.body)
		}
		if h["Content-Type"] != tc.ctype || h["Title"] != tc.title {
			t.Errorf("%s headers %v", tc.format, h)
		}
	}
	if _, _, err := Render("teams", m); err == nil || !strings.Contains(err.Error(), `unknown notification format "teams"`) {
		t.Fatalf("unknown format: %v", err)
	}
}

func TestDiscordContentIsCut(t *testing.T) {
	m := message()
	m.Rationale = strings.Repeat("é", 3000)
	m.Compose()
	body, _, err := Render(Discord, m)
	if err != nil {
		t.Fatal(err)
	}
	var v struct{ Content string }
	if err := json.Unmarshal(body, &v); err != nil {
		t.Fatal(err)
	}
	if len(v.Content) > 1903 || !strings.HasSuffix(v.Content, "…") || strings.ContainsRune(v.Content, '\uFFFD') {
		t.Fatalf("content of %d bytes, ends %q", len(v.Content), v.Content[len(v.Content)-8:])
	}
}

func TestRedact(t *testing.T) {
	m := message()
	m.Rationale = "send with key re_live_5ecret and Bearer tok-abcdef"
	m.Summary = "body=re_live_5ecret"
	m.Compose()
	m.Redact([]string{"re_live_5ecret", "tok-abcdef", "", "ab"})
	for _, s := range []string{m.Rationale, m.Summary, m.Text} {
		if strings.Contains(s, "re_live") || strings.Contains(s, "tok-abc") {
			t.Fatalf("a secret is left: %q", s)
		}
	}
	if !strings.Contains(m.Rationale, "send with key "+Redacted) || !strings.Contains(m.Imp, "yuko") {
		t.Fatalf("redaction went too far: %+v", m)
	}
}

func TestSummarize(t *testing.T) {
	for in, want := range map[string]string{
		`{"password":"x","Token":"y","n":3,"ok":true,"list":[1,"two"],"o":{"a":1}}`: `Token=[redacted]; list=1, two; n=3; o={"a":1}; ok=true; password=[redacted]`,
		`[1,2]`:                         `5 bytes`,
		`{"text":"  many\n\tspaces  "}`: `text=many spaces`,
		`{"headers":{"Authorization":"Bearer sk-live-1234","Accept":"*/*"},"to":[{"name":"a","api_key":"k-9876"}]}`: `headers={"Accept":"*/*","Authorization":"[redact…; to={"api_key":"[redacted]","name":"a"}`,
	} {
		if got := Summarize([]byte(in), 200, nil); got != want {
			t.Errorf("Summarize(%s) = %q, want %q", in, got, want)
		}
	}
	if got := Summarize([]byte(`{"a":"`+strings.Repeat("x", 30)+`","b":"`+strings.Repeat("y", 30)+`"}`), 20, nil); got != "a="+strings.Repeat("x", 18)+"…" {
		t.Errorf("limit: %q", got)
	}
}

// A secret at the edge of the cut is replaced whole before the value is
// shortened: no prefix of it is left.
func TestSummarizeRedactsBeforeCutting(t *testing.T) {
	sec := "https://hooks.example/T0KEN-long-enough"
	got := Summarize([]byte(`{"body":"see `+strings.Repeat("x", 30)+sec+`","list":["`+sec+`"]}`), 200, []string{sec})
	if want := "body=see " + strings.Repeat("x", 30) + "[redac…; list=" + Redacted; got != want || strings.Contains(got, "https") {
		t.Fatalf("got %q, want %q", got, want)
	}
}

func jsonString(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}

// The next attempt is kept in whole seconds, rounded up, so it never
// comes before its backoff.
func TestFailedRoundsNextUp(t *testing.T) {
	y := yardtest.New(t)
	g := id.New(id.Gate)
	if err := Enqueue(y, filed(g), always); err != nil {
		t.Fatal(err)
	}
	now := time.Date(2026, 12, 1, 3, 0, 0, 500_000_000, time.UTC)
	en, err := Failed(y, g+".1", nil, errors.New("x"), now, time.Second)
	if err != nil || !en.Next.Equal(now.Add(1500*time.Millisecond)) {
		t.Fatalf("next %v, %v: want %v", en.Next, err, now.Add(1500*time.Millisecond))
	}
}

func TestClaimAndGet(t *testing.T) {
	y := yardtest.New(t)
	g := id.New(id.Gate)
	if err := Enqueue(y, filed(g), always); err != nil {
		t.Fatal(err)
	}
	release, ok, err := Claim(y, g+".1")
	if err != nil || !ok {
		t.Fatalf("first claim: %v %v", ok, err)
	}
	if _, ok2, err := Claim(y, g+".1"); err != nil || ok2 {
		t.Fatalf("a second claim while the first is held: %v %v", ok2, err)
	}
	release()
	release2, ok, err := Claim(y, g+".1")
	if err != nil || !ok {
		t.Fatalf("claim after release: %v %v", ok, err)
	}
	release2()
	en, err := Get(y, g+".1")
	if err != nil || en.Subject != g || en.Seq != 1 {
		t.Fatalf("get %+v %v", en, err)
	}
	if _, err := Delivered(y, g+".1", nil, time.Now()); err != nil {
		t.Fatal(err)
	}
	if _, err := Get(y, g+".1"); !errors.Is(err, ErrGone) {
		t.Fatalf("get after delivery: %v, want ErrGone", err)
	}
	for _, bad := range []string{"../x.1", g} {
		if _, _, err := Claim(y, bad); err == nil {
			t.Errorf("Claim(%q) accepted", bad)
		}
		if _, err := Get(y, bad); err == nil {
			t.Errorf("Get(%q) accepted", bad)
		}
	}
}

// TestRedactFromFourBytes: a secret of four bytes is replaced like any
// other; only shorter values, which would blank common words, are not.
func TestRedactFromFourBytes(t *testing.T) {
	if got := redact("pin 4711, code ab7", []string{"4711", "ab7"}); got != "pin "+Redacted+", code ab7" {
		t.Errorf("got %q", got)
	}
}

// TestSummarizeFindsSecretsInNestedValues: a secret with & inside an
// object is still replaced: the object is not written with & escaped.
func TestSummarizeFindsSecretsInNestedValues(t *testing.T) {
	hook := "https://hooks.example/T/B?k=ab&sig=cd"
	got := Summarize([]byte(`{"target":{"url":"`+hook+`"}}`), 500, []string{hook})
	if strings.Contains(got, "sig=cd") || !strings.Contains(got, Redacted) {
		t.Errorf("summary %q carries the secret", got)
	}
}

// always is a configuration with a receiver for every event.
func always(*yard.Yard, string) bool { return true }

// An event no receiver is configured for leaves no entry, and nothing in
// the outbox at all; notifies is asked only for events a notification
// can be asked for, and with the event's name.
func TestEnqueueWithoutReceiver(t *testing.T) {
	y := yardtest.New(t)
	var asked []string
	only := func(want string) func(*yard.Yard, string) bool {
		return func(_ *yard.Yard, ev string) bool {
			asked = append(asked, ev)
			return ev == want
		}
	}
	tk := id.New(id.Task)
	for _, e := range []event.Event{
		{Event: "task-running", ID: tk, Imp: "yuko", Seq: 2},
		{Event: TaskFailed, ID: tk, Imp: "yuko", Seq: 3},
	} {
		if err := Enqueue(y, e, only(GateFiled)); err != nil {
			t.Fatal(err)
		}
	}
	if len(asked) != 1 || asked[0] != TaskFailed {
		t.Errorf("asked about %v, want task-failed alone", asked)
	}
	if _, err := os.Lstat(y.Path("outbox")); !os.IsNotExist(err) {
		t.Fatalf("outbox written for an event no receiver wants: %v", err)
	}
	g := id.New(id.Gate)
	if err := Enqueue(y, filed(g), only(GateFiled)); err != nil {
		t.Fatal(err)
	}
	if got, _ := Pending(y); len(got) != 1 || got[0].ID != g+".1" {
		t.Fatalf("pending %+v, want the gate-filed entry", got)
	}
}

// Each delivery removes the entries delivered more than SentKeep ago,
// and leaves younger ones and names that are not entries.
func TestDeliveredPrunesSent(t *testing.T) {
	y := yardtest.New(t)
	old, older, young, now := id.New(id.Gate), id.New(id.Gate), id.New(id.Gate), id.New(id.Gate)
	for _, g := range []string{old, older, young} {
		if err := Enqueue(y, filed(g), always); err != nil {
			t.Fatal(err)
		}
		if _, err := Delivered(y, g+".1", []string{"command"}, time.Now()); err != nil {
			t.Fatal(err)
		}
	}
	sentDir := y.Path("outbox", "sent")
	stranger := filepath.Join(sentDir, "notes.txt")
	os.WriteFile(stranger, []byte("mine"), 0o640)
	long := time.Now().Add(-SentKeep - time.Hour)
	for _, p := range []string{filepath.Join(sentDir, old+".1.json"), filepath.Join(sentDir, older+".1.json"), stranger} {
		if err := os.Chtimes(p, long, long); err != nil {
			t.Fatal(err)
		}
	}
	almost := time.Now().Add(-SentKeep + time.Hour)
	os.Chtimes(filepath.Join(sentDir, young+".1.json"), almost, almost)
	if err := Enqueue(y, filed(now), always); err != nil {
		t.Fatal(err)
	}
	if _, err := Delivered(y, now+".1", []string{"command"}, time.Now()); err != nil {
		t.Fatal(err)
	}
	sent, bad := Sent(y)
	var ids []string
	for _, en := range sent {
		ids = append(ids, en.ID)
	}
	if len(ids) != 2 || !slices.Contains(ids, young+".1") || !slices.Contains(ids, now+".1") {
		t.Errorf("sent %v (%v), want %s.1 and %s.1 kept and %s.1 and %s.1 pruned", ids, bad, young, now, old, older)
	}
	if _, err := os.Stat(stranger); err != nil {
		t.Errorf("a file that is not an entry was pruned: %v", err)
	}
}

// cut leaves a string of exactly n bytes whole and never splits a rune.
func TestCut(t *testing.T) {
	for _, tc := range []struct {
		s    string
		n    int
		want string
	}{
		{"abcd", 4, "abcd"},
		{"abcde", 4, "abcd…"},
		{"abé", 3, "ab…"}, // é is two bytes: the cut falls inside it
		{"ééé", 3, "é…"},  // ... and inside the second
		{"日本", 2, "…"},    // no whole rune fits
		{"aé", 2, "a…"},
	} {
		if got := cut(tc.s, tc.n); got != tc.want {
			t.Errorf("cut(%q, %d) = %q, want %q", tc.s, tc.n, got, tc.want)
		}
	}
}
