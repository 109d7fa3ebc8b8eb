package gateway

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func logRecord(id, imp, verdict, host, rule string, at time.Time) *Record {
	return &Record{ID: id, Time: at, Verdict: verdict, Rule: rule, Reason: "because",
		Request: RequestInfo{Imp: imp, Protocol: "https", Method: "GET", Host: host, Port: 443, Path: "/"}}
}

func TestFilterMatch(t *testing.T) {
	t0 := time.Date(2026, 7, 1, 10, 0, 0, 0, time.UTC)
	r := logRecord("a", "yuko", VerdictDeny, "API.example.com", "mail", t0)
	for _, c := range []struct {
		f    Filter
		want bool
	}{
		{Filter{}, true},
		{Filter{Since: t0}, true},
		{Filter{Since: t0.Add(time.Second)}, false},
		{Filter{Imp: "yuko"}, true},
		{Filter{Imp: "yu"}, false},
		{Filter{Verdict: VerdictDeny}, true},
		{Filter{Verdict: VerdictAllow}, false},
		{Filter{Host: "api.example.com"}, true},
		{Filter{Host: "example.com"}, false},
		{Filter{Rule: "mail"}, true},
		{Filter{Rule: ""}, true},
		{Filter{Rule: "other"}, false},
		{Filter{Imp: "yuko", Verdict: VerdictDeny, Host: "api.example.com", Rule: "mail", Since: t0.Add(-time.Hour)}, true},
		{Filter{Imp: "yuko", Verdict: VerdictDeny, Host: "api.example.com", Rule: "nope"}, false},
	} {
		if got := c.f.Match(r); got != c.want {
			t.Errorf("%+v: Match = %v, want %v", c.f, got, c.want)
		}
	}
}

// TestLogReader pairs each forwarded record with its outcome, returns the
// others at once, skips other schemas and damaged lines, and keeps a line
// still being written for the next read.
func TestLogReader(t *testing.T) {
	path := filepath.Join(t.TempDir(), "decisions.jsonl")
	t0 := time.Date(2026, 7, 1, 10, 0, 0, 0, time.UTC)
	fwd := logRecord("fwd", "yuko", VerdictAllow, "api.example.com", "api", t0)
	denied := logRecord("den", "yuko", VerdictDeny, "evil.example", "", t0.Add(time.Second))
	denied.Status = 403
	open := logRecord("tun", "", VerdictTunnel, "ws.example.com", "ws", t0.Add(2*time.Second))
	line := func(b []byte) string { return string(b) + "\n" }
	j := func(r *Record) []byte { b, _ := r.MarshalJSON(); return b }
	done := *fwd
	done.Status, done.BytesOut = 200, 42
	write := func(s string, flag int) {
		f, err := os.OpenFile(path, flag|os.O_WRONLY|os.O_CREATE, 0o644)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := f.WriteString(s); err != nil {
			t.Fatal(err)
		}
		f.Close()
	}
	l := &LogReader{Path: path}
	if recs, bad, err := l.Next(); len(recs) != 0 || len(bad) != 0 || err != nil {
		t.Fatalf("missing file: %v %v %v", recs, bad, err)
	}
	write(line(j(fwd))+line(j(denied))+`{"schema":"impyard.event/1","event":"gate-filed"}`+"\n"+"{torn\n"+line(j(open))+`{"schema":"impyard.outcome/1","decision_id":"fwd",`, os.O_TRUNC)
	recs, bad, err := l.Next()
	if err != nil {
		t.Fatal(err)
	}
	if len(recs) != 1 || recs[0].ID != "den" {
		t.Fatalf("first read: %v, want only the denial", recs)
	}
	if len(bad) != 1 || bad[0].Line != 4 {
		t.Fatalf("bad = %v, want line 4", bad)
	}
	// The rest of the outcome line.
	full := string(done.OutcomeJSON(t0.Add(3 * time.Second)))
	write(full[len(`{"schema":"impyard.outcome/1","decision_id":"fwd",`):]+"\n", os.O_APPEND)
	recs, bad, err = l.Next()
	if err != nil || len(bad) != 0 {
		t.Fatal(err, bad)
	}
	if len(recs) != 1 || recs[0].ID != "fwd" || recs[0].Status != 200 || recs[0].BytesOut != 42 || !recs[0].Time.Equal(t0) {
		t.Fatalf("second read: %+v, want fwd completed", recs)
	}
	recs, bad = l.Flush()
	if len(recs) != 1 || recs[0].ID != "tun" || recs[0].Status != 0 || len(bad) != 0 {
		t.Fatalf("flush: %v %v, want the open tunnel", recs, bad)
	}
}

// TestLogReaderLarge reads a log longer than one read, records split
// across reads included, in one call.
func TestLogReaderLarge(t *testing.T) {
	path := filepath.Join(t.TempDir(), "decisions.jsonl")
	t0 := time.Date(2026, 7, 1, 10, 0, 0, 0, time.UTC)
	var b []byte
	n := 0
	for len(b) < 3<<20 {
		r := logRecord(fmt.Sprint("id-", n), "yuko", VerdictDeny, "example.com", "", t0)
		r.Request.Path = "/" + strings.Repeat("x", n%500)
		r.Status = 403
		b = append(r.appendJSON(b), '\n')
		n++
	}
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
	l := &LogReader{Path: path}
	recs, bad, err := l.Next()
	if err != nil || len(bad) != 0 || len(recs) != n {
		t.Fatalf("%d records, %v, %v; want %d", len(recs), bad, err, n)
	}
	if recs[n-1].ID != fmt.Sprint("id-", n-1) {
		t.Fatalf("last = %s", recs[n-1].ID)
	}
}

// TestLogReaderOther lists the lines Other keeps among the decisions, in
// the log's order, and reports a line Other cannot read as skipped; Skip
// starts at the end, so a decision before it and its later outcome are
// never listed.
func TestLogReaderOther(t *testing.T) {
	path := filepath.Join(t.TempDir(), "decisions.jsonl")
	t0 := time.Date(2026, 7, 1, 10, 0, 0, 0, time.UTC)
	before := logRecord("before", "yuko", VerdictAllow, "api.example.com", "api", t0)
	denied := logRecord("den", "yuko", VerdictDeny, "evil.example", "", t0.Add(time.Second))
	denied.Status = 403
	j := func(r *Record) string { b, _ := r.MarshalJSON(); return string(b) + "\n" }
	write := func(s string) {
		f, err := os.OpenFile(path, os.O_APPEND|os.O_WRONLY|os.O_CREATE, 0o644)
		if err != nil {
			t.Fatal(err)
		}
		f.WriteString(s)
		f.Close()
	}
	write(j(before) + `{"schema":"impyard.proposal/1","n":0}` + "\n")
	l := &LogReader{Path: path, Other: func(line []byte) (any, error) {
		var p struct {
			Schema string `json:"schema"`
			N      *int   `json:"n"`
		}
		json.Unmarshal(line, &p)
		switch {
		case p.Schema != "impyard.proposal/1":
			return nil, nil
		case p.N == nil:
			return nil, errors.New("no n")
		}
		return *p.N, nil
	}}
	if err := l.Skip(); err != nil {
		t.Fatal(err)
	}
	done := *before
	done.Status = 200
	write(`{"schema":"impyard.proposal/1","n":1}` + "\n" + string(done.OutcomeJSON(t0.Add(time.Second))) + "\n" +
		j(denied) + `{"schema":"impyard.event/1","event":"gate-filed"}` + "\n" + `{"schema":"impyard.proposal/1"}` + "\n" +
		`{"schema":"impyard.proposal/1","n":2}` + "\n")
	got, bad, err := l.Next()
	if err != nil {
		t.Fatal(err)
	}
	var seen []string
	for _, e := range got {
		if e.Record != nil {
			seen = append(seen, e.ID)
		} else {
			seen = append(seen, fmt.Sprint(e.Other))
		}
	}
	if strings.Join(seen, " ") != "1 den 2" {
		t.Errorf("listed %v, want 1 den 2", seen)
	}
	if len(bad) != 1 || bad[0].Line != 7 || !strings.Contains(bad[0].Error(), "no n") {
		t.Errorf("bad = %v, want line 7, no n", bad)
	}
	if rest, _ := l.Flush(); len(rest) != 0 {
		t.Errorf("flush: %v, want nothing from before the Skip", rest)
	}
}
