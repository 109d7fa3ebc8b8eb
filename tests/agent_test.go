package tests

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/impyard/impyard/lib/gate"
	"github.com/impyard/impyard/lib/gateway"
	"github.com/impyard/impyard/lib/ledger"
	"github.com/impyard/impyard/lib/state"
)

// claudeRootfs is examples/claude-code's box rootfs, made once per test
// binary beside the box harness's own.
var claudeRootfs struct {
	once sync.Once
	dir  string
	err  error
}

// testsCache is the tests' own cache directory, impyard-tests in the
// user's: an XDG_CACHE_HOME for what the tests install, kept between runs.
func testsCache(t *testing.T) string {
	t.Helper()
	cache, err := os.UserCacheDir()
	if err != nil {
		t.Fatal(err)
	}
	return filepath.Join(cache, "impyard-tests")
}

// needClaudeRootfs makes the rootfs with examples/claude-code/mkrootfs.
// npm's download of Claude Code is kept in the tests' cache, where
// mkrootfs keeps it with XDG_CACHE_HOME set to it, so only a machine's
// first run reaches the registry.
func needClaudeRootfs(t *testing.T) string {
	t.Helper()
	boxes.Need(t)
	cache := testsCache(t)
	claudeRootfs.once.Do(func() {
		claudeRootfs.dir = filepath.Join(boxes.Dir, "claude-rootfs")
		cmd := exec.Command("examples/claude-code/mkrootfs", "--cache", filepath.Join(cache, "impyard", "npm"), claudeRootfs.dir)
		cmd.Dir = ".."
		if out, err := cmd.CombinedOutput(); err != nil {
			claudeRootfs.err = fmt.Errorf("examples/claude-code/mkrootfs: %v\n%s", err, out)
		}
	})
	if claudeRootfs.err != nil {
		t.Fatal(claudeRootfs.err)
	}
	return claudeRootfs.dir
}

// anthropicAPI stands in for Anthropic's Messages API on loopback, as a
// stream, with a script: a call without a tool result asks for the Bash
// tool to run command; a call with one ends the turn. It keeps what the
// gateway forwarded.
type anthropicAPI struct {
	srv     *httptest.Server
	command string
	// onFirst runs while the first model call waits for its answer: the
	// box is running then.
	onFirst func()

	mu      sync.Mutex
	calls   int
	keys    []string // the x-api-key of each model call
	results []string // the tool results the agent sent back
	other   []string // requests that are not model calls
}

func newAnthropicAPI(t *testing.T, command string) *anthropicAPI {
	a := &anthropicAPI{command: command}
	a.srv = httptest.NewTLSServer(http.HandlerFunc(a.serve))
	t.Cleanup(a.srv.Close)
	return a
}

func (a *anthropicAPI) serve(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	if r.Method != "POST" || r.URL.Path != "/v1/messages" {
		a.mu.Lock()
		a.other = append(a.other, r.Method+" "+r.URL.Path)
		a.mu.Unlock()
		http.NotFound(w, r)
		return
	}
	var req struct {
		Messages []struct {
			Content json.RawMessage `json:"content"`
		} `json:"messages"`
	}
	json.Unmarshal(body, &req)
	var results []string
	for _, m := range req.Messages {
		var blocks []struct {
			Type    string          `json:"type"`
			Content json.RawMessage `json:"content"`
		}
		json.Unmarshal(m.Content, &blocks)
		for _, b := range blocks {
			if b.Type == "tool_result" {
				results = append(results, string(b.Content))
			}
		}
	}
	a.mu.Lock()
	a.calls++
	first := a.calls == 1
	a.keys = append(a.keys, r.Header.Get("X-Api-Key"))
	a.results = append(a.results, results...)
	a.mu.Unlock()
	if first && a.onFirst != nil {
		a.onFirst()
	}
	w.Header().Set("Content-Type", "text/event-stream")
	send := func(event string, data any) {
		b, _ := json.Marshal(data)
		fmt.Fprintf(w, "event: %s\ndata: %s\n\n", event, b)
		w.(http.Flusher).Flush()
	}
	type m = map[string]any
	send("message_start", m{"type": "message_start", "message": m{"id": fmt.Sprintf("msg_%d", len(results)), "type": "message", "role": "assistant",
		"model": "claude-stand-in", "content": []any{}, "stop_reason": nil, "usage": m{"input_tokens": 25, "output_tokens": 1}}})
	stop := "end_turn"
	if len(results) == 0 {
		input, _ := json.Marshal(m{"command": a.command, "description": "file the proposal"})
		send("content_block_start", m{"type": "content_block_start", "index": 0, "content_block": m{"type": "tool_use", "id": "toolu_1", "name": "Bash", "input": m{}}})
		send("content_block_delta", m{"type": "content_block_delta", "index": 0, "delta": m{"type": "input_json_delta", "partial_json": string(input)}})
		stop = "tool_use"
	} else {
		send("content_block_start", m{"type": "content_block_start", "index": 0, "content_block": m{"type": "text", "text": ""}})
		send("content_block_delta", m{"type": "content_block_delta", "index": 0, "delta": m{"type": "text_delta", "text": "I proposed the email; it waits for the owner."}})
	}
	send("content_block_stop", m{"type": "content_block_stop", "index": 0})
	send("message_delta", m{"type": "message_delta", "delta": m{"stop_reason": stop, "stop_sequence": nil}, "usage": m{"output_tokens": 15}})
	send("message_stop", m{"type": "message_stop"})
}

// boxEnvs returns the environments of the running processes whose
// environment names the task: the box's.
func boxEnvs(task string) []string {
	var envs []string
	procs, _ := filepath.Glob("/proc/[0-9]*/environ")
	for _, p := range procs {
		b, err := os.ReadFile(p)
		if err == nil && bytes.Contains(b, []byte("\x00IMPYARD_TASK="+task+"\x00")) {
			envs = append(envs, string(b))
		}
	}
	return envs
}

// filesHolding returns the files below dir whose bytes hold s.
func filesHolding(t *testing.T, dir, s string) []string {
	t.Helper()
	var found []string
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || !d.Type().IsRegular() {
			return err
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		if bytes.Contains(b, []byte(s)) {
			found = append(found, path)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return found
}

const anthropicKey = "sk-ant-api03-stand-in-key-never-in-a-box"

// TestBoxClaudeCode runs Anthropic's Claude Code, installed from npm by
// examples/claude-code/mkrootfs, as the imp claude in a real box, with
// the example's gateway rule in front of a loopback stand-in for the
// Messages API that streams: its first answer has the agent run propose,
// its second ends the turn. The model calls pass the gateway, allowed by
// the example's rule, with the key the gateway injected; their usage is
// on the decision records and in the ledger; the proposal is a gate
// waiting for the owner; and the key is nowhere in the box: not in its
// processes' environment while it runs, not in its rootfs, not in the
// workspace it left, and in no record of the yard.
func TestBoxClaudeCode(t *testing.T) {
	rootfs := needClaudeRootfs(t)
	b := newBoxYard(t)
	os.WriteFile(filepath.Join(b.home, "secrets", "anthropic"), []byte(anthropicKey+"\n"), 0o600)
	api := newAnthropicAPI(t, `propose email-send '{"to":["team@ourco.com"],"subject":"Hello","body":"Hello from Claude Code"}' 'the task asked for an email'`)

	// The example's rule, for the stand-in's address in place of
	// Anthropic's, at the top of the policy.
	rule, err := os.ReadFile("../examples/claude-code/gateway-rule.json")
	if err != nil {
		t.Fatal(err)
	}
	r := strings.Replace(string(rule), `"host": "api.anthropic.com",`, `"host": "127.0.0.1", "network": "127.0.0.0/8",`, 1)
	if r == string(rule) {
		t.Fatalf("examples/claude-code/gateway-rule.json names no api.anthropic.com host:\n%s", rule)
	}
	pol, _ := os.ReadFile(b.y.PolicyPath())
	os.WriteFile(b.y.PolicyPath(), []byte(strings.Replace(string(pol), `"rules":[`, `"rules":[`+r+",", 1)), 0o640)

	b.imp(t, "claude", map[string]string{
		"rootfs":  fmt.Sprintf("%q", rootfs),
		"command": fmt.Sprintf(`["/usr/bin/env", "ANTHROPIC_BASE_URL=%s", "/usr/local/bin/claude-imp"]`, api.srv.URL),
		"ceiling": `"120s"`, "memory": `"1G"`,
	})
	taskID := b.add(t, "claude", "tell team@ourco.com hello")
	var envs []string
	api.onFirst = func() {
		found := boxEnvs(taskID)
		api.mu.Lock()
		envs = found
		api.mu.Unlock()
	}
	out := b.once(t)
	task := b.task(t, taskID)
	log := b.boxLog(t, task)
	if task.State != state.NeedsReview {
		api.mu.Lock()
		defer api.mu.Unlock()
		t.Fatalf("task is %s (%s), want needs-review\nimpsup: %s\nbox.log:\n%s\ntool results: %q", task.State, task.Reason, out, log, api.results)
	}
	if !strings.Contains(log, "I proposed the email") {
		t.Errorf("box.log lacks the agent's last answer:\n%s", log)
	}

	// The proposal: a gate of claude's, for this task, with the payload
	// the model asked for; the agent was told its gate.
	gates, _ := gate.List(b.y, gate.Filter{Imp: "claude"})
	if len(gates) != 1 || gates[0].Task != taskID || gates[0].Intent != "email-send" || !strings.Contains(string(gates[0].Payload), `"Hello from Claude Code"`) {
		t.Fatalf("gates %+v", gates)
	}
	api.mu.Lock()
	calls, keys, results, other, envs := api.calls, api.keys, api.results, api.other, envs
	api.mu.Unlock()
	if len(results) != 1 || !strings.Contains(results[0], gates[0].ID) {
		t.Errorf("the agent's tool results %q do not name gate %s", results, gates[0].ID)
	}
	if calls != 2 || len(other) != 0 {
		t.Errorf("the stand-in had %d model calls and %q besides; want 2 and nothing", calls, other)
	}
	for _, k := range keys {
		if k != anthropicKey {
			t.Errorf("a model call reached the API with x-api-key %q, not the injected key", k)
		}
	}

	// Every model call on record: allowed by the example's rule, as
	// claude, metered.
	recs, _, err := gateway.ReadRecords(b.y.Path("runs", "decisions.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	var metered int
	var side []string
	for _, r := range recs {
		if r.Request.Imp != "claude" {
			continue
		}
		if r.Request.Path != "/v1/messages" {
			side = append(side, fmt.Sprintf("%s %s %s://%s%s", r.Verdict, r.Request.Method, r.Request.Protocol, r.Request.Host, r.Request.Path))
			continue
		}
		if r.Verdict != "allow" || r.Rule != "claude-code" || r.Status != 200 {
			t.Errorf("model call record: %+v", r)
		}
		if r.Usage != nil && r.Usage.Model == "claude-stand-in" && r.Usage.InputTokens == 25 && r.Usage.OutputTokens == 15 {
			metered++
		}
	}
	if metered != calls {
		t.Errorf("%d model calls metered on record, want %d", metered, calls)
	}
	// Its side traffic is off: nothing but model calls left the box.
	if len(side) > 0 {
		t.Errorf("requests of the box besides its model calls: %q", side)
	}
	var in, outTok int64
	ledger.Read(b.y, "claude", time.Time{}, time.Now().Add(time.Hour), func(e ledger.Entry) {
		if e.Kind == ledger.Tokens && e.Task == taskID {
			in, outTok = in+e.InputTokens, outTok+e.OutputTokens
		}
	})
	if in != 25*int64(calls) || outTok != 15*int64(calls) {
		t.Errorf("ledger: %d+%d tokens for the task, want %d+%d", in, outTok, 25*calls, 15*calls)
	}

	// The key, nowhere in the box or the yard.
	if len(envs) == 0 {
		t.Error("no process of the box was found while it ran")
	}
	placeholder := 0
	for _, env := range envs {
		if strings.Contains(env, anthropicKey) {
			t.Errorf("the key is in the environment of a process of the box")
		}
		if strings.Contains("\x00"+env, "\x00ANTHROPIC_API_KEY=IMPYARD_PLACEHOLDER_anthropic\x00") {
			placeholder++
		}
	}
	if placeholder == 0 {
		t.Errorf("no process of the box has the placeholder for the key: %q", envs)
	}
	if f := filesHolding(t, rootfs, anthropicKey); len(f) > 0 {
		t.Errorf("the key is in the box's rootfs: %s", f)
	}
	if f := filesHolding(t, b.y.Root, anthropicKey); len(f) > 0 {
		t.Errorf("the key is in the yard: %s", f)
	}
}
