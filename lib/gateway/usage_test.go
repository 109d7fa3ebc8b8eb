package gateway

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"testing/iotest"
	"time"

	"github.com/impyard/impyard/lib/judge"
)

const (
	openAIJSON    = `{"id":"c1","model":"gpt-5","choices":[{"message":{"content":"hi"}}],"usage":{"prompt_tokens":12,"completion_tokens":34,"total_tokens":46}}`
	responsesJSON = `{"id":"r1","model":"gpt-5","output":[],"usage":{"input_tokens":7,"output_tokens":8,"total_tokens":15}}`
	anthropicJSON = `{"id":"m1","type":"message","model":"claude-x","content":[{"type":"text","text":"hi"}],"usage":{"input_tokens":21,"output_tokens":5}}`
	openAISSE     = "data: {\"model\":\"gpt-5\",\"choices\":[{\"delta\":{\"content\":\"he\"}}],\"usage\":null}\n\n" +
		"data: {\"model\":\"gpt-5\",\"choices\":[{\"delta\":{\"content\":\"llo\"}}],\"usage\":null}\n\n" +
		"data: {\"model\":\"gpt-5\",\"choices\":[],\"usage\":{\"prompt_tokens\":100,\"completion_tokens\":200}}\n\n" +
		"data: [DONE]\n\n"
	responsesSSE = "event: response.created\ndata: {\"type\":\"response.created\",\"response\":{\"model\":\"gpt-5\",\"usage\":null}}\n\n" +
		"event: response.output_text.delta\ndata: {\"type\":\"response.output_text.delta\",\"delta\":\"hi\"}\n\n" +
		"event: response.completed\ndata: {\"type\":\"response.completed\",\"response\":{\"model\":\"gpt-5\",\"usage\":{\"input_tokens\":9,\"output_tokens\":3}}}\n\n"
	anthropicSSE = "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"model\":\"claude-x\",\"usage\":{\"input_tokens\":25,\"output_tokens\":1}}}\n\n" +
		"event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"delta\":{\"text\":\"hi\"}}\n\n" +
		"event: message_delta\ndata: {\"type\":\"message_delta\",\"usage\":{\"output_tokens\":15}}\n\n" +
		"event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n"
	geminiJSON = `{"candidates":[{"content":{"parts":[{"text":"hi"}],"role":"model"}}],"usageMetadata":{"promptTokenCount":31,"candidatesTokenCount":9,"totalTokenCount":52,"cachedContentTokenCount":20,"thoughtsTokenCount":12},"modelVersion":"gemini-2.5-pro"}`
	geminiSSE  = "data: {\"candidates\":[{\"content\":{\"parts\":[{\"text\":\"he\"}]}}],\"usageMetadata\":{\"promptTokenCount\":40,\"totalTokenCount\":40},\"modelVersion\":\"gemini-2.5-flash\"}\r\n\r\n" +
		"data: {\"candidates\":[{\"content\":{\"parts\":[{\"text\":\"llo\"}]}}],\"usageMetadata\":{\"promptTokenCount\":40,\"candidatesTokenCount\":2,\"totalTokenCount\":42},\"modelVersion\":\"gemini-2.5-flash\"}\r\n\r\n" +
		"data: {\"candidates\":[{\"finishReason\":\"STOP\"}],\"usageMetadata\":{\"promptTokenCount\":40,\"candidatesTokenCount\":6,\"toolUsePromptTokenCount\":3,\"totalTokenCount\":49},\"modelVersion\":\"gemini-2.5-flash\"}\r\n\r\n"
)

func TestUsageReader(t *testing.T) {
	long := "data: {\"usage\":{\"prompt_tokens\":1,\"completion_tokens\":1},\"pad\":\"" + strings.Repeat("x", maxUsageLine) + "\"}\n\n"
	for _, tc := range []struct {
		name, meter, ctype, body string
		want                     Usage
	}{
		{"openai json", judge.MeterOpenAI, "application/json", openAIJSON, Usage{Model: "gpt-5", InputTokens: 12, OutputTokens: 34}},
		{"responses json", judge.MeterOpenAI, "application/json", responsesJSON, Usage{Model: "gpt-5", InputTokens: 7, OutputTokens: 8}},
		{"anthropic json", judge.MeterAnthropic, "application/json", anthropicJSON, Usage{Model: "claude-x", InputTokens: 21, OutputTokens: 5}},
		{"openai sse", judge.MeterOpenAI, "text/event-stream; charset=utf-8", openAISSE, Usage{Model: "gpt-5", InputTokens: 100, OutputTokens: 200}},
		{"responses sse", judge.MeterOpenAI, "text/event-stream", responsesSSE, Usage{Model: "gpt-5", InputTokens: 9, OutputTokens: 3}},
		{"anthropic sse", judge.MeterAnthropic, "text/event-stream", anthropicSSE, Usage{Model: "claude-x", InputTokens: 25, OutputTokens: 15}},
		{"anthropic cached prompt", judge.MeterAnthropic, "application/json", `{"model":"claude-x","usage":{"input_tokens":3,"cache_creation_input_tokens":150000,"cache_read_input_tokens":20,"output_tokens":5}}`, Usage{Model: "claude-x", InputTokens: 150023, OutputTokens: 5}},
		{"cache figures under the openai meter", judge.MeterOpenAI, "application/json", `{"model":"gpt-5","usage":{"prompt_tokens":3,"cache_creation_input_tokens":150000,"completion_tokens":5}}`, Usage{Model: "gpt-5", InputTokens: 3, OutputTokens: 5}},
		{"sse without a final newline", judge.MeterOpenAI, "text/event-stream", strings.TrimRight(openAISSE[:strings.Index(openAISSE, "data: [DONE]")], "\n"), Usage{Model: "gpt-5", InputTokens: 100, OutputTokens: 200}},
		{"crlf sse", judge.MeterAnthropic, "text/event-stream", strings.ReplaceAll(anthropicSSE, "\n", "\r\n"), Usage{Model: "claude-x", InputTokens: 25, OutputTokens: 15}},
		{"gemini json", judge.MeterGemini, "application/json", geminiJSON, Usage{Model: "gemini-2.5-pro", InputTokens: 31, OutputTokens: 21}},
		{"gemini sse", judge.MeterGemini, "text/event-stream", geminiSSE, Usage{Model: "gemini-2.5-flash", InputTokens: 43, OutputTokens: 6}},
		{"gemini json array", judge.MeterGemini, "application/json", "[" + geminiJSON + ",\r\n" + `{"usageMetadata":{"promptTokenCount":31,"candidatesTokenCount":15,"thoughtsTokenCount":12}}` + "]", Usage{Model: "gemini-2.5-pro", InputTokens: 31, OutputTokens: 27}},
		{"openai names under the gemini meter", judge.MeterGemini, "application/json", openAIJSON, Usage{Unknown: true}},
		{"gemini names under the openai meter", judge.MeterOpenAI, "text/event-stream", geminiSSE, Usage{Unknown: true}},
		{"gemini negative counts", judge.MeterGemini, "application/json", `{"usageMetadata":{"promptTokenCount":-1,"candidatesTokenCount":-2}}`, Usage{Unknown: true}},
		{"no usage", judge.MeterOpenAI, "application/json", `{"model":"gpt-5","choices":[]}`, Usage{Model: "gpt-5", Unknown: true}},
		{"malformed json", judge.MeterOpenAI, "application/json", `{"model":"gpt-5","usage":{"prompt_tokens":12,`, Usage{Unknown: true}},
		{"usage of the wrong type", judge.MeterOpenAI, "application/json", `{"usage":{"prompt_tokens":"12"}}`, Usage{Unknown: true}},
		{"negative tokens", judge.MeterAnthropic, "application/json", `{"usage":{"input_tokens":-3,"output_tokens":-4}}`, Usage{Unknown: true}},
		{"openai names under the anthropic meter", judge.MeterAnthropic, "application/json", openAIJSON, Usage{Model: "gpt-5", Unknown: true}},
		{"not json", judge.MeterOpenAI, "text/plain", "hello", Usage{Unknown: true}},
		{"empty", judge.MeterOpenAI, "application/json", "", Usage{Unknown: true}},
		{"body past the bound", judge.MeterOpenAI, "application/json", `{"pad":"` + strings.Repeat("x", maxUsageBody) + `","usage":{"prompt_tokens":1}}`, Usage{Unknown: true}},
		{"line past the bound", judge.MeterOpenAI, "text/event-stream", long, Usage{Unknown: true}},
		{"a long line does not hide the next", judge.MeterOpenAI, "text/event-stream", long + openAISSE, Usage{Model: "gpt-5", InputTokens: 100, OutputTokens: 200}},
		{"a member whose name ends in usage is not usage", judge.MeterOpenAI, "text/event-stream", "data: {\"prior_usage\":{\"prompt_tokens\":5},\"usage\":null}\n\n" + "data: {\"model\":\"gpt-5\",\"x_usage\":{\"completion_tokens\":9},\"usage\":{\"prompt_tokens\":1,\"completion_tokens\":2}}\n\n", Usage{Model: "gpt-5", InputTokens: 1, OutputTokens: 2}},
		{"a member whose name ends in usage alone", judge.MeterOpenAI, "text/event-stream", "data: {\"model\":\"gpt-5\",\"prior_usage\":{\"prompt_tokens\":5}}\n\n", Usage{Unknown: true}},
		{"broken event among good ones", judge.MeterAnthropic, "text/event-stream", "data: {\"usage\":{\n\n" + anthropicSSE, Usage{Model: "claude-x", InputTokens: 25, OutputTokens: 15}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			relaySplit(t, tc.body, tc.want, func(r io.Reader) metered { return newUsageReader(io.NopCloser(r), tc.meter, tc.ctype) })
		})
	}
}

// metered relays a body and reads its usage: a usageReader, a
// frameMeter.
type metered interface {
	io.Reader
	usage() *Usage
}

// relaySplit reads body through wrap whole and one byte at a time
// (every line, object and frame split everywhere), and checks that it
// is relayed unchanged and its usage is want.
func relaySplit(t *testing.T, body string, want Usage, wrap func(io.Reader) metered) {
	t.Helper()
	for _, r := range []io.Reader{strings.NewReader(body), iotest.OneByteReader(strings.NewReader(body))} {
		m := wrap(r)
		got, err := io.ReadAll(m)
		if err != nil || string(got) != body {
			t.Fatalf("relayed %d bytes of %d, %v", len(got), len(body), err)
		}
		if u := m.usage(); *u != want {
			t.Errorf("usage %+v, want %+v", *u, want)
		}
	}
}

// A metering rule's responses carry their usage into the outcome line and
// the meter; a request Admit refuses is answered 429 and recorded once.
func TestMeteredModelCalls(t *testing.T) {
	var mu sync.Mutex
	var encodings []string
	ups := newTLSUpstream(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		encodings = append(encodings, r.Header.Get("Accept-Encoding"))
		mu.Unlock()
		switch r.URL.Path {
		case "/v1/chat/completions":
			if r.URL.Query().Get("stream") != "" {
				w.Header().Set("Content-Type", "text/event-stream")
				for _, ev := range strings.SplitAfter(openAISSE, "\n\n") {
					io.WriteString(w, ev)
					w.(http.Flusher).Flush()
				}
				return
			}
			w.Header().Set("Content-Type", "application/json")
			io.WriteString(w, openAIJSON)
		case "/v1/messages":
			w.Header().Set("Content-Type", "text/event-stream")
			io.WriteString(w, anthropicSSE)
		case "/broken":
			io.WriteString(w, `{"usage":`)
		case "/refused":
			w.WriteHeader(http.StatusBadRequest)
			io.WriteString(w, `{"error":"bad"}`)
		}
	}))
	var spent []Spend
	refuse := map[string]bool{"t-proactive": true}
	h := startGateway(t, policy(
		`{"name": "openai", "match": {"host": "api.test", "pathPrefix": "/v1/chat/", "network": "127.0.0.0/8"}, "verdict": "allow", "meter": "openai"}`,
		`{"name": "anthropic", "match": {"host": "api.test", "pathPrefix": "/v1/messages", "network": "127.0.0.0/8"}, "verdict": "allow", "meter": "anthropic"}`,
		`{"name": "plain", "match": {"host": "api.test", "network": "127.0.0.0/8"}, "verdict": "allow", "meter": "openai"}`,
		`{"name": "unmetered", "match": {"host": "mail.test", "network": "127.0.0.0/8"}, "verdict": "allow"}`),
		func(c *Config) {
			c.UpstreamCA = ups.bundle
			c.Authenticate = func(_ net.Conn, pa string) (string, string, error) {
				return "yuko", strings.TrimPrefix(pa, "Basic "), nil
			}
			c.Meter = func(sp Spend) {
				mu.Lock()
				defer mu.Unlock()
				spent = append(spent, sp)
			}
			c.Admit = func(call Call) (func(), error) {
				if refuse[call.Task] {
					return nil, fmt.Errorf("imp %s is over its proactive budget", call.Subject)
				}
				if call.Task == "t-later" {
					return nil, RetryAt(errors.New("over until later"), time.Now().Add(90*time.Second))
				}
				return nil, nil
			}
		})
	h.resolve("api.test", "127.0.0.1")
	h.resolve("mail.test", "127.0.0.1")
	client := func(task string) *http.Client {
		c := h.client()
		c.Transport.(*http.Transport).ProxyConnectHeader = http.Header{"Proxy-Authorization": {"Basic " + task}}
		return c
	}
	owner, proactive := client("t-owner"), client("t-proactive")
	base := fmt.Sprintf("https://api.test:%d", ups.port)
	for _, tc := range []struct {
		c      *http.Client
		path   string
		status int
		body   string
		usage  *Usage
	}{
		{owner, "/v1/chat/completions", 200, openAIJSON, &Usage{Model: "gpt-5", InputTokens: 12, OutputTokens: 34}},
		{owner, "/v1/chat/completions?stream=1", 200, openAISSE, &Usage{Model: "gpt-5", InputTokens: 100, OutputTokens: 200}},
		{owner, "/v1/messages", 200, anthropicSSE, &Usage{Model: "claude-x", InputTokens: 25, OutputTokens: 15}},
		{owner, "/broken", 200, `{"usage":`, &Usage{Unknown: true}},
		{owner, "/refused", 400, `{"error":"bad"}`, nil},
		{proactive, "/v1/chat/completions", 429, "", nil},
	} {
		resp, body := h.do(tc.c, "POST", base+tc.path, `{"model":"gpt-5"}`, map[string]string{"Accept-Encoding": "gzip"})
		if resp.StatusCode != tc.status || tc.status == 200 && body != tc.body {
			t.Fatalf("%s: %d %q, want %d", tc.path, resp.StatusCode, body, tc.status)
		}
		r := h.last()
		if fmt.Sprint(r.Usage) != fmt.Sprint(tc.usage) || r.Status != tc.status {
			t.Errorf("%s: record status %d usage %+v, want %d %+v", tc.path, r.Status, r.Usage, tc.status, tc.usage)
		}
		if tc.status == 429 && (r.RefusedBy != RefusedByGateway || !strings.Contains(r.Reason, "over its proactive budget") || !strings.Contains(body, "over its proactive budget")) {
			t.Errorf("429: record %+v, body %q", r, body)
		}
		if ra := resp.Header.Get("Retry-After"); ra != "" {
			t.Errorf("%s: Retry-After %q from a refusal that names no time", tc.path, ra)
		}
	}
	// A refusal made with RetryAt tells the client when to come back.
	if resp, body := h.do(client("t-later"), "POST", base+"/v1/chat/completions", `{"model":"gpt-5"}`, nil); resp.StatusCode != 429 || resp.Header.Get("Retry-After") != "90" || !strings.Contains(body, "over until later") {
		t.Errorf("a refusal until later: %d Retry-After %q %q", resp.StatusCode, resp.Header.Get("Retry-After"), body)
	}
	// An unmetered rule is not admitted or metered: a proactive request passes.
	if resp, _ := h.do(proactive, "GET", fmt.Sprintf("https://mail.test:%d/", ups.port), "", nil); resp.StatusCode != 200 {
		t.Errorf("unmetered proactive request: %d", resp.StatusCode)
	}
	recs := h.waitRecords(8)
	if n := len(recs); n != 8 {
		t.Errorf("%d records, want 8: each refusal once", n)
	}
	mu.Lock()
	defer mu.Unlock()
	for _, e := range encodings {
		if e != "" && e != "gzip" {
			t.Errorf("upstream saw Accept-Encoding %q", e)
		}
	}
	if encodings[0] != "" {
		t.Errorf("metered request reached the upstream with Accept-Encoding %q", encodings[0])
	}
	var tokens int64
	for _, sp := range spent {
		if sp.Usage != nil {
			tokens += sp.Usage.InputTokens + sp.Usage.OutputTokens
			if sp.Task != "t-owner" || sp.Subject != "yuko" {
				t.Errorf("spend %+v", sp)
			}
		}
	}
	if tokens != 12+34+100+200+25+15 {
		t.Errorf("metered %d tokens: %+v", tokens, spent)
	}
}

// A model's stream reaches the client event by event, through a metering
// rule: the upstream sends the next event only once the client has read
// the one before, which it could not if the gateway held them.
func TestMeteredStreamIsNotHeld(t *testing.T) {
	next := make(chan struct{})
	events := strings.SplitAfter(strings.TrimSuffix(openAISSE, "\n\n"), "\n\n")
	events[len(events)-1] += "\n\n"
	ups := newTLSUpstream(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		for i, ev := range events {
			io.WriteString(w, ev)
			w.(http.Flusher).Flush()
			if i == len(events)-1 {
				return
			}
			select {
			case <-next:
			case <-r.Context().Done():
				return
			}
		}
	}))
	h := startGateway(t, policy(`{"name": "openai", "match": {"host": "api.test", "network": "127.0.0.0/8"}, "verdict": "allow", "meter": "openai"}`),
		func(c *Config) { c.UpstreamCA = ups.bundle })
	h.resolve("api.test", "127.0.0.1")
	resp, err := h.client().Get(fmt.Sprintf("https://api.test:%d/v1/chat/completions", ups.port))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	br := bufio.NewReader(resp.Body)
	for i, ev := range events[:len(events)-1] {
		got := make(chan string, 1)
		go func() {
			var b strings.Builder
			for !strings.HasSuffix(b.String(), "\n\n") {
				line, err := br.ReadString('\n')
				b.WriteString(line)
				if err != nil {
					break
				}
			}
			got <- b.String()
		}()
		select {
		case g := <-got:
			if g != ev {
				t.Fatalf("event %d: %q, want %q", i, g, ev)
			}
		case <-time.After(2 * time.Second):
			resp.Body.Close()
			ups.CloseClientConnections()
			t.Fatalf("event %d held by the gateway", i)
		}
		next <- struct{}{}
	}
	io.Copy(io.Discard, br)
	if u := h.last().Usage; u == nil || u.InputTokens != 100 || u.OutputTokens != 200 {
		t.Errorf("usage %+v", u)
	}
}
