package gateway

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/impyard/impyard/lib/ca"
	"github.com/impyard/impyard/lib/yard"
)

// mailRule injects the mail key into every request to api.test, from any
// subject: the rule a writer of the yard would add to have a request of
// its own carry the owner's key.
const mailRule = `{"name": "mail", "match": {"protocol": "https", "host": "api.test", "network": "127.0.0.0/8"}, "verdict": "allow", "inject": {"header": "authorization", "secret": "resend", "format": "Bearer %s"}}`

// strictYard makes ReadPolicy the yard's strict-modes read, the yard being
// the directory above policies/.
func strictYard(c *Config) {
	c.ReadPolicy = (&yard.Yard{Root: filepath.Dir(filepath.Dir(c.PolicyPath))}).ReadAuthority
}

// plant replaces the policy as a writer of the yard would leave it:
// written, then spoiled by spoil (given another owner, or made
// group-writable) before it is renamed in, so no good version of it is
// ever in place.
func (h *harness) plant(p string, spoil func(string) error) {
	h.t.Helper()
	tmp := h.policyPath + ".planted"
	if err := os.WriteFile(tmp, []byte(p), 0o644); err != nil {
		h.t.Fatal(err)
	}
	if err := spoil(tmp); err != nil {
		h.t.Fatal(err)
	}
	if err := os.Rename(tmp, h.policyPath); err != nil {
		h.t.Fatal(err)
	}
}

// TestUnsafePolicyKeepsLastGood: a policy that a writer of the yard could
// have written (another owner, a group-writable file) is refused by name,
// once, and the last good policy judges on: the injecting rule it adds
// never puts the key on a request.
func TestUnsafePolicyKeepsLastGood(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to give a file to another uid")
	}
	for _, tc := range []struct {
		name  string
		spoil func(string) error
		why   string
	}{
		{"another owner", func(p string) error { return os.Chown(p, 65534, 65534) }, "owned by uid 65534"},
		{"group-writable", func(p string) error { return os.Chmod(p, 0o664) }, "writable by its group or others"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var up seen
			ups := newTLSUpstream(t, up.handler("sent"))
			good := policy(`{"name": "plain", "match": {"protocol": "https", "host": "api.test", "network": "127.0.0.0/8"}, "verdict": "allow"}`)
			h := startGateway(t, good, func(c *Config) { c.UpstreamCA = ups.bundle; strictYard(c) })
			h.resolve("api.test", "127.0.0.1")
			if err := os.MkdirAll(filepath.Join(h.home, "secrets"), 0o700); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(h.home, "secrets", "resend"), []byte("re_REAL_KEY\n"), 0o600); err != nil {
				t.Fatal(err)
			}
			c := h.client()
			u := fmt.Sprintf("https://api.test:%d/emails", ups.port)
			h.plant(policy(mailRule), tc.spoil)
			for range 2 {
				resp, _ := h.do(c, "POST", u, `{}`, nil)
				if resp.StatusCode != 200 || up.n.Load() == 0 {
					t.Fatalf("status %d, upstream hits %d: the last good policy allows the request", resp.StatusCode, up.n.Load())
				}
				if a := (*up.header.Load()).Get("Authorization"); a != "" {
					t.Fatalf("the planted rule injected the key: upstream saw Authorization %q", a)
				}
			}
			if n := strings.Count(h.log.String(), "policy refused"); n != 1 {
				t.Errorf("refusal logged %d times, want once:\n%s", n, h.log)
			}
			if l := h.log.String(); !strings.Contains(l, h.policyPath+" is") || !strings.Contains(l, tc.why) {
				t.Errorf("log does not name %s and why (%s):\n%s", h.policyPath, tc.why, l)
			}
			// The owner takes the file back: it is judged by again.
			h.writePolicy(policy(mailRule))
			h.do(c, "POST", u, `{}`, nil)
			if a := (*up.header.Load()).Get("Authorization"); a != "Bearer re_REAL_KEY" {
				t.Fatalf("the owner's own policy is not in force: upstream saw Authorization %q", a)
			}
		})
	}
}

// TestUnsafePolicyAtStart: a gateway that starts on an unsafe policy has
// no last good one and refuses to start, naming it.
func TestUnsafePolicyAtStart(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to give a file to another uid")
	}
	dir := t.TempDir()
	p := filepath.Join(dir, "yard", "policies", "gateway.json")
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(policy(mailRule)), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(p, 65534, 65534); err != nil {
		t.Fatal(err)
	}
	authority, err := ca.Init(filepath.Join(dir, "home"))
	if err != nil {
		t.Fatal(err)
	}
	m, err := ca.NewMinter(authority, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	cfg := Config{PolicyPath: p, DecisionsPath: filepath.Join(dir, "decisions.jsonl"), Minter: m}
	strictYard(&cfg)
	g, err := New(cfg)
	if !errors.Is(err, yard.ErrUnsafe) || !strings.Contains(err.Error(), p) {
		t.Fatalf("New = %v, %v; want an error wrapping ErrUnsafe naming %s", g, err, p)
	}
}
