package gateway

import (
	"encoding/json"
	"net/http"
	"os"
	"reflect"
	"strings"
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
		"Proxy-Authorization": {"p"}, "X-Goog-Api-Key": {"g"}, "Accept": {"a", "b"}}
	got := RecordHeaders(h, "X-Goog-Api-Key")
	want := map[string]string{"authorization": Redacted, "cookie": Redacted, "set-cookie": Redacted, "x-api-key": Redacted,
		"proxy-authorization": Redacted, "x-goog-api-key": Redacted, "accept": "a, b"}
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
	h.do(c, "GET", u, "", nil)   // its record fails after it was answered
	deadline := time.Now().Add(5 * time.Second)
	for !h.g.auditDown.Load() && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	hits := up.n.Load()
	if resp, _ := h.do(c, "GET", u, "", nil); resp.StatusCode != 503 {
		t.Fatalf("with the log unwritable: %d, want 503", resp.StatusCode)
	}
	if up.n.Load() != hits {
		t.Fatal("a request went out unrecorded")
	}
	if !strings.Contains(h.log.String(), "decision record not written") {
		t.Fatalf("not logged:\n%s", h.log)
	}
	os.Remove(h.decisions)
	if resp, _ := h.do(c, "GET", u, "", nil); resp.StatusCode != 503 {
		t.Fatalf("the refusal itself is recorded first, then: %d", resp.StatusCode)
	}
	if resp, _ := h.do(c, "GET", u, "", nil); resp.StatusCode != 200 {
		t.Fatalf("with the log writable again: %d", resp.StatusCode)
	}
}
