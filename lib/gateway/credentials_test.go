package gateway

import (
	"encoding/base64"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/impyard/impyard/internal/gittest"
)

// basicAuth is an Authenticate for tests: yuko:tok is yuko, no
// credentials anonymous, anything else refused.
func basicAuth(_ net.Conn, pa string) (string, string, error) {
	switch pa {
	case "":
		return "", "", nil
	case "Basic " + base64.StdEncoding.EncodeToString([]byte("yuko:tok")):
		return "yuko", "t-git", nil
	}
	return "", "", errors.New("unknown credentials")
}

// git, whose proxy credentials go out only after a 407, clones through
// the host listener as the subject its credentials name: the request it
// sends without them is answered 407, not judged as nobody and refused.
func TestGitSendsCredentialsAfter407(t *testing.T) {
	port := gittest.Serve(t)
	h := startGateway(t, policy(
		`{"name": "yuko-git", "match": {"protocol": "http", "host": "git.test", "pathPrefix": "/repo.git/", "subject": "yuko", "network": "127.0.0.0/8"}, "verdict": "allow"}`),
		func(c *Config) { c.Authenticate = basicAuth })
	h.resolve("git.test", "127.0.0.1")
	dest := filepath.Join(t.TempDir(), "clone")
	cmd := exec.Command("git", "-c", "http.proxy=http://yuko:tok@"+h.addr, "clone", "-q", fmt.Sprintf("http://git.test:%d/repo.git", port), dest)
	cmd.Env = gittest.Env(t)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("git clone through the gateway: %v\n%s", err, out)
	}
	if b, err := os.ReadFile(filepath.Join(dest, "README")); err != nil || string(b) != gittest.Content {
		t.Fatalf("cloned README: %q %v", b, err)
	}
	recs := h.waitRecords(2)
	if r := recs[0]; r.Status != http.StatusProxyAuthRequired || r.RefusedBy != RefusedByGateway || r.Request.Imp != "" || !strings.Contains(r.Reason, reasonNoCredentials) {
		t.Errorf("first record %+v, want the 407 asking for credentials", r)
	}
	allowed := 0
	for _, r := range recs[1:] {
		switch {
		case r.Verdict == VerdictAllow && r.Request.Imp == "yuko" && r.Status == 200:
			allowed++
		case r.Status == http.StatusProxyAuthRequired:
		default:
			t.Errorf("record %+v", r)
		}
	}
	if allowed == 0 {
		t.Error("no request passed as yuko")
	}
	// A path no rule allows, even with credentials, is refused outright.
	cmd = exec.Command("git", "-c", "http.proxy=http://yuko:tok@"+h.addr, "ls-remote", fmt.Sprintf("http://git.test:%d/other.git", port))
	cmd.Env = gittest.Env(t)
	if out, err := cmd.CombinedOutput(); err == nil || !strings.Contains(string(out), "403") {
		t.Errorf("ls-remote of a repository no rule allows: %v\n%s", err, out)
	}
	if r := h.last(); r.Status != http.StatusForbidden || r.Request.Imp != "" {
		t.Errorf("refused record %+v", r)
	}
}

// A CONNECT without credentials is asked for them when only a rule for a
// subject would match it; one a rule allows anonymously, or that no rule
// matches at all, is not; and without an Authenticate there are no
// credentials to ask for.
func TestCredentialsAskedFor(t *testing.T) {
	rules := policy(
		`{"name": "yuko-api", "match": {"host": "api.test", "subject": "yuko", "network": "127.0.0.0/8"}, "verdict": "allow"}`,
		`{"name": "open", "match": {"host": "mail.test", "network": "127.0.0.0/8"}, "verdict": "allow"}`)
	h := startGateway(t, rules, func(c *Config) { c.Authenticate = basicAuth })
	for _, host := range []string{"api.test", "mail.test", "sink.test"} {
		h.resolve(host, "127.0.0.1")
	}
	// Connection: close ends a refused CONNECT's connection at once.
	connect := func(h *harness, host string) string {
		return h.raw(fmt.Sprintf("CONNECT %s:443 HTTP/1.1\r\nHost: %s:443\r\nConnection: close\r\n\r\n", host, host), 5*time.Second)
	}
	if got := connect(h, "api.test"); !strings.HasPrefix(got, "HTTP/1.1 407 ") || !strings.Contains(got, "Proxy-Authenticate: Basic realm=\"impgw\"") {
		t.Errorf("CONNECT only yuko may make: %q", got)
	}
	if r := h.last(); r.Status != 407 || !strings.Contains(r.Reason, reasonNoCredentials) {
		t.Errorf("record %+v", r)
	}
	if tc, _, err := h.connectTLS("mail.test:443", "mail.test"); err != nil {
		t.Errorf("CONNECT anyone may make: %v", err)
	} else {
		tc.Close()
	}
	if got := connect(h, "sink.test"); !strings.HasPrefix(got, "HTTP/1.1 403 ") {
		t.Errorf("CONNECT no rule matches: %q", got)
	}
	bare := startGateway(t, rules, nil)
	bare.resolve("api.test", "127.0.0.1")
	if got := connect(bare, "api.test"); !strings.HasPrefix(got, "HTTP/1.1 403 ") {
		t.Errorf("CONNECT without Authenticate: %q", got)
	}
}
