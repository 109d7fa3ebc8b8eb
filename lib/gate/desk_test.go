package gate

import (
	"encoding/json"
	"errors"
	"os"
	"strings"
	"testing"

	"github.com/impyard/impyard/lib/event"
	"github.com/impyard/impyard/lib/state"
	"github.com/impyard/impyard/lib/yard"
	"github.com/impyard/impyard/lib/yard/yardtest"
)

// events reads the imp's journal and the audit log as they are on disk.
func events(t *testing.T, y *yard.Yard, imp string) (journal, audit []event.Event) {
	t.Helper()
	read := func(p string) []event.Event {
		b, err := os.ReadFile(p)
		if errors.Is(err, os.ErrNotExist) {
			return nil
		}
		if err != nil {
			t.Fatal(err)
		}
		var out []event.Event
		for _, l := range strings.Split(strings.TrimSpace(string(b)), "\n") {
			var e event.Event
			if err := json.Unmarshal([]byte(l), &e); err != nil {
				t.Fatalf("%s: %v", p, err)
			}
			out = append(out, e)
		}
		return out
	}
	return read(y.Path("journal", imp, "events.jsonl")), read(y.Path("runs", "decisions.jsonl"))
}

func canon(t *testing.T, b []byte) string {
	t.Helper()
	c, err := Canonical(b)
	if err != nil {
		t.Fatal(err)
	}
	return string(c)
}

func TestFileRecordsAndStores(t *testing.T) {
	y := newYard(t)
	now := yardtest.FixedNow(t)
	task := "t-0000000000000001"
	run := "r-0000000000000001"
	g, err := File(y, FileOptions{Imp: "yuko", Intent: "email-send", Payload: []byte(`{"b":2, "a":1}`), Rationale: "digest",
		Task: task, Run: run, By: "yuko", Actor: "impgw"})
	if err != nil {
		t.Fatal(err)
	}
	want := Gate{Schema: "impyard.gate/1", ID: g.ID, Imp: "yuko", Intent: "email-send", Task: task, Run: run, Rationale: "digest",
		State: state.Filed, SHA256: Sum([]byte(`{"a":1,"b":2}`)), Payload: json.RawMessage(`{"a":1,"b":2}`), Created: now, Updated: now}
	got, err := Get(y, g.ID)
	if err != nil {
		t.Fatal(err)
	}
	if got.Schema != want.Schema || got.Imp != want.Imp || got.Intent != want.Intent || got.Task != task || got.Run != run ||
		got.Rationale != want.Rationale || got.State != want.State || got.SHA256 != want.SHA256 || canon(t, got.Payload) != string(want.Payload) ||
		!got.Created.Equal(now) || !got.Updated.Equal(now) {
		t.Errorf("stored %+v\nwant   %+v", got, want)
	}
	if len(got.History) != 1 || got.History[0] != (state.Transition{To: state.Filed, By: "yuko", Actor: "impgw", At: now, Why: "digest"}) {
		t.Errorf("history %+v", got.History)
	}
	journal, audit := events(t, y, "yuko")
	if len(journal) != 1 || len(audit) != 1 {
		t.Fatalf("journal %d, audit %d records; want 1 each", len(journal), len(audit))
	}
	e := journal[0]
	if e.Event != "gate-filed" || e.ID != g.ID || e.Seq != 1 || e.Imp != "yuko" || e.Actor != "impgw" || e.By != "yuko" ||
		e.Task != task || e.To != state.Filed || e.From != "" || e.Why != "digest" || e.SHA256 != g.SHA256 || e.Intent != "email-send" || !e.TS.Equal(now) {
		t.Errorf("journal record %+v", e)
	}
	if id, ok := event.Interrupted(y.Path("gates")); ok {
		t.Errorf("the recording marker was left naming %s", id)
	}
}

// A gate a trust rule approves is filed approved, in resolved/, with both
// transitions recorded.
func TestFileApprovedByRule(t *testing.T) {
	y := newYard(t)
	now := yardtest.FixedNow(t)
	g, err := File(y, FileOptions{Imp: "yuko", Intent: "message-user", Payload: []byte(`{}`), By: "rule:notify", Actor: "impgw", Approved: true, Signer: testKey})
	if err != nil {
		t.Fatal(err)
	}
	if g.State != state.Approved || len(g.History) != 2 ||
		g.History[1] != (state.Transition{From: state.Filed, To: state.Approved, By: "rule:notify", Actor: "impgw", At: now, AtMS: now.UnixMilli(), Why: "approved by trust rule"}) {
		t.Errorf("filed %+v", g)
	}
	if _, err := os.Stat(y.Path("gates", "resolved", g.ID+".json")); err != nil {
		t.Errorf("not in resolved/: %v", err)
	}
	if _, err := os.Stat(y.Path("gates", "pending", g.ID+".json")); !os.IsNotExist(err) {
		t.Errorf("in pending/ too: %v", err)
	}
	journal, audit := events(t, y, "yuko")
	if len(journal) != 2 || journal[0].Event != "gate-filed" || journal[1].Event != "gate-approved" || journal[1].Seq != 2 || journal[1].From != state.Filed || len(audit) != 2 {
		t.Errorf("journal %+v", journal)
	}
}

func TestFileRefusesEachOption(t *testing.T) {
	y := newYard(t)
	ok := FileOptions{Imp: "yuko", Intent: "email-send", Payload: []byte(`{}`), By: "yuko"}
	for _, c := range []struct {
		name string
		edit func(*FileOptions)
		want string
	}{
		{"imp", func(o *FileOptions) { o.Imp = "../yuko" }, ""},
		{"intent", func(o *FileOptions) { o.Intent = "Email Send" }, `invalid intent "Email Send"`},
		{"payload size", func(o *FileOptions) { o.Payload = []byte(`"` + strings.Repeat("a", MaxPayload-1) + `"`) }, "over the 1048576 limit"},
		{"task", func(o *FileOptions) { o.Task = "g-0000000000000001" }, ""},
		{"run", func(o *FileOptions) { o.Run = "r-../x" }, ""},
		{"id", func(o *FileOptions) { o.ID = "t-0000000000000001" }, ""},
		{"json", func(o *FileOptions) { o.Payload = []byte(`{`) }, "payload is not valid JSON"},
	} {
		o := ok
		c.edit(&o)
		if g, err := File(y, o); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v %v, want an error with %q", c.name, g, err, c.want)
		}
	}
	if entries, _ := os.ReadDir(y.Path("gates", "pending")); len(entries) != 0 {
		t.Errorf("refused gates left %d files", len(entries))
	}
	// The largest payload allowed is filed.
	o := ok
	o.Payload = []byte(`"` + strings.Repeat("a", MaxPayload-2) + `"`)
	if _, err := File(y, o); err != nil {
		t.Errorf("payload of exactly MaxPayload: %v", err)
	}
}

func TestMoveRecordsTheTransition(t *testing.T) {
	y := newYard(t)
	g := file(t, y, `{"n":1}`)
	now := yardtest.FixedNow(t)
	var edited string
	a, err := Move(y, g.ID, Change{To: state.Approved, Signer: testKey, By: "alice", Actor: "impgate", Why: "fine", SHA: strings.ToUpper(g.SHA256[:12]),
		Edit: func(g *Gate) error { edited = g.State; g.Result = json.RawMessage(`{"note":1}`); return nil }})
	if err != nil {
		t.Fatal(err)
	}
	if edited != state.Filed {
		t.Errorf("Edit saw state %q, want the state before the move", edited)
	}
	got, _ := Get(y, g.ID)
	if got.State != state.Approved || !got.Updated.Equal(now) || canon(t, got.Result) != `{"note":1}` || len(got.History) != 2 ||
		got.History[1] != (state.Transition{From: state.Filed, To: state.Approved, By: "alice", Actor: "impgate", At: now, Why: "fine"}) {
		t.Errorf("stored %+v", got)
	}
	if a.State != got.State || len(a.History) != len(got.History) {
		t.Errorf("returned %+v, stored %+v", a, got)
	}
	journal, _ := events(t, y, "yuko")
	if e := journal[len(journal)-1]; e.Event != "gate-approved" || e.Seq != 2 || e.From != state.Filed || e.To != state.Approved || e.By != "alice" || e.Actor != "impgate" || e.Why != "fine" {
		t.Errorf("journal record %+v", e)
	}
	// Executing and executed are resolved too; the pending copy stays gone.
	for _, to := range []string{state.Executing, state.Executed} {
		if _, err := Move(y, g.ID, Change{To: to, By: "impexec"}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := os.Stat(y.Path("gates", "pending", g.ID+".json")); !os.IsNotExist(err) {
		t.Errorf("pending copy: %v", err)
	}
	if journal, audit := events(t, y, "yuko"); len(journal) != 4 || len(audit) != 4 || journal[3].Event != "gate-executed" || journal[3].Seq != 4 {
		t.Errorf("journal %+v", journal)
	}
}

func TestMoveRefusals(t *testing.T) {
	y := newYard(t)
	g := file(t, y, `{"n":1}`)
	for _, c := range []struct {
		name   string
		id     string
		change Change
		is     error
		want   string
	}{
		{"bad id", "g-../x", Change{To: state.Approved, Signer: testKey}, nil, ""},
		{"no gate", "g-0000000000000009", Change{To: state.Approved, Signer: testKey}, errNoGate, "gate g-0000000000000009: no such gate"},
		{"illegal", g.ID, Change{To: state.Executed}, state.ErrIllegal, "cannot become executed"},
		{"unknown state", g.ID, Change{To: "sent"}, state.ErrUnknownState, ""},
		{"other sha", g.ID, Change{To: state.Approved, Signer: testKey, SHA: "ff" + g.SHA256[2:8]}, nil, "not the payload that was reviewed"},
		{"edit fails", g.ID, Change{To: state.Approved, Signer: testKey, Edit: func(*Gate) error { return os.ErrPermission }}, os.ErrPermission, ""},
	} {
		if c.name == "other sha" && g.SHA256[:2] == "ff" {
			c.change.SHA = "00" + g.SHA256[2:8]
		}
		_, err := Move(y, c.id, c.change)
		if err == nil || (c.is != nil && !errors.Is(err, c.is)) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want %v %q", c.name, err, c.is, c.want)
		}
	}
	got, _ := Get(y, g.ID)
	if got.State != state.Filed || len(got.History) != 1 {
		t.Errorf("refused moves changed the gate: %+v", got)
	}
	if journal, _ := events(t, y, "yuko"); len(journal) != 1 {
		t.Errorf("refused moves were recorded: %+v", journal)
	}
}

// A payload edited on disk can still be denied or failed, never approved
// or executed.
func TestTamperedPayloadOnlyStops(t *testing.T) {
	y := newYard(t)
	tamper := func(g *Gate, where string) {
		p := y.Path("gates", where, g.ID+".json")
		b, _ := os.ReadFile(p)
		os.WriteFile(p, []byte(strings.Replace(string(b), `"n": 1`, `"n": 2`, 1)), 0o640)
	}
	d := file(t, y, `{"n":1}`)
	tamper(d, "pending")
	if _, err := Move(y, d.ID, Change{To: state.Denied, By: "alice"}); err != nil {
		t.Errorf("deny a tampered gate: %v", err)
	}
	for _, to := range []string{state.Executing, state.Failed} {
		g := file(t, y, `{"n":1}`)
		if _, err := Move(y, g.ID, Change{To: state.Approved, Signer: testKey, By: "alice"}); err != nil {
			t.Fatal(err)
		}
		tamper(g, "resolved")
		_, err := Move(y, g.ID, Change{To: to, By: "impexec"})
		if to == state.Failed && err != nil {
			t.Errorf("fail a tampered gate: %v", err)
		}
		if to == state.Executing && (err == nil || !strings.Contains(err.Error(), "no longer matches")) {
			t.Errorf("execute a tampered gate: %v", err)
		}
	}
	g := file(t, y, `{"n":1}`)
	Move(y, g.ID, Change{To: state.Approved, Signer: testKey, By: "alice"})
	Move(y, g.ID, Change{To: state.Executing, By: "impexec"})
	tamper(g, "resolved")
	if _, err := Move(y, g.ID, Change{To: state.Executed, By: "impexec"}); err == nil || !strings.Contains(err.Error(), "no longer matches") {
		t.Errorf("mark a tampered gate executed: %v", err)
	}
}

func TestReadGateRefusesMisplacedFiles(t *testing.T) {
	y := newYard(t)
	g := file(t, y, `{"n":1}`)
	b, _ := os.ReadFile(y.Path("gates", "pending", g.ID+".json"))
	other := "g-0000000000000077"
	for _, c := range []struct {
		name, where, file, body, want string
	}{
		{"copied under another id", "pending", other, string(b), "does not match the file name"},
		{"unknown state", "pending", g.ID, strings.Replace(string(b), `"state": "filed"`, `"state": "sent"`, 1), `unknown state "sent"`},
		{"filed in resolved", "resolved", g.ID, string(b), `state "filed" does not belong in resolved/`},
		{"approved in pending", "pending", g.ID, strings.Replace(string(b), `"state": "filed"`, `"state": "approved"`, 1), `state "approved" does not belong in pending/`},
		{"another schema", "pending", g.ID, strings.Replace(string(b), "impyard.gate/1", "impyard.gate/2", 1), "not supported"},
	} {
		y := newYard(t)
		os.MkdirAll(y.Path("gates", c.where), 0o750)
		p := y.Path("gates", c.where, c.file+".json")
		os.WriteFile(p, []byte(c.body), 0o640)
		if got, err := Get(y, c.file); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: Get = %+v %v, want %q", c.name, got, err, c.want)
		}
		gates, bad := List(y, Filter{All: true})
		if len(gates) != 0 || len(bad) != 1 || !strings.Contains(bad[0].Error(), c.want) {
			t.Errorf("%s: List = %d gates, bad %v", c.name, len(gates), bad)
		}
	}
}

func TestListFilters(t *testing.T) {
	y := newYard(t)
	mk := func(imp string) *Gate {
		g, err := File(y, FileOptions{Imp: imp, Intent: "email-send", Payload: []byte(`{}`), By: imp})
		if err != nil {
			t.Fatal(err)
		}
		return g
	}
	a, b, c := mk("yuko"), mk("rex"), mk("yuko")
	if _, err := Move(y, c.ID, Change{To: state.Denied, By: "alice"}); err != nil {
		t.Fatal(err)
	}
	// Not gates: dot files are skipped silently, other names reported.
	os.WriteFile(y.Path("gates", "pending", ".tmp-x"), nil, 0o640)
	os.WriteFile(y.Path("gates", "pending", "notes.txt"), nil, 0o640)
	os.WriteFile(y.Path("gates", "resolved", "g-bad.json"), nil, 0o640)
	ids := func(gs []*Gate) string {
		var s []string
		for _, g := range gs {
			s = append(s, g.ID)
		}
		return strings.Join(s, ",")
	}
	for _, f := range []struct {
		filter Filter
		want   string
	}{
		{Filter{}, a.ID + "," + b.ID},
		{Filter{All: true}, a.ID + "," + b.ID + "," + c.ID},
		{Filter{Imp: "yuko"}, a.ID},
		{Filter{All: true, Imp: "yuko"}, a.ID + "," + c.ID},
		{Filter{All: true, Imp: "nobody"}, ""},
	} {
		gates, bad := List(y, f.filter)
		if got := ids(gates); got != f.want {
			t.Errorf("List(%+v) = %s, want %s", f.filter, got, f.want)
		}
		if len(bad) != 2 || !strings.Contains(bad[0].Error(), "not a gate file name") {
			t.Errorf("List(%+v) bad = %v, want the two foreign names", f.filter, bad)
		}
	}
	if gates, bad := List(y, Filter{Imp: "../x"}); gates != nil || len(bad) != 1 {
		t.Errorf("invalid imp filter: %v %v", gates, bad)
	}
	// No gates directory at all: nothing, no errors.
	if gates, bad := List(newYard(t), Filter{All: true}); len(gates) != 0 || len(bad) != 0 {
		t.Errorf("empty yard: %v %v", gates, bad)
	}
}

// Repair records the last transition a dead writer left unrecorded, once,
// and clears its marker.
func TestRepairRecordsAnInterruptedTransition(t *testing.T) {
	y := newYard(t)
	g := file(t, y, `{"n":1}`)
	if _, err := Move(y, g.ID, Change{To: state.Approved, Signer: testKey, By: "alice"}); err != nil {
		t.Fatal(err)
	}
	// As if the approver died after writing the gate, before its records.
	os.Remove(y.Path("journal", "yuko", "events.jsonl"))
	os.Remove(y.Path("runs", "decisions.jsonl"))
	if err := event.Begin(y.Path("gates"), g.ID); err != nil {
		t.Fatal(err)
	}
	if err := Repair(y); err != nil {
		t.Fatal(err)
	}
	journal, audit := events(t, y, "yuko")
	if len(journal) != 1 || journal[0].Event != "gate-approved" || journal[0].Seq != 2 || journal[0].ID != g.ID || len(audit) != 1 {
		t.Errorf("after repair: journal %+v audit %+v", journal, audit)
	}
	if id, ok := event.Interrupted(y.Path("gates")); ok {
		t.Errorf("marker left naming %s", id)
	}
	// A second repair finds nothing to do.
	if err := Repair(y); err != nil {
		t.Fatal(err)
	}
	if journal, _ := events(t, y, "yuko"); len(journal) != 1 {
		t.Errorf("second repair recorded again: %+v", journal)
	}

	// The next Move repairs first, so the interrupted record comes before
	// its own.
	os.Remove(y.Path("journal", "yuko", "events.jsonl"))
	os.Remove(y.Path("runs", "decisions.jsonl"))
	event.Begin(y.Path("gates"), g.ID)
	if _, err := Move(y, g.ID, Change{To: state.Executing, By: "impexec"}); err != nil {
		t.Fatal(err)
	}
	if journal, _ := events(t, y, "yuko"); len(journal) != 2 || journal[0].Seq != 2 || journal[1].Seq != 3 {
		t.Errorf("move after a crash: %+v", journal)
	}

	// A marker naming no gate, or not a gate id, is cleared without a record.
	for _, marked := range []string{"g-0000000000000099", "t-0000000000000001", "junk"} {
		event.Begin(y.Path("gates"), marked)
		if err := Repair(y); err != nil {
			t.Errorf("marker %q: %v", marked, err)
		}
		if id, ok := event.Interrupted(y.Path("gates")); ok {
			t.Errorf("marker %q left naming %s", marked, id)
		}
	}
	if journal, _ := events(t, y, "yuko"); len(journal) != 2 {
		t.Errorf("markers without a gate were recorded: %+v", journal)
	}

	// A marker naming a gate that cannot be read stops the repair.
	os.WriteFile(y.Path("gates", "resolved", g.ID+".json"), []byte("{"), 0o640)
	event.Begin(y.Path("gates"), g.ID)
	if err := Repair(y); err == nil {
		t.Error("repair with an unreadable gate succeeded")
	}
}

// A rationale too long for a journal record does not wedge the gates
// store: the gate is filed with its record's reason cut, and the next
// gate files.
func TestLongRationaleDoesNotWedgeTheDesk(t *testing.T) {
	y := newYard(t)
	long := strings.Repeat("r", MaxPayload)
	g, err := File(y, FileOptions{Imp: "yuko", Intent: "email-send", Payload: []byte(`{}`), Rationale: long, By: "yuko", Actor: "impgw"})
	if err != nil {
		t.Fatal(err)
	}
	if got, _ := Get(y, g.ID); got.Rationale != long {
		t.Errorf("the gate lost its rationale")
	}
	if _, err := File(y, FileOptions{Imp: "rex", Intent: "email-send", Payload: []byte(`{}`), By: "rex", Actor: "impgw"}); err != nil {
		t.Errorf("the next gate: %v", err)
	}
	if _, err := Move(y, g.ID, Change{To: state.Denied, By: "alice"}); err != nil {
		t.Errorf("deciding the long gate: %v", err)
	}
	if id, ok := event.Interrupted(y.Path("gates")); ok {
		t.Errorf("marker left naming %s", id)
	}
}
