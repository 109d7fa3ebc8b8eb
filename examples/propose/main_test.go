package main

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
)

// gatewayStub is /v1/actions answering with status, keeping what it got.
type gatewayStub struct {
	mu     sync.Mutex
	bodies []string
	auth   []string
}

func (g *gatewayStub) start(t *testing.T, status int, answer string) string {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		g.mu.Lock()
		g.bodies = append(g.bodies, r.Method+" "+r.URL.Path+" "+string(b))
		g.auth = append(g.auth, r.Header.Get("Authorization"))
		g.mu.Unlock()
		w.WriteHeader(status)
		io.WriteString(w, answer)
	}))
	t.Cleanup(srv.Close)
	return srv.URL
}

func TestPropose(t *testing.T) {
	t.Setenv("IMPYARD_TOKEN", "tok-1")
	t.Setenv("IMPYARD_RUN", "r-1")
	t.Setenv("IMPYARD_TASK", "t-1")
	for _, c := range []struct {
		name   string
		status int
		answer string
		args   []string
		code   int
		out    string
		sent   bool
	}{
		{"filed", 202, `{"status":"pending","gate_id":"g-1"}`, []string{"email-send", `{"to":["a@b.c"]}`, "asked"}, 0, `"gate_id":"g-1"`, true},
		{"refused", 403, `{"error":"no rule"}`, []string{"rm-rf", `{}`}, 1, "rm-rf refused: 403 Forbidden", true},
		{"gateway trouble", 503, `{"error":"paused"}`, []string{"email-send", `{}`}, 111, "503 Service Unavailable", true},
		{"payload not JSON", 202, ``, []string{"email-send", `{"to":`}, 2, "the payload is not JSON", false},
		{"no payload", 202, ``, []string{"email-send"}, 2, "usage: propose", false},
	} {
		t.Run(c.name, func(t *testing.T) {
			g := &gatewayStub{}
			t.Setenv("IMPYARD_GATEWAY", g.start(t, c.status, c.answer))
			var stdout, stderr bytes.Buffer
			if code := run(c.args, &stdout, &stderr); code != c.code {
				t.Errorf("propose %q: exit %d, want %d\n%s%s", c.args, code, c.code, &stdout, &stderr)
			}
			if all := stdout.String() + stderr.String(); !strings.Contains(all, c.out) {
				t.Errorf("propose %q printed %q, want %q in it", c.args, all, c.out)
			}
			if len(g.bodies) > 0 != c.sent {
				t.Fatalf("propose %q sent %q", c.args, g.bodies)
			}
			if !c.sent {
				return
			}
			var env map[string]any
			path, body, _ := strings.Cut(strings.TrimPrefix(g.bodies[0], "POST "), " ")
			if err := json.Unmarshal([]byte(body), &env); err != nil || path != "/v1/actions" || g.auth[0] != "Bearer tok-1" {
				t.Fatalf("sent %q with %q: %v", g.bodies[0], g.auth[0], err)
			}
			if env["intent"] != c.args[0] || env["run_id"] != "r-1" || env["task_id"] != "t-1" {
				t.Errorf("envelope %v", env)
			}
			if p, _ := json.Marshal(env["payload"]); !jsonEqual(string(p), c.args[1]) {
				t.Errorf("payload %s, want %s", p, c.args[1])
			}
		})
	}
}

func TestProposeUnreachable(t *testing.T) {
	srv := httptest.NewServer(http.NotFoundHandler())
	url := srv.URL
	srv.Close()
	t.Setenv("IMPYARD_GATEWAY", url)
	t.Setenv("IMPYARD_TOKEN", "tok-1")
	var stdout, stderr bytes.Buffer
	if code := run([]string{"email-send", `{}`}, &stdout, &stderr); code != 111 {
		t.Errorf("exit %d, want 111 (try again)\n%s", code, &stderr)
	}
	t.Setenv("IMPYARD_TOKEN", "")
	if code := run([]string{"email-send", `{}`}, &stdout, &stderr); code != 1 || !strings.Contains(stderr.String(), "not in a box?") {
		t.Errorf("without a token: exit %d\n%s", code, &stderr)
	}
}

func jsonEqual(a, b string) bool {
	var x, y any
	json.Unmarshal([]byte(a), &x)
	json.Unmarshal([]byte(b), &y)
	xa, _ := json.Marshal(x)
	ya, _ := json.Marshal(y)
	return bytes.Equal(xa, ya)
}
