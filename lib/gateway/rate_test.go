package gateway

import (
	"encoding/base64"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"testing"
)

// A rule's rate counts each subject's requests on its own: past it the
// request is answered 429 with a Retry-After, recorded with the rule and
// the reason, and never reaches the upstream; another subject still
// passes.
func TestRuleRate(t *testing.T) {
	var up seen
	ups := newTLSUpstream(t, up.handler("ok"))
	h := startGateway(t, policy(`{"name": "api", "match": {"host": "api.test", "network": "127.0.0.0/8"}, "verdict": "allow", "rate": "2/1h"}`),
		func(c *Config) {
			c.UpstreamCA = ups.bundle
			c.Authenticate = func(_ net.Conn, pa string) (string, string, error) {
				b, err := base64.StdEncoding.DecodeString(strings.TrimPrefix(pa, "Basic "))
				if err != nil {
					return "", "", err
				}
				sub, _, _ := strings.Cut(string(b), ":")
				return sub, "", nil
			}
		})
	h.resolve("api.test", "127.0.0.1")
	as := func(sub string) *http.Client {
		c := h.client()
		proxy, _ := url.Parse("http://" + sub + ":x@" + h.addr)
		c.Transport.(*http.Transport).Proxy = http.ProxyURL(proxy)
		return c
	}
	u := fmt.Sprintf("https://api.test:%d/v1/items", ups.port)
	yuko := as("yuko")
	for i := range 2 {
		if resp, body := h.do(yuko, "GET", u, "", nil); resp.StatusCode != 200 {
			t.Fatalf("request %d: %d %s", i+1, resp.StatusCode, body)
		}
	}
	resp, body := h.do(yuko, "GET", u, "", nil)
	if resp.StatusCode != http.StatusTooManyRequests || !strings.Contains(body, `rule "api" allows 2/1h per subject`) {
		t.Fatalf("third request: %d %s", resp.StatusCode, body)
	}
	if s, err := strconv.Atoi(resp.Header.Get("Retry-After")); err != nil || s < 1 || s > 3600 {
		t.Errorf("Retry-After %q, want the seconds until the first request leaves the hour", resp.Header.Get("Retry-After"))
	}
	if n := up.n.Load(); n != 2 {
		t.Errorf("the upstream saw %d requests, want 2", n)
	}
	rec := h.last()
	if rec.Status != http.StatusTooManyRequests || rec.Rule != "api" || !strings.Contains(rec.Reason, `subject "yuko" has reached it`) {
		t.Errorf("record: status %d rule %q reason %q", rec.Status, rec.Rule, rec.Reason)
	}
	if resp, body := h.do(as("rex"), "GET", u, "", nil); resp.StatusCode != 200 {
		t.Errorf("another subject: %d %s", resp.StatusCode, body)
	}
	if n := up.n.Load(); n != 3 {
		t.Errorf("the upstream saw %d requests, want 3", n)
	}
}
