package tests

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/klauspost/compress/zstd"

	"github.com/impyard/impyard/internal/gittest"
	"github.com/impyard/impyard/lib/gateway"
	"github.com/impyard/impyard/lib/ledger"
)

// TestAgentTrafficThroughImpgw runs impgw serve in front of a loopback
// Gemini API and a git server, as an agent outside a box meets them: a
// zstd-compressed generateContent call is judged decoded, forwarded as
// sent and its usageMetadata lands in the ledger; git, which sends its
// proxy credentials only when asked, is asked (407) on the host listener
// and clones as its imp.
func TestAgentTrafficThroughImpgw(t *testing.T) {
	const geminiJSON = `{"candidates":[{"content":{"parts":[{"text":"hi"}]}}],"usageMetadata":{"promptTokenCount":31,"candidatesTokenCount":9,"thoughtsTokenCount":12,"totalTokenCount":52},"modelVersion":"gemini-2.5-pro"}`
	api := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		dec, _ := zstd.NewReader(nil)
		defer dec.Close()
		plain, err := dec.DecodeAll(body, nil)
		if r.Header.Get("Content-Encoding") != "zstd" || err != nil || !strings.Contains(string(plain), `"contents"`) {
			http.Error(w, "not the zstd body the client sent", http.StatusBadRequest)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, geminiJSON)
	}))
	t.Cleanup(api.Close)
	m := newMeterYardOn(t, "", api)
	gitPort := gittest.Serve(t)
	// The gateway reads the policy on each request: this one replaces
	// the meter yard's.
	pol := m.y.PolicyPath()
	data, err := os.ReadFile(pol)
	if err != nil {
		t.Fatal(err)
	}
	rules := fmt.Sprintf(`"rules":[
	 {"name":"gemini","match":{"protocol":"https","host":"127.0.0.1","pathPrefix":"/v1beta/models/","subject":"yuko","network":"127.0.0.0/8"},"verdict":"allow","meter":"gemini","timeout":"600s"},
	 {"name":"git","match":{"protocol":"http","host":"127.0.0.1","port":%d,"pathPrefix":"/repo.git/","subject":"yuko","network":"127.0.0.0/8"},"verdict":"allow"}]}`, gitPort)
	data = append(data[:strings.Index(string(data), `"rules":[`)], rules...)
	if err := os.WriteFile(pol+".tmp", data, 0o640); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(pol+".tmp", pol); err != nil {
		t.Fatal(err)
	}

	enc, _ := zstd.NewWriter(nil)
	body := enc.EncodeAll([]byte(`{"contents":[{"role":"user","parts":[{"text":"hi"}]}],"generationConfig":{"maxOutputTokens":64}}`), nil)
	enc.Close()
	req, _ := http.NewRequest("POST", api.URL+"/v1beta/models/gemini-2.5-pro:generateContent", strings.NewReader(string(body)))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Content-Encoding", "zstd")
	resp, err := m.client(t, m.task(t, "asked by alice")).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	got, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || string(got) != geminiJSON {
		t.Fatalf("gemini call: %d %s", resp.StatusCode, got)
	}
	since, until := ledger.Day(time.Now())
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		var tokens []string
		if err := ledger.Read(m.y, "yuko", since, until, func(e ledger.Entry) {
			if e.Kind == ledger.Tokens {
				tokens = append(tokens, fmt.Sprintf("%s:%d+%d", e.Model, e.InputTokens, e.OutputTokens))
			}
		}); err != nil {
			t.Fatal(err)
		}
		if len(tokens) > 0 || time.Now().After(deadline) {
			if strings.Join(tokens, " ") != "gemini-2.5-pro:31+21" {
				t.Fatalf("ledger tokens %v, want gemini-2.5-pro:31+21", tokens)
			}
			break
		}
	}

	tok, err := m.run(t, "impgw", "token", "issue", "--imp", "yuko")
	if err != nil {
		t.Fatalf("token issue: %v %s", err, tok)
	}
	dest := filepath.Join(t.TempDir(), "clone")
	cmd := exec.Command("git", "-c", "http.proxy=http://yuko:"+strings.TrimSpace(tok)+"@"+m.listen,
		"clone", "-q", fmt.Sprintf("http://127.0.0.1:%d/repo.git", gitPort), dest)
	cmd.Env = gittest.Env(t)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("git clone through impgw: %v\n%s", err, out)
	}
	if b, err := os.ReadFile(filepath.Join(dest, "README")); err != nil || string(b) != gittest.Content {
		t.Fatalf("cloned README %q %v", b, err)
	}
	recs, _, err := gateway.ReadRecords(m.y.Path("runs", "decisions.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	asked, cloned := 0, 0
	for _, r := range recs {
		switch {
		case r.Request.Port != gitPort:
		case r.Status == http.StatusProxyAuthRequired && r.Request.Imp == "":
			asked++
		case r.Verdict == gateway.VerdictAllow && r.Request.Imp == "yuko":
			cloned++
		default:
			t.Errorf("git record %+v", r)
		}
	}
	if asked == 0 || cloned == 0 {
		t.Errorf("git: %d asked for credentials, %d passed as yuko; want both", asked, cloned)
	}
}
