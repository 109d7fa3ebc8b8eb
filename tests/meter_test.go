package tests

import (
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/impyard/impyard/lib/gateway"
	"github.com/impyard/impyard/lib/queue"
	"github.com/impyard/impyard/lib/state"
)

// modelAPI is a loopback HTTPS model API: OpenAI chat completions as
// JSON or, with ?stream=1, as an event stream, and Anthropic messages as
// an event stream, each with its usage.
func modelAPI(t *testing.T) *httptest.Server {
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		switch {
		case r.URL.Path == "/v1/chat/completions" && r.URL.Query().Get("stream") == "":
			w.Header().Set("Content-Type", "application/json")
			io.WriteString(w, `{"id":"c1","model":"gpt-5","choices":[{"message":{"content":"hi"}}],"usage":{"prompt_tokens":12,"completion_tokens":34}}`)
		case r.URL.Path == "/v1/chat/completions" && r.URL.Query().Get("stream") == "nousage":
			// A stream asked for without stream_options.include_usage.
			w.Header().Set("Content-Type", "text/event-stream")
			io.WriteString(w, "data: {\"model\":\"gpt-5\",\"choices\":[{\"delta\":{\"content\":\"hi\"}}]}\n\ndata: [DONE]\n\n")
		case r.URL.Path == "/v1/chat/completions":
			w.Header().Set("Content-Type", "text/event-stream")
			for _, ev := range []string{
				`{"model":"gpt-5","choices":[{"delta":{"content":"he"}}],"usage":null}`,
				`{"model":"gpt-5","choices":[{"delta":{"content":"llo"}}],"usage":null}`,
				`{"model":"gpt-5","choices":[],"usage":{"prompt_tokens":100,"completion_tokens":200}}`,
				`[DONE]`,
			} {
				fmt.Fprintf(w, "data: %s\n\n", ev)
				w.(http.Flusher).Flush()
			}
		case r.URL.Path == "/v1/messages":
			w.Header().Set("Content-Type", "text/event-stream")
			io.WriteString(w, "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"model\":\"claude-x\",\"usage\":{\"input_tokens\":25,\"output_tokens\":1}}}\n\n"+
				"event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"delta\":{\"text\":\"hi\"}}\n\n"+
				"event: message_delta\ndata: {\"type\":\"message_delta\",\"usage\":{\"output_tokens\":15}}\n\n"+
				"event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n")
		default:
			http.NotFound(w, r)
		}
	}))
	t.Cleanup(srv.Close)
	return srv
}

// meterYard is a yard whose impgw meters yuko's calls to a loopback
// model API, with org.toml as given.
type meterYard struct {
	*spine
	api *httptest.Server
}

func newMeterYard(t *testing.T, org string) *meterYard {
	return newMeterYardOn(t, org, modelAPI(t))
}

// newMeterYardOn is newMeterYard in front of api.
func newMeterYardOn(t *testing.T, org string, api *httptest.Server) *meterYard {
	s := &spine{y: newYard(t), home: t.TempDir(), listen: "127.0.0.1:0", bin: bin}
	s.env = []string{"IMPYARD_ROOT=" + s.y.Root, "IMPYARD_HOME=" + s.home, "USER=alice"}
	upCA := filepath.Join(t.TempDir(), "upstream.pem")
	os.WriteFile(upCA, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: api.Certificate().Raw}), 0o644)
	os.MkdirAll(s.y.Path("policies"), 0o750)
	os.WriteFile(s.y.PolicyPath(), []byte(`{"schema":"impyard.policy/1","upstreamCA":"`+upCA+`","rules":[
	 {"name":"openai","match":{"protocol":"https","host":"127.0.0.1","pathPrefix":"/v1/chat/","subject":"yuko","network":"127.0.0.0/8"},"verdict":"allow","meter":"openai"},
	 {"name":"anthropic","match":{"protocol":"https","host":"127.0.0.1","pathPrefix":"/v1/messages","subject":"yuko","network":"127.0.0.0/8"},"verdict":"allow","meter":"anthropic"}]}`), 0o640)
	os.WriteFile(s.y.Path("org.toml"), []byte(org), 0o640)
	if out, err := s.run(t, "impgw", "ca", "init"); err != nil {
		t.Fatalf("ca init: %v %s", err, out)
	}
	s.listen = s.serveGateway(t)
	return &meterYard{s, api}
}

// task adds a task of yuko's and returns its id.
func (m *meterYard) task(t *testing.T, args ...string) string {
	t.Helper()
	out, err := m.run(t, "impq", append([]string{"add", "--imp", "yuko"}, args...)...)
	if err != nil {
		t.Fatalf("impq add: %v %s", err, out)
	}
	return strings.TrimSpace(out)
}

// client is a run's client: through impgw with a token bound to taskID.
func (m *meterYard) client(t *testing.T, taskID string) *http.Client {
	t.Helper()
	tok, err := m.run(t, "impgw", "token", "issue", "--imp", "yuko", "--task", taskID)
	if err != nil {
		t.Fatalf("token issue: %v %s", err, tok)
	}
	proxy, _ := url.Parse("http://yuko:" + strings.TrimSpace(tok) + "@" + m.listen)
	pool := x509.NewCertPool()
	caPEM, _ := os.ReadFile(filepath.Join(m.home, "ca", "ca.crt"))
	pool.AppendCertsFromPEM(caPEM)
	return &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{Proxy: http.ProxyURL(proxy), TLSClientConfig: &tls.Config{RootCAs: pool}}}
}

// call makes a model call and checks its status; it returns the body and
// the answer's header.
func (m *meterYard) call(t *testing.T, c *http.Client, path string, want int) (string, http.Header) {
	t.Helper()
	resp, err := c.Post(m.api.URL+path, "application/json", strings.NewReader(`{"model":"gpt-5","messages":[]}`))
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != want {
		t.Fatalf("%s: %d %s, want %d", path, resp.StatusCode, body, want)
	}
	return string(body), resp.Header
}

// TestModelTokensMetered runs impgw serve in front of a loopback model
// API, with runs' tokens bound to an owner task and a proactive one:
// every response's tokens are metered into the decision log and the
// ledger by class and model, a proactive call past tokens_daily gets 429
// while owner calls pass, impq spend shows it, and impsup leaves the
// imp's proactive tasks waiting with the reason.
func TestModelTokensMetered(t *testing.T) {
	m := newMeterYard(t, `
[budget.yuko]
tokens_daily = 500
[prices."gpt-5"]
input = 1.25
output = 10.0
`)
	s := m.spine
	task := func(args ...string) string { return m.task(t, args...) }
	ownerTask, proTask := task("asked by alice"), task("--proactive", "digest")
	owner, proactive := m.client(t, ownerTask), m.client(t, proTask)
	call := func(c *http.Client, path string, want int) {
		t.Helper()
		m.call(t, c, path, want)
	}
	call(owner, "/v1/chat/completions", 200)          // 12 + 34
	call(owner, "/v1/chat/completions?stream=1", 200) // 100 + 200
	call(proactive, "/v1/messages", 200)              // 25 + 15
	call(proactive, "/v1/chat/completions?stream=1", 200)
	call(proactive, "/v1/chat/completions?stream=1", 200) // 640 proactive tokens: over 500
	call(proactive, "/v1/messages", http.StatusTooManyRequests)
	call(owner, "/v1/chat/completions", 200) // owner work always passes

	// The decision log: each metered exchange's usage on its outcome,
	// and the refusal recorded once.
	var usages []string
	refusals := 0
	deadline := time.Now().Add(5 * time.Second)
	for {
		recs, _, err := gateway.ReadRecords(s.y.Path("runs", "decisions.jsonl"))
		if err != nil {
			t.Fatal(err)
		}
		usages, refusals = nil, 0
		for _, r := range recs {
			if r.Usage != nil {
				usages = append(usages, fmt.Sprintf("%s:%d+%d", r.Usage.Model, r.Usage.InputTokens, r.Usage.OutputTokens))
			}
			if r.Status == http.StatusTooManyRequests {
				refusals++
				if r.RefusedBy != gateway.RefusedByGateway || !strings.Contains(r.Reason, "used 640 of its daily 500 model tokens on proactive work") {
					t.Errorf("refusal record: %+v", r)
				}
			}
		}
		if len(usages) == 6 || time.Now().After(deadline) {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	if got, want := strings.Join(usages, " "), "gpt-5:12+34 gpt-5:100+200 claude-x:25+15 gpt-5:100+200 gpt-5:100+200 gpt-5:12+34"; got != want {
		t.Errorf("usage on record:\n got %s\nwant %s", got, want)
	}
	if refusals != 1 {
		t.Errorf("%d refusals on record, want 1", refusals)
	}

	// impq spend: per class and model, priced, over only on proactive work.
	var sp struct {
		Total   struct{ InputTokens, OutputTokens int64 }
		Classes map[string]struct {
			Cost         float64 `json:"cost"`
			InputTokens  int64   `json:"input_tokens"`
			OutputTokens int64   `json:"output_tokens"`
			Models       map[string]struct {
				InputTokens  int64 `json:"input_tokens"`
				OutputTokens int64 `json:"output_tokens"`
			} `json:"models"`
		} `json:"classes"`
		TokensDaily int64  `json:"tokens_daily"`
		Over        string `json:"over"`
	}
	for {
		out, err := s.run(t, "impq", "spend", "--json", "--imp", "yuko")
		if err != nil {
			t.Fatalf("impq spend: %v %s", err, out)
		}
		if err := json.Unmarshal([]byte(out), &sp); err != nil {
			t.Fatalf("impq spend: %v %s", err, out)
		}
		if sp.Classes["owner"].InputTokens == 124 || time.Now().After(deadline) {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	o, p := sp.Classes["owner"], sp.Classes["proactive"]
	if o.InputTokens != 124 || o.OutputTokens != 268 || p.InputTokens != 225 || p.OutputTokens != 415 {
		t.Errorf("tokens by class: owner %+v, proactive %+v", o, p)
	}
	if m := p.Models["claude-x"]; m.InputTokens != 25 || m.OutputTokens != 15 {
		t.Errorf("proactive claude-x: %+v", p.Models)
	}
	if want := (124*1.25 + 268*10) / 1e6; o.Cost < want*0.999 || o.Cost > want*1.001 {
		t.Errorf("owner cost %v, want %v", o.Cost, want)
	}
	if sp.TokensDaily != 500 || !strings.Contains(sp.Over, "used 640 of its daily 500 model tokens") {
		t.Errorf("budget: %d %q", sp.TokensDaily, sp.Over)
	}

	// impsup, against a live containerd and this impgw, leaves the
	// proactive tasks waiting with the reason; the owner task is
	// cancelled first, so the pass starts no box.
	t.Run("impsup", func(t *testing.T) {
		boxes.Need(t)
		org, _ := os.ReadFile(s.y.Path("org.toml"))
		org = append(org, fmt.Sprintf("[gateway]\nlisten = %q\n[containerd]\naddress = %q\nnamespace = \"meter-%d\"\n", s.listen, boxes.Sock, time.Now().UnixNano()%1e9)...)
		os.WriteFile(s.y.Path("org.toml"), org, 0o640)
		later := task("--proactive", "weekly digest")
		if out, err := s.run(t, "impq", "cancel", ownerTask); err != nil {
			t.Fatalf("impq cancel: %v %s", err, out)
		}
		for range 2 {
			if out, err := s.run(t, "impsup", "once"); err != nil || !strings.Contains(out, "started 0") {
				t.Fatalf("impsup once: %v %s", err, out)
			}
		}
		for _, id := range []string{proTask, later} {
			tk, err := queue.Get(s.y, id)
			if err != nil {
				t.Fatal(err)
			}
			if tk.State != state.Waiting || !strings.Contains(tk.Reason, "used 640 of its daily 500 model tokens") {
				t.Errorf("task %s: %s %q", id, tk.State, tk.Reason)
			}
			held := 0
			for _, h := range tk.History {
				if h.To == state.Waiting && strings.Contains(h.Why, "over budget") {
					held++
				}
			}
			if held != 1 {
				t.Errorf("task %s held %d times over two passes, want once", id, held)
			}
		}
		out, err := s.run(t, "impq", "show", later)
		if err != nil || !strings.Contains(out, "over budget") {
			t.Errorf("impq show of a held task: %v\n%s", err, out)
		}
	})
}

// TestUnknownUsageHeld: a proactive run's event stream asked for without
// usage is relayed and recorded as unknown usage; the next proactive
// call is refused 429 naming it, since tokens_daily cannot be held, and
// impq spend says so; owner calls still pass.
func TestUnknownUsageHeld(t *testing.T) {
	m := newMeterYard(t, "[budget.yuko]\ntokens_daily = 500\n")
	owner, proactive := m.client(t, m.task(t, "asked by alice")), m.client(t, m.task(t, "--proactive", "digest"))
	if body, _ := m.call(t, proactive, "/v1/chat/completions?stream=nousage", 200); !strings.Contains(body, `"content":"hi"`) {
		t.Errorf("the stream was not relayed whole: %q", body)
	}
	now := time.Now().UTC()
	body, h := m.call(t, proactive, "/v1/chat/completions", http.StatusTooManyRequests)
	if !strings.Contains(body, "made 1 model call(s) on proactive work whose usage could not be read, so its daily 500 model tokens cannot be held") {
		t.Errorf("refusal: %s", body)
	}
	// The budget passes at the next UTC midnight, and the client is told.
	midnight := time.Date(now.Year(), now.Month(), now.Day()+1, 0, 0, 0, 0, time.UTC)
	if ra, err := strconv.Atoi(h.Get("Retry-After")); err != nil || ra < 1 || time.Duration(ra)*time.Second > time.Until(midnight)+5*time.Second || time.Duration(ra)*time.Second < time.Until(midnight)-5*time.Second {
		t.Errorf("Retry-After %q, want the seconds to %s", h.Get("Retry-After"), midnight)
	}
	m.call(t, owner, "/v1/chat/completions?stream=nousage", 200)
	m.call(t, owner, "/v1/chat/completions", 200)
	var sp struct {
		Classes map[string]struct {
			UnknownUsage int64 `json:"unknown_usage"`
		} `json:"classes"`
		Over string `json:"over"`
	}
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		out, err := m.run(t, "impq", "spend", "--json", "--imp", "yuko")
		if err != nil || json.Unmarshal([]byte(out), &sp) != nil {
			t.Fatalf("impq spend: %v %s", err, out)
		}
		if sp.Classes["owner"].UnknownUsage == 1 || time.Now().After(deadline) {
			break
		}
	}
	if sp.Classes["proactive"].UnknownUsage != 1 || sp.Classes["owner"].UnknownUsage != 1 || !strings.Contains(sp.Over, "whose usage could not be read") {
		t.Errorf("impq spend: %+v", sp)
	}
}
