package gateway

import (
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"
)

// A rule's timeout replaces the gateway's wait for the upstream's
// answer: longer, a slow answer passes that the default would cut off;
// shorter, a silent upstream is answered 504 within it, and recorded.
func TestRuleTimeout(t *testing.T) {
	release := make(chan struct{})
	ups := newTLSUpstream(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/slow":
			// The answer comes after the gateway's default wait.
			time.Sleep(400 * time.Millisecond)
			io.WriteString(w, "late but fine")
		case "/silent":
			select {
			case <-release:
			case <-r.Context().Done():
			}
		}
	}))
	defer close(release)
	h := startGateway(t, policy(
		`{"name": "patient", "match": {"host": "api.test", "pathPrefix": "/slow", "network": "127.0.0.0/8"}, "verdict": "allow", "timeout": "30s"}`,
		`{"name": "hasty", "match": {"host": "api.test", "pathPrefix": "/silent", "network": "127.0.0.0/8"}, "verdict": "allow", "timeout": "200ms"}`,
		`{"name": "default", "match": {"host": "mail.test", "network": "127.0.0.0/8"}, "verdict": "allow"}`),
		func(c *Config) {
			c.UpstreamCA = ups.bundle
			c.Limits.UpstreamTimeout = 100 * time.Millisecond
		})
	h.resolve("api.test", "127.0.0.1")
	h.resolve("mail.test", "127.0.0.1")
	c := h.client()
	if resp, body := h.do(c, "GET", fmt.Sprintf("https://api.test:%d/slow", ups.port), "", nil); resp.StatusCode != 200 || body != "late but fine" {
		t.Fatalf("slow answer under a 30s rule: %d %q", resp.StatusCode, body)
	}
	if r := h.last(); r.Rule != "patient" || r.Status != 200 {
		t.Errorf("record %+v", r)
	}
	// The same answer without the rule's timeout is cut off.
	if resp, _ := h.do(c, "GET", fmt.Sprintf("https://mail.test:%d/slow", ups.port), "", nil); resp.StatusCode != http.StatusGatewayTimeout {
		t.Fatalf("slow answer under the default: %d, want 504", resp.StatusCode)
	}
	if r := h.last(); r.Status != http.StatusGatewayTimeout || !strings.Contains(r.Error, "no response within 100ms") {
		t.Errorf("default timeout record %+v", r)
	}
	c.Timeout = 10 * time.Second
	resp, _ := h.do(c, "GET", fmt.Sprintf("https://api.test:%d/silent", ups.port), "", nil)
	if resp.StatusCode != http.StatusGatewayTimeout {
		t.Fatalf("silent upstream under a 200ms rule: %d, want 504", resp.StatusCode)
	}
	if r := h.last(); r.Rule != "hasty" || r.Status != http.StatusGatewayTimeout || !strings.Contains(r.Error, "no response within 200ms") {
		t.Errorf("rule timeout record %+v", r)
	}
}
