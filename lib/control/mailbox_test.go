package control

import (
	"net/http"
	"os"
	"strings"
	"testing"

	"github.com/impyard/impyard/lib/mailbox"
	"github.com/impyard/impyard/lib/run"
	"github.com/impyard/impyard/lib/store"
	"github.com/impyard/impyard/lib/token"
)

// liveRun files run r-0000000000000001 of imp, starting, with a brief
// that carries the messages briefed.
func liveRun(t *testing.T, f *fixture, imp string, briefed ...string) {
	t.Helper()
	if _, err := run.Create(f.y, &run.Run{ID: "r-0000000000000001", Imp: imp, Task: "t-0000000000000001", Created: store.Now()}, "test", "test", "test"); err != nil {
		t.Fatal(err)
	}
	msgs := []map[string]string{}
	for _, m := range briefed {
		msgs = append(msgs, map[string]string{"id": m})
	}
	b, _ := store.Encode(map[string]any{"schema": store.Schema(run.BriefKind, run.BriefMajor), "mailbox": msgs})
	if err := os.WriteFile(run.Path(f.y, "r-0000000000000001", run.BriefFile), b, 0o644); err != nil {
		t.Fatal(err)
	}
}

func messages(t *testing.T, out map[string]any) []string {
	t.Helper()
	list, ok := out["messages"].([]any)
	if !ok {
		t.Fatalf("no messages list: %v", out)
	}
	var ids []string
	for _, m := range list {
		ids = append(ids, m.(map[string]any)["id"].(string))
	}
	return ids
}

// TestMailboxPoll: a running box's poll gets the messages left since its
// brief, once, marked delivered to its run; not those its brief carries,
// nor another imp's.
func TestMailboxPoll(t *testing.T) {
	f := newFixture(t)
	briefed, _ := mailbox.Send(f.y, "yuko", "alice", "in the brief")
	liveRun(t, f, "yuko", briefed)
	tok := f.token(t, "yuko", "")
	if code, out := f.do(t, tok, "GET", "/v1/mailbox", ""); code != 200 || len(messages(t, out)) != 0 {
		t.Fatalf("first poll: %d %v; want nothing new", code, out)
	}
	later, _ := mailbox.Send(f.y, "yuko", "alice", "skip the sports section")
	other, _ := mailbox.Send(f.y, "rex", "alice", "for rex only")
	code, out := f.do(t, tok, "GET", "/v1/mailbox", "")
	if got := messages(t, out); code != 200 || len(got) != 1 || got[0] != later {
		t.Fatalf("poll after tell: %d %v; want %s", code, out, later)
	}
	if m := out["messages"].([]any)[0].(map[string]any); m["text"] != "skip the sports section" || m["delivered_to"] != "r-0000000000000001" {
		t.Errorf("message: %v", m)
	}
	if code, out := f.do(t, tok, "GET", "/v1/mailbox", ""); code != 200 || len(messages(t, out)) != 0 {
		t.Errorf("second poll: %d %v; want nothing again", code, out)
	}
	waiting, _ := mailbox.Undelivered(f.y, "yuko")
	if len(waiting) != 1 || waiting[0].ID != briefed {
		t.Errorf("yuko's undelivered: %+v; want only the briefed one, which the supervisor marks", waiting)
	}
	if waiting, _ := mailbox.Undelivered(f.y, "rex"); len(waiting) != 1 || waiting[0].ID != other {
		t.Errorf("rex's message was taken: %+v", waiting)
	}
}

// TestMailboxRefused: no token 401; a token without a run, of another
// imp's run or of no run on record 403; a run that ended 409; a damaged
// brief 500; and none of them takes a message.
func TestMailboxRefused(t *testing.T) {
	f := newFixture(t)
	msg, _ := mailbox.Send(f.y, "yuko", "alice", "hello")
	if code, out := f.do(t, "", "GET", "/v1/mailbox", ""); code != 401 {
		t.Errorf("no token: %d %v", code, out)
	}
	if code, out := f.do(t, "not-a-token", "GET", "/v1/mailbox", ""); code != 401 {
		t.Errorf("unknown token: %d %v", code, out)
	}
	if code, _ := f.do(t, f.token(t, "yuko", ""), "POST", "/v1/mailbox", ""); code != http.StatusMethodNotAllowed {
		t.Errorf("POST: %d", code)
	}
	noRun, _ := token.Issue(f.home, "yuko", "", "")
	if code, out := f.do(t, noRun, "GET", "/v1/mailbox", ""); code != 403 || !contains(out, "names no run") {
		t.Errorf("token without a run: %d %v", code, out)
	}
	if code, out := f.do(t, f.token(t, "yuko", ""), "GET", "/v1/mailbox", ""); code != 403 || !contains(out, "has no record") {
		t.Errorf("run not on record: %d %v", code, out)
	}
	liveRun(t, f, "rex")
	if code, out := f.do(t, f.token(t, "yuko", ""), "GET", "/v1/mailbox", ""); code != 403 || !contains(out, "not imp yuko's") {
		t.Errorf("another imp's run: %d %v", code, out)
	}
	recPath := run.Path(f.y, "r-0000000000000001", "run.json")
	rec, _ := os.ReadFile(recPath)
	os.WriteFile(recPath, []byte("{torn"), 0o644)
	if code, out := f.do(t, f.token(t, "rex", ""), "GET", "/v1/mailbox", ""); code != 500 || !contains(out, "run.json") {
		t.Errorf("damaged run record: %d %v", code, out)
	}
	os.WriteFile(recPath, rec, 0o644)
	os.WriteFile(run.Path(f.y, "r-0000000000000001", run.BriefFile), []byte("{torn"), 0o644)
	if code, out := f.do(t, f.token(t, "rex", ""), "GET", "/v1/mailbox", ""); code != 500 || !contains(out, run.BriefFile) {
		t.Errorf("damaged brief: %d %v", code, out)
	}
	if _, err := run.Move(f.y, "r-0000000000000001", run.Change{To: run.Failed, By: "test", Actor: "test", Why: "test"}); err != nil {
		t.Fatal(err)
	}
	if code, out := f.do(t, f.token(t, "rex", ""), "GET", "/v1/mailbox", ""); code != http.StatusConflict || !contains(out, "is failed") {
		t.Errorf("ended run: %d %v", code, out)
	}
	if waiting, _ := mailbox.Undelivered(f.y, "yuko"); len(waiting) != 1 || waiting[0].ID != msg {
		t.Errorf("a refused poll took a message: %+v", waiting)
	}
}

func contains(out map[string]any, s string) bool {
	e, _ := out["error"].(string)
	return strings.Contains(e, s)
}

// TestMailboxPollAgain: a box that lost an answer asks with ?again=1 and
// gets what its run was given (its brief's messages, its earlier polls')
// and what is new, oldest first; nothing delivered to another run, and
// the brief's messages stay for the supervisor to mark. A bad value is
// 400 and takes nothing.
func TestMailboxPollAgain(t *testing.T) {
	f := newFixture(t)
	briefed, _ := mailbox.Send(f.y, "yuko", "alice", "in the brief")
	elsewhere, _ := mailbox.Send(f.y, "yuko", "alice", "for the other box")
	if err := mailbox.MarkDelivered(f.y, "yuko", "r-0000000000000002", []string{elsewhere}); err != nil {
		t.Fatal(err)
	}
	liveRun(t, f, "yuko", briefed)
	tok := f.token(t, "yuko", "")
	lost, _ := mailbox.Send(f.y, "yuko", "alice", "skip the sports section")
	if code, out := f.do(t, tok, "GET", "/v1/mailbox", ""); code != 200 || len(messages(t, out)) != 1 {
		t.Fatalf("poll: %d %v", code, out)
	}
	fresh, _ := mailbox.Send(f.y, "yuko", "alice", "and the weather")
	if code, out := f.do(t, tok, "GET", "/v1/mailbox?again=maybe", ""); code != 400 || !contains(out, `again="maybe"`) {
		t.Errorf("?again=maybe: %d %v", code, out)
	}
	if waiting, _ := mailbox.Undelivered(f.y, "yuko"); len(waiting) != 2 || waiting[1].ID != fresh {
		t.Errorf("a refused poll took a message: undelivered %+v", waiting)
	}
	code, out := f.do(t, tok, "GET", "/v1/mailbox?again=1", "")
	if got, want := strings.Join(messages(t, out), " "), strings.Join([]string{briefed, lost, fresh}, " "); code != 200 || got != want {
		t.Fatalf("?again=1: %d %s, want %s", code, got, want)
	}
	if code, out := f.do(t, tok, "GET", "/v1/mailbox", ""); code != 200 || len(messages(t, out)) != 0 {
		t.Errorf("a plain poll after ?again=1 took the new message again: %d %v", code, out)
	}
	waiting, _ := mailbox.Undelivered(f.y, "yuko")
	if len(waiting) != 1 || waiting[0].ID != briefed {
		t.Errorf("undelivered after ?again=1: %+v; want only the briefed one", waiting)
	}
	if code, out := f.do(t, tok, "GET", "/v1/mailbox?again=true", ""); code != 200 || len(messages(t, out)) != 3 {
		t.Errorf("?again=true a second time: %d %v", code, out)
	}
}
