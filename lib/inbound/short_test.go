package inbound_test

import (
	"net/http"
	"testing"

	"github.com/impyard/impyard/lib/inbound"
)

// TestHMACShortSignatures: only the whole 32-byte HMAC of the body is a
// signature. Empty, one byte of the right one, all of it but its last
// byte, or it with a byte more: each is 401, files nothing and is not
// remembered.
func TestHMACShortSignatures(t *testing.T) {
	r := newRelay(t)
	body := []byte(`{"zen":"Design for failure."}`)
	good := sign(body) // sha256= and 64 hex digits
	for _, sig := range []string{"sha256=", good[:len("sha256=")+2], good[:len(good)-2], good + "00"} {
		code, out := r.post(t, "github", body, map[string]string{"X-Hub-Signature-256": sig, "X-GitHub-Delivery": "d-1"})
		rec := r.lastRecord(t)
		if code != 401 || rec.Verdict != inbound.Refused || rec.Status != 401 || rec.Task != "" {
			t.Errorf("signature %q: %d %q, record %+v; want 401", sig, code, out, rec)
		}
	}
	if n := len(r.tasks(t)); n != 0 {
		t.Errorf("deliveries with short signatures filed %d tasks", n)
	}
	if seen := r.seen(t, "github"); len(seen) != 0 {
		t.Errorf("a refused delivery was remembered: %q", seen)
	}
	// The whole signature is accepted: the refusals above are the length's.
	if code, out := r.post(t, "github", body, map[string]string{"X-Hub-Signature-256": good, "X-GitHub-Delivery": "d-1"}); code != http.StatusAccepted {
		t.Errorf("the whole signature: %d %q", code, out)
	}
}
