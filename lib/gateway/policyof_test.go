package gateway

import (
	"net/http"
	"strings"
	"testing"
	"time"
)

// A control handler sees the policy in force through its request, so
// the control API is built without holding the gateway; an edit of the
// policy reaches the next request.
func TestControlSeesPolicyInForce(t *testing.T) {
	seen := make(chan []string, 2)
	h := startGateway(t, policy(`{"name": "first", "match": {"host": "a.test"}, "verdict": "allow"}`), func(c *Config) {
		c.Control = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			var names []string
			for _, rl := range PolicyOf(r.Context()).Rules() {
				names = append(names, rl.Name)
			}
			seen <- names
			w.Write([]byte("{}"))
		})
	})
	ask := func(want string) {
		t.Helper()
		if out := h.raw("GET /v1/gates HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n", 5*time.Second); !strings.HasPrefix(out, "HTTP/1.1 200") {
			t.Fatalf("control answered %q", out)
		}
		if got := strings.Join(<-seen, ","); got != want {
			t.Errorf("the handler saw rules %q, want %q", got, want)
		}
	}
	ask("first")
	h.writePolicy(policy(`{"name": "second", "match": {"host": "b.test"}, "verdict": "allow"}`,
		`{"name": "third", "match": {"host": "c.test"}, "verdict": "deny"}`))
	ask("second,third")
}
