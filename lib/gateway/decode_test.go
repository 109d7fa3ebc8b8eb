package gateway

import (
	"bytes"
	"compress/gzip"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"

	"github.com/andybalholm/brotli"
	"github.com/klauspost/compress/zstd"
)

func gzipped(t testing.TB, b []byte) []byte {
	var buf bytes.Buffer
	w := gzip.NewWriter(&buf)
	w.Write(b)
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func brotlied(t testing.TB, b []byte) []byte {
	var buf bytes.Buffer
	w := brotli.NewWriter(&buf)
	w.Write(b)
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func zstded(t testing.TB, b []byte) []byte {
	enc, err := zstd.NewWriter(nil)
	if err != nil {
		t.Fatal(err)
	}
	defer enc.Close()
	return enc.EncodeAll(b, nil)
}

var encoders = map[string]func(testing.TB, []byte) []byte{"gzip": gzipped, "br": brotlied, "zstd": zstded}

// decode undoes each encoding, and refuses what it cannot undo, what is
// not what it claims, and what decodes past the limit, each with its
// sentinel.
func TestDecode(t *testing.T) {
	plain := []byte(`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"get_issue"}}`)
	for name, enc := range encoders {
		got, err := decode(strings.ToUpper(name)+" ", enc(t, plain), 1<<20)
		if err != nil || !bytes.Equal(got, plain) {
			t.Errorf("%s: %q, %v", name, got, err)
		}
		bomb := enc(t, make([]byte, 1<<20))
		if _, err := decode(name, bomb, 64<<10); !errors.Is(err, ErrBomb) {
			t.Errorf("%s bomb of %d bytes: %v, want ErrBomb", name, len(bomb), err)
		}
		if got, err := decode(name, bomb, 1<<20); err != nil || len(got) != 1<<20 {
			t.Errorf("%s: exactly the limit: %d bytes, %v", name, len(got), err)
		}
		whole := enc(t, plain)
		if _, err := decode(name, whole[:len(whole)/2], 1<<20); !errors.Is(err, ErrUndecodable) {
			t.Errorf("%s cut in half: %v, want ErrUndecodable", name, err)
		}
	}
	// A frame that asks for a window past what the decoder holds is
	// refused before any of it is decoded.
	wide, err := zstd.NewWriter(nil, zstd.WithWindowSize(zstdWindow*2), zstd.WithSingleSegment(false))
	if err != nil {
		t.Fatal(err)
	}
	big := wide.EncodeAll(bytes.Repeat([]byte("0123456789abcdef"), zstdWindow/8), nil)
	wide.Close()
	if _, err := decode("zstd", big, 64<<20); !errors.Is(err, ErrBomb) || !strings.Contains(err.Error(), "window") {
		t.Errorf("zstd frame with a %d-byte window: %v, want ErrBomb naming the window", zstdWindow*2, err)
	}
	for _, tc := range []struct {
		ce   string
		body []byte
		want error
	}{
		{"gzip", plain, ErrUndecodable},
		{"zstd", plain, ErrUndecodable},
		{"gzip", append(gzipped(t, plain), "trailing"...), ErrUndecodable},
		{"deflate", plain, ErrEncoding},
		{"gzip, br", brotlied(t, gzipped(t, plain)), ErrEncoding},
	} {
		if _, err := decode(tc.ce, tc.body, 1<<20); !errors.Is(err, tc.want) {
			t.Errorf("%s %q: %v, want %v", tc.ce, tc.body[:min(8, len(tc.body))], err, tc.want)
		}
	}
	for _, ce := range []string{"", "identity", " Identity"} {
		if got, err := decode(ce, plain, 8); err != nil || !bytes.Equal(got, plain) {
			t.Errorf("%q: %q %v, want the body as it is", ce, got, err)
		}
	}
}

// A compressed body is judged by what it decodes to and forwarded as it
// came; a call hidden in one is denied like a plain one; a bomb, a body
// that is not what it claims and an encoding the gateway cannot undo are
// refused with a record, and reach no upstream. A metered Gemini call's
// admission sees the decoded body, and its usage is metered.
func TestEncodedBodies(t *testing.T) {
	var up seen
	mcpReply := up.handler(`{"jsonrpc":"2.0","id":1,"result":{}}`)
	ups := newTLSUpstream(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.HasPrefix(r.URL.Path, "/v1beta/") {
			w.Header().Set("Content-Type", "application/json")
			io.WriteString(w, geminiJSON)
			return
		}
		mcpReply.ServeHTTP(w, r)
	}))
	var mu sync.Mutex
	var admitted []Call
	var spent []Spend
	h := startGateway(t, policy(
		`{"name": "gh-read", "match": {"host": "api.test", "pathPrefix": "/mcp", "network": "127.0.0.0/8", "mcp": {"method": "tools/call", "tool": "get_*"}}, "verdict": "allow"}`,
		`{"name": "gemini", "match": {"host": "api.test", "pathPrefix": "/v1beta/models/", "network": "127.0.0.0/8"}, "verdict": "allow", "meter": "gemini"}`),
		func(c *Config) {
			c.UpstreamCA = ups.bundle
			c.Limits.MaxBodyBytes = 256 << 10
			c.Authenticate = func(net.Conn, string) (string, string, error) { return "yuko", "t-1", nil }
			c.Admit = func(call Call) (func(), error) {
				mu.Lock()
				defer mu.Unlock()
				admitted = append(admitted, call)
				return nil, nil
			}
			c.Meter = func(sp Spend) {
				mu.Lock()
				defer mu.Unlock()
				spent = append(spent, sp)
			}
		})
	h.resolve("api.test", "127.0.0.1")
	c := h.client()
	u := fmt.Sprintf("https://api.test:%d/mcp", ups.port)
	call := func(tool string) []byte {
		return []byte(fmt.Sprintf(`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":%q}}`, tool))
	}
	post := func(u, ce string, body []byte) (*http.Response, string) {
		t.Helper()
		return h.do(c, "POST", u, string(body), map[string]string{"Content-Type": "application/json", "Content-Encoding": ce})
	}
	for name, enc := range encoders {
		plain := call("get_issue")
		sent := enc(t, plain)
		if resp, body := post(u, name, sent); resp.StatusCode != 200 {
			t.Fatalf("%s get_issue: %d %q", name, resp.StatusCode, body)
		}
		if got := *up.body.Load(); got != string(sent) || (*up.header.Load()).Get("Content-Encoding") != name {
			t.Errorf("%s: upstream got %q with Content-Encoding %q, want the bytes sent", name, got, (*up.header.Load()).Get("Content-Encoding"))
		}
		r := h.last()
		if r.Request.BodySize != int64(len(plain)) || r.BytesIn != int64(len(sent)) || r.Request.MCP == nil || r.Request.MCP.Calls[0].Tool != "get_issue" {
			t.Errorf("%s record: body %d bytes in %d mcp %+v", name, r.Request.BodySize, r.BytesIn, r.Request.MCP)
		}
		n := up.n.Load()
		if resp, _ := post(u, name, enc(t, call("delete_repo"))); resp.StatusCode != 403 {
			t.Errorf("%s delete_repo: %d, want 403", name, resp.StatusCode)
		}
		if r := h.last(); r.Verdict != VerdictDeny || r.Request.MCP == nil || r.Request.MCP.Calls[0].Tool != "delete_repo" {
			t.Errorf("%s delete_repo record %+v", name, r)
		}
		if up.n.Load() != n {
			t.Errorf("%s: a denied call reached the upstream", name)
		}
	}
	n := up.n.Load()
	for _, tc := range []struct {
		name, ce string
		body     []byte
		status   int
		reason   error
	}{
		{"gzip bomb", "gzip", gzipped(t, make([]byte, 4<<20)), 413, ErrBomb},
		{"zstd bomb", "zstd", zstded(t, make([]byte, 4<<20)), 413, ErrBomb},
		{"br bomb", "br", brotlied(t, make([]byte, 4<<20)), 413, ErrBomb},
		{"not gzip", "gzip", call("get_issue"), 400, ErrUndecodable},
		{"deflate", "deflate", call("get_issue"), 415, ErrEncoding},
	} {
		resp, body := post(u, tc.ce, tc.body)
		r := h.last()
		if resp.StatusCode != tc.status || !strings.Contains(body, tc.reason.Error()) || resp.Header.Get("X-Impgw-Decision") != r.ID {
			t.Errorf("%s: %d %q, want %d saying %q", tc.name, resp.StatusCode, body, tc.status, tc.reason)
		}
		if r.Status != tc.status || r.RefusedBy != RefusedByGateway || !strings.Contains(r.Reason, tc.reason.Error()) || r.BytesIn != int64(len(tc.body)) {
			t.Errorf("%s record %+v", tc.name, r)
		}
	}
	if up.n.Load() != n {
		t.Error("a refused body reached the upstream")
	}
	gem := []byte(`{"contents":[{"role":"user","parts":[{"text":"hi"}]}],"generationConfig":{"maxOutputTokens":77}}`)
	if resp, body := post(fmt.Sprintf("https://api.test:%d/v1beta/models/gemini-2.5-pro:generateContent", ups.port), "zstd", zstded(t, gem)); resp.StatusCode != 200 || body != geminiJSON {
		t.Fatalf("gemini: %d %q", resp.StatusCode, body)
	}
	if r := h.last(); r.Usage == nil || *r.Usage != (Usage{Model: "gemini-2.5-pro", InputTokens: 31, OutputTokens: 21}) {
		t.Errorf("gemini usage %+v", r.Usage)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(admitted) != 1 || !bytes.Equal(admitted[0].Body, gem) {
		t.Fatalf("admitted %+v", admitted)
	}
	if model, out := admitted[0].Asked(); model != "gemini-2.5-pro" || out != 77 {
		t.Errorf("Asked: %q %d", model, out)
	}
	last := spent[len(spent)-1]
	if last.Usage == nil || last.Usage.InputTokens != 31 || last.Subject != "yuko" {
		t.Errorf("spend %+v", last)
	}
}
