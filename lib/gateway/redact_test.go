package gateway

import (
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"
)

// TestDecisionRecordsRedactCredentials sends real requests through the
// gateway, carrying credentials in every header and query parameter an
// API names them by, and reads decisions.jsonl: no credential is in it,
// in a forwarded request's record nor in a rejected one's, which keeps
// the target as sent; the names and other values still are.
func TestDecisionRecordsRedactCredentials(t *testing.T) {
	var up seen
	_, port := newPlainUpstream(t, up.handler("ok"))
	pol := `{"schema": "impyard.policy/1", "redact": ["X-Session-Secret"], "rules": [
	  {"name": "local", "match": {"host": "127.0.0.1", "network": "127.0.0.0/8"}, "verdict": "allow"}]}`
	h := startGateway(t, pol, nil)
	headers := map[string]string{
		"Api-Key": "h-api-key", "X-Api-Key": "h-x-api-key", "X-Goog-Api-Key": "h-goog", "X-Amz-Security-Token": "h-amz",
		"X-Access-Token": "h-access", "Cookie": "h-cookie", "Set-Cookie": "h-set-cookie", "X-Session-Secret": "h-policy",
	}
	query := "page=2&token=q-token&ACCESS_TOKEN=q-access&api_key=q-api-key&Key=q-key&sig=q-sig&Signature=q-signature" +
		"&password=q-password&secret=q-secret&X-Amz-Signature=q-amz&client_secret=q-client&x-session-secret=q-policy&%74oken=q-escaped"
	u := fmt.Sprintf("http://127.0.0.1:%d/p?%s", port, query)
	if resp, _ := h.do(h.client(), "GET", u, "", headers); resp.StatusCode != 200 {
		t.Fatalf("GET %s: %d", u, resp.StatusCode)
	}
	// The upstream saw them all: redaction is the record's, not the request's.
	if got := *up.target.Load(); got != "/p?"+query {
		t.Fatalf("upstream target %q", got)
	}
	h.raw(fmt.Sprintf("GET http://127.0.0.1:%d/r?token=q-rejected&page=3 HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 1\r\nTransfer-Encoding: chunked\r\n\r\n", port), 5*time.Second)
	recs := h.waitRecords(2)
	raw, err := os.ReadFile(h.decisions)
	if err != nil {
		t.Fatal(err)
	}
	for _, v := range headers {
		if strings.Contains(string(raw), v) {
			t.Errorf("decisions.jsonl holds header value %q", v)
		}
	}
	for _, kv := range strings.Split(query, "&") {
		if _, v, _ := strings.Cut(kv, "="); strings.HasPrefix(v, "q-") && strings.Contains(string(raw), v) {
			t.Errorf("decisions.jsonl holds query value %q", v)
		}
	}
	if strings.Contains(string(raw), "q-rejected") {
		t.Errorf("decisions.jsonl holds the rejected request's token")
	}
	fwd, rej := recs[0], recs[len(recs)-1]
	for k := range headers {
		if v := fwd.Request.Headers[strings.ToLower(k)]; v != Redacted {
			t.Errorf("record header %s = %q, want %s", k, v, Redacted)
		}
	}
	if q := fwd.Request.Query; !strings.HasPrefix(q, "page=2&token="+Redacted+"&ACCESS_TOKEN="+Redacted) || !strings.HasSuffix(q, "&%74oken="+Redacted) {
		t.Errorf("record query %q, want the names and other values kept", q)
	}
	if rej.Verdict != VerdictReject || rej.Request.Path != fmt.Sprintf("http://127.0.0.1:%d/r?token=%s&page=3", port, Redacted) {
		t.Errorf("rejected record %s path %q", rej.Verdict, rej.Request.Path)
	}
}

// A parameter is a credential by its whole name or its last part, in
// any case or percent-encoding; a name that merely contains one is not.
func TestCredentialParam(t *testing.T) {
	for name, want := range map[string]bool{
		"token": true, "Access_Token": true, "API_KEY": true, "key": true, "sig": true, "signature": true,
		"password": true, "secret": true, "X-Amz-Signature": true, "client_secret": true, "refresh.token": true,
		"%6Bey": true, "session": true, // the policy's redact list
		"page": false, "monkey": false, "keyboard": false, "tokens": false, "signed": false, "": false,
	} {
		if got := credentialParam(name, []string{"session"}); got != want {
			t.Errorf("credentialParam(%q) = %v, want %v", name, got, want)
		}
	}
}

// TestRedactUserinfo: the user information ends at the authority's last
// @, so one with an @ of its own (a password, a user named by an e-mail
// address) is redacted whole; an @ in the path, the query or an
// origin-form target is left alone.
func TestRedactUserinfo(t *testing.T) {
	for in, want := range map[string]string{
		"http://alice:hunter2@sink.test/p":     "http://" + Redacted + "@sink.test/p",
		"http://al@ce:hun@ter2@sink.test/p":    "http://" + Redacted + "@sink.test/p",
		"https://me@ourco.com:p@ss@sink.test":  "https://" + Redacted + "@sink.test",
		"alice@ourco.com:p@ss@sink.test:443":   Redacted + "@sink.test:443",
		"pw@://sink.test/":                     Redacted + "@://sink.test/",
		"http://u:p@w@sink.test/x@y?e=a@b#f@g": "http://" + Redacted + "@sink.test/x@y?e=a@b#f@g",
		"http://sink.test/x@y?e=a@b":           "http://sink.test/x@y?e=a@b",
		"/v1/gates?by=a@b":                     "/v1/gates?by=a@b",
		"sink.test:443":                        "sink.test:443",
	} {
		if got := redactUserinfo(in); got != want {
			t.Errorf("redactUserinfo(%q) = %q, want %q", in, got, want)
		}
	}
}

// TestLogfOneLine: a log line quotes what a box sent or an upstream
// answered; its line breaks and escape sequences are shown escaped, so
// it stays one line and cannot pass for a line of the gateway's own.
func TestLogfOneLine(t *testing.T) {
	var b strings.Builder
	g := &Gateway{cfg: Config{Log: &b}}
	g.logf("error: control %s: %s", "POST /v1/actions", "bad\r\x1b[2Kimpgw: policy loaded again\nimpgw: ok")
	want := `impgw: error: control POST /v1/actions: bad\r\x1b[2Kimpgw: policy loaded again\nimpgw: ok` + "\n"
	if b.String() != want {
		t.Errorf("logged %q, want %q", b.String(), want)
	}
}

// TestFrontingReasonRedacted: the reason a fronted request is refused
// with names its target, and that target's credential parameters are
// redacted there too, in the record and in the answer.
func TestFrontingReasonRedacted(t *testing.T) {
	h, ups, _ := frontingRig(t)
	tc, br, err := h.connectTLS(fmt.Sprintf("api.test:%d", ups.port), "api.test")
	if err != nil {
		t.Fatal(err)
	}
	defer tc.Close()
	fmt.Fprintf(tc, "GET https://other.api.test:%d/p?token=q-fronted&page=2 HTTP/1.1\r\nHost: other.api.test\r\n\r\n", ups.port)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	r := h.last()
	if resp.StatusCode != 403 || !strings.Contains(r.Reason, "domain fronting") || !strings.Contains(r.Reason, "token="+Redacted+"&page=2") {
		t.Fatalf("%d %q, record reason %q", resp.StatusCode, body, r.Reason)
	}
	raw, _ := os.ReadFile(h.decisions)
	if strings.Contains(string(raw), "q-fronted") || strings.Contains(string(body), "q-fronted") {
		t.Errorf("the fronted request's token is in the record or the answer:\n%s\n%s", raw, body)
	}
}
