package gateway

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/impyard/impyard/lib/judge"
	"github.com/impyard/impyard/lib/mcp"
)

func TestRecordRoundTrip(t *testing.T) {
	r := &Record{
		ID: newID(), Time: time.Date(2026, 7, 8, 9, 10, 11, 123456789, time.UTC), Verdict: VerdictAllow, Rule: "model-api",
		Reason: `rule "model-api" allows it`, WouldDeny: true, RefusedBy: RefusedByGateway, Client: "127.0.0.1:5555",
		Request: RequestInfo{
			Imp: "yuko", Protocol: "https", Method: "POST", Host: "chatgpt.com", Port: 443, Path: "/backend-api/codex/responses",
			Query: "a=1&b=\u2028", Headers: map[string]string{"authorization": Redacted, "x-odd": "tab\there \"quoted\" \x01 \xff"},
			BodySize: 14231, MCP: &mcp.Lifted{Batch: true, Calls: []mcp.Call{{Method: "tools/call", Tool: "get_issue"}, {Method: "tools/list"}}},
			MCPError: "", Placeholders: []judge.Placeholder{{Where: "authorization", Secret: "resend"}},
		},
		Addr: "104.18.32.47:443", Status: 200, UpstreamMS: 12.3456, BytesIn: 14231, BytesOut: 900, Error: "",
	}
	line, err := r.MarshalJSON()
	if err != nil || !json.Valid(line) {
		t.Fatalf("invalid JSON %v: %s", err, line)
	}
	got, err := ParseRecord(line)
	if err != nil {
		t.Fatal(err)
	}
	want := *r
	want.Time = want.Time.Truncate(time.Millisecond) // ts in whole seconds, ts_ms to the millisecond
	want.UpstreamMS = 12.346
	want.Request.Headers = map[string]string{"authorization": Redacted, "x-odd": "tab\there \"quoted\" \x01 \ufffd"}
	if !reflect.DeepEqual(*got, want) {
		t.Fatalf("round trip:\n got %+v\nwant %+v", *got, want)
	}
	// The order and names are the documented ones.
	for i, f := range []string{FieldSchema, FieldID, FieldTime, FieldVerdict, FieldRule, FieldReason, FieldWouldDeny, FieldRefusedBy,
		FieldClient, FieldRequest, FieldAddr, FieldStatus, FieldUpstreamMS, FieldBytesIn, FieldBytesOut} {
		if j := strings.Index(string(line), `"`+f+`":`); j < 0 || i > 0 && j < strings.Index(string(line), `"decision_id"`) {
			t.Errorf("field %s missing or out of order in %s", f, line)
		}
	}
	if _, err := ParseRecord([]byte(`{"schema":"impyard.event/1","event":"gate-filed"}`)); err != ErrNotDecision {
		t.Fatalf("an event line: %v", err)
	}
}

func TestRecordHeadersRedacts(t *testing.T) {
	h := http.Header{"Authorization": {"Bearer x"}, "Cookie": {"a", "b"}, "Set-Cookie": {"s"}, "X-Api-Key": {"k"},
		"Proxy-Authorization": {"p"}, "X-Goog-Api-Key": {"g"}, "Accept": {"a", "b"}, "X-Auth-Token": {"t"},
		"Private-Token": {"gl"}, "X-Session": {"s"}}
	got := RecordHeaders(h, "X-Goog-Api-Key", "x-session")
	want := map[string]string{"authorization": Redacted, "cookie": Redacted, "set-cookie": Redacted, "x-api-key": Redacted,
		"proxy-authorization": Redacted, "x-goog-api-key": Redacted, "accept": "a, b", "x-auth-token": Redacted,
		"private-token": Redacted, "x-session": Redacted}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("got %v", got)
	}
}

func FuzzAppendString(f *testing.F) {
	for _, s := range []string{"", "plain", "quote\" back\\", "\x00\x1f\x7f", "\xff\xfe", "\u2028\u2029", "日本"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		b := appendString(nil, s)
		var got string
		if err := json.Unmarshal(b, &got); err != nil {
			t.Fatalf("%q encodes to invalid JSON %s: %v", s, b, err)
		}
		want, _ := json.Marshal(s)
		var w string
		json.Unmarshal(want, &w)
		if got != w {
			t.Fatalf("%q decodes to %q, encoding/json gives %q", s, got, w)
		}
	})
}

func TestUnwritableLogStopsForwarding(t *testing.T) {
	var up seen
	_, port := newPlainUpstream(t, up.handler("ok"))
	h := startGateway(t, policy(`{"name": "lo", "match": {"host": "127.0.0.1", "network": "127.0.0.0/8"}, "verdict": "allow"}`), nil)
	c := h.client()
	u := "http://127.0.0.1:" + itoa(port) + "/"
	if resp, _ := h.do(c, "GET", u, "", nil); resp.StatusCode != 200 {
		t.Fatalf("first: %d", resp.StatusCode)
	}
	h.waitRecords(1)
	os.Remove(h.decisions)
	os.Mkdir(h.decisions, 0o755) // no longer a file anyone can append to
	hits := up.n.Load()
	for range 2 {
		if resp, _ := h.do(c, "GET", u, "", nil); resp.StatusCode != 503 {
			t.Fatalf("with the log unwritable: %d, want 503", resp.StatusCode)
		}
	}
	if up.n.Load() != hits {
		t.Fatal("a request went out unrecorded")
	}
	if !strings.Contains(h.log.String(), "decision record not written") {
		t.Fatalf("not logged:\n%s", h.log)
	}
	os.Remove(h.decisions)
	if resp, _ := h.do(c, "GET", u, "", nil); resp.StatusCode != 200 {
		t.Fatalf("with the log writable again: %d", resp.StatusCode)
	}
}

// TestFullDiskForwardsNothing starts the gateway on a yard whose disk is
// already full: its first request, ten concurrent ones and a tunnel must
// all be refused with 503 and none may reach the upstream; once space is
// freed, requests flow again, each with its record.
func TestFullDiskForwardsNothing(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to mount a tmpfs")
	}
	mnt := t.TempDir()
	if out, err := exec.Command("mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", mnt).CombinedOutput(); err != nil {
		t.Skipf("cannot mount tmpfs: %v %s", err, out)
	}
	// The audit log keeps its files open for the life of the process.
	t.Cleanup(func() { exec.Command("umount", "-l", mnt).Run() })
	runs := filepath.Join(mnt, "runs")
	if err := os.Mkdir(runs, 0o755); err != nil {
		t.Fatal(err)
	}
	filler := filepath.Join(mnt, "filler")
	f, err := os.Create(filler)
	if err != nil {
		t.Fatal(err)
	}
	for {
		if _, err := f.Write(make([]byte, 4096)); err != nil {
			if !errors.Is(err, syscall.ENOSPC) {
				t.Fatal(err)
			}
			break
		}
	}
	f.Close()

	var up seen
	_, port := newPlainUpstream(t, up.handler("ok"))
	tl, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer tl.Close()
	var dialed atomic.Int64
	go func() {
		for {
			c, err := tl.Accept()
			if err != nil {
				return
			}
			dialed.Add(1)
			c.Close()
		}
	}()
	decisions := filepath.Join(runs, "decisions.jsonl")
	h := startGateway(t, policy(
		`{"name": "pinned", "match": {"host": "pinned.test", "network": "127.0.0.0/8"}, "verdict": "tunnel"}`,
		`{"name": "lo", "match": {"host": "127.0.0.1", "network": "127.0.0.0/8"}, "verdict": "allow"}`),
		func(c *Config) { c.DecisionsPath = decisions })
	h.decisions = decisions
	h.resolve("pinned.test", "127.0.0.1")
	u := "http://127.0.0.1:" + itoa(port) + "/"

	if resp, _ := h.do(h.client(), "GET", u, "", nil); resp.StatusCode != 503 {
		t.Fatalf("first request on a full disk: %d, want 503", resp.StatusCode)
	}
	statuses := make(chan int, 10)
	for range 10 {
		go func() {
			resp, err := h.client().Get(u)
			if err != nil {
				statuses <- 0
				return
			}
			resp.Body.Close()
			statuses <- resp.StatusCode
		}()
	}
	for range 10 {
		if s := <-statuses; s != 503 {
			t.Errorf("concurrent request on a full disk: %d, want 503", s)
		}
	}
	c, err := net.Dial("tcp", h.addr)
	if err != nil {
		t.Fatal(err)
	}
	fmt.Fprintf(c, "CONNECT pinned.test:%s HTTP/1.1\r\nHost: pinned.test\r\n\r\n", itoa(tl.Addr().(*net.TCPAddr).Port))
	c.SetDeadline(time.Now().Add(5 * time.Second))
	if resp, err := http.ReadResponse(bufio.NewReader(c), nil); err != nil || resp.StatusCode != 503 {
		t.Errorf("tunnel on a full disk: %v %v, want 503", resp, err)
	}
	c.Close()
	if n := up.n.Load(); n != 0 {
		t.Fatalf("the upstream saw %d requests with no record written", n)
	}
	if n := dialed.Load(); n != 0 {
		t.Fatalf("the tunnel's upstream was dialed %d times with no record written", n)
	}

	os.Remove(filler)
	if resp, body := h.do(h.client(), "GET", u, "", nil); resp.StatusCode != 200 || body != "ok" {
		t.Fatalf("with space again: %d %q", resp.StatusCode, body)
	}
	recs := h.waitRecords(1)
	if r := recs[len(recs)-1]; r.Verdict != VerdictAllow || r.Status != 200 || up.n.Load() != 1 {
		t.Fatalf("last record %+v, upstream saw %d", r, up.n.Load())
	}
}

// FuzzRedactUserinfo checks that no user information survives in a
// recorded target, however the target is spelt.
func FuzzRedactUserinfo(f *testing.F) {
	for _, s := range [][3]string{
		{"http://", "alice:hunter2", "sink.test/public"},
		{"", "alice:hunter2", "sink.test:443"},
		{"https://", "a%40b:c@d", "h/?x=a@b#f"},
		{"HTTP://", "u", "h:1"},
	} {
		f.Add(s[0], s[1], s[2])
	}
	f.Fuzz(func(t *testing.T, scheme, user, rest string) {
		if strings.ContainsAny(user, "/?#") || user == "" || strings.Contains(scheme, "/") {
			return
		}
		target := scheme + user + "@" + rest
		if scheme != "" && !strings.HasSuffix(scheme, "://") {
			return
		}
		got := redactUserinfo(target)
		if again := redactUserinfo(got); again != got {
			t.Fatalf("not idempotent: %q -> %q -> %q", target, got, again)
		}
		authority := rest
		if i := strings.IndexAny(rest, "/?#"); i >= 0 {
			authority = rest[:i]
		}
		if strings.Contains(authority, "@") {
			// The user information ends at the authority's last @.
			return
		}
		if strings.Contains(got, user) && !strings.Contains(scheme+Redacted+"@"+rest, user) {
			t.Fatalf("%q recorded as %q: the user information %q survived", target, got, user)
		}
	})
}
