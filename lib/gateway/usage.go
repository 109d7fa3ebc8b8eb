package gateway

import (
	"bytes"
	"encoding/json"
	"io"
	"math"
	"strings"

	"github.com/impyard/impyard/lib/judge"
)

// Usage is the model usage a metered response reported.
type Usage struct {
	Model        string `json:"model"`
	InputTokens  int64  `json:"input_tokens"`
	OutputTokens int64  `json:"output_tokens"`
	// Unknown: the response carried no usage the gateway could read
	// (missing, malformed, or past what it reads), which is recorded, and
	// never fails the request.
	Unknown bool `json:"unknown,omitempty"`
}

// Bounds of what the usage reader holds: a JSON body larger than
// maxUsageBody, or an event stream line longer than maxUsageLine, is
// relayed whole but not read for usage.
const (
	maxUsageBody = 4 << 20
	maxUsageLine = 256 << 10
)

// usageReader relays a response body as it is read and reads the usage
// from a copy: a JSON body is kept up to maxUsageBody and parsed at its
// end, an event stream (text/event-stream) is scanned line by line and
// each data line that mentions usage is parsed. Nothing waits for the
// parse: each read returns its bytes as soon as they are copied.
type usageReader struct {
	io.ReadCloser
	meter string
	key   []byte // the member that holds usage: usageKey, or geminiKey
	sse   bool
	// buf is the JSON body so far, or the event stream's unfinished line.
	buf  []byte
	over bool // buf outgrew its bound: the body, or this line, is not read
	u    Usage
	seen bool // a usage block was read
}

func newUsageReader(body io.ReadCloser, meter, contentType string) *usageReader {
	key := usageKey
	if meter == judge.MeterGemini {
		key = geminiKey
	}
	return &usageReader{ReadCloser: body, meter: meter, key: key,
		sse: strings.HasPrefix(strings.ToLower(strings.TrimSpace(contentType)), "text/event-stream")}
}

func (r *usageReader) Read(p []byte) (int, error) {
	n, err := r.ReadCloser.Read(p)
	if n > 0 {
		if r.sse {
			r.lines(p[:n])
		} else {
			r.keep(p[:n], maxUsageBody)
		}
	}
	return n, err
}

// keep appends b to buf within max; past it the buffer is dropped.
func (r *usageReader) keep(b []byte, max int) {
	if r.over {
		return
	}
	if len(r.buf)+len(b) > max {
		r.buf, r.over = nil, true
		return
	}
	r.buf = append(r.buf, b...)
}

// lines reads the complete lines of b: the line carried from before
// finished first, then those b holds whole, searched at once for a
// usage object, the lines around a find read alone; the unfinished line
// at the end is carried. Only a carried line is copied.
func (r *usageReader) lines(b []byte) {
	i := bytes.IndexByte(b, '\n')
	if i < 0 {
		r.keep(b, maxUsageLine)
		return
	}
	line := b[:i]
	if len(r.buf) > 0 || r.over {
		r.keep(line, maxUsageLine)
		line = r.buf
	}
	if !r.over {
		r.event(line)
	}
	r.buf, r.over = r.buf[:0], false
	b = b[i+1:]
	if j := bytes.LastIndexByte(b, '\n'); j >= 0 {
		r.whole(b[:j])
		b = b[j+1:]
	}
	r.keep(b, maxUsageLine)
}

// whole reads the lines of b, whole lines, that carry a usage object.
// Streams repeat "usage":null on every chunk before the last; parsing
// each, or even looking at each line apart, would cost more than
// relaying them.
func (r *usageReader) whole(b []byte) {
	for {
		k := keyIndex(b, r.key)
		if k < 0 {
			return
		}
		if !objectAfter(b[k+len(r.key):]) {
			b = b[k+len(r.key):]
			continue
		}
		start := bytes.LastIndexByte(b[:k], '\n') + 1
		end := len(b)
		if e := bytes.IndexByte(b[k:], '\n'); e >= 0 {
			end = k + e
		}
		r.event(b[start:end])
		b = b[end:]
	}
}

var (
	usageKey  = []byte(`"usage"`)
	geminiKey = []byte(`"usageMetadata"`)
)

// objectAfter reports whether b, what follows a member's name, starts
// its value with an object.
func objectAfter(b []byte) bool {
	colon := false
	for _, c := range b {
		switch {
		case c == ' ' || c == '\t' || c == '\r':
		case c == ':' && !colon:
			colon = true
		default:
			return colon && c == '{'
		}
	}
	return false
}

// event reads a data line of an event stream that carries a usage
// object.
func (r *usageReader) event(line []byte) {
	data, ok := bytes.CutPrefix(line, []byte("data:"))
	if ok && hasUsage(data, r.key) {
		r.parse(data)
	}
}

// hasUsage reports whether b has a key member, "usage" or
// "usageMetadata", whose value is an object.
func hasUsage(b, key []byte) bool {
	for {
		k := keyIndex(b, key)
		if k < 0 {
			return false
		}
		b = b[k+len(key):]
		if objectAfter(b) {
			return true
		}
	}
}

// usageBody is where the APIs put usage: at the top (a JSON response,
// OpenAI's chat chunks, Anthropic's message_delta, Gemini's responses
// and stream chunks, under usageMetadata), under response (OpenAI's
// Responses API events) or under message (Anthropic's message_start).
type usageBody struct {
	Model         string       `json:"model"`
	Usage         *usageTokens `json:"usage"`
	Response      *usageBody   `json:"response"`
	Message       *usageBody   `json:"message"`
	ModelVersion  string       `json:"modelVersion"`
	UsageMetadata *geminiUsage `json:"usageMetadata"`
}

// geminiUsage is Gemini's usageMetadata. Cached prompt tokens are part
// of promptTokenCount; tool-use prompts and thinking are counted apart,
// and billed as input and output.
type geminiUsage struct {
	PromptTokenCount        *int64 `json:"promptTokenCount"`
	ToolUsePromptTokenCount *int64 `json:"toolUsePromptTokenCount"`
	CandidatesTokenCount    *int64 `json:"candidatesTokenCount"`
	ThoughtsTokenCount      *int64 `json:"thoughtsTokenCount"`
}

type usageTokens struct {
	PromptTokens     *int64 `json:"prompt_tokens"`
	CompletionTokens *int64 `json:"completion_tokens"`
	InputTokens      *int64 `json:"input_tokens"`
	OutputTokens     *int64 `json:"output_tokens"`
	// Anthropic counts cached prompt tokens apart from input_tokens: a
	// box could otherwise mark its prompt cacheable and leave the meter.
	CacheCreationInputTokens *int64 `json:"cache_creation_input_tokens"`
	CacheReadInputTokens     *int64 `json:"cache_read_input_tokens"`
}

// parse reads one JSON object's usage. A later figure replaces an
// earlier one: Anthropic's stream counts input in message_start and
// output, cumulative, in each message_delta.
func (r *usageReader) parse(b []byte) {
	if r.meter == judge.MeterGemini {
		r.parseGemini(b)
		return
	}
	var v usageBody
	if json.Unmarshal(b, &v) != nil {
		return
	}
	for _, o := range []*usageBody{&v, v.Response, v.Message} {
		if o == nil {
			continue
		}
		if o.Model != "" {
			r.u.Model = o.Model
		}
		if o.Usage != nil {
			r.tokens(o.Usage)
		}
	}
}

// parseGemini reads a Gemini response, stream chunk, or the JSON array
// of chunks streamGenerateContent answers without alt=sse. Each chunk's
// figures are the call's so far, so the last replaces the others.
func (r *usageReader) parseGemini(b []byte) {
	var chunks []usageBody
	if b = bytes.TrimSpace(b); len(b) > 0 && b[0] == '[' {
		if json.Unmarshal(b, &chunks) != nil {
			return
		}
	} else {
		chunks = make([]usageBody, 1)
		if json.Unmarshal(b, &chunks[0]) != nil {
			return
		}
	}
	for _, c := range chunks {
		if c.ModelVersion != "" {
			r.u.Model = c.ModelVersion
		}
		if g := c.UsageMetadata; g != nil {
			if n, ok := sum(g.PromptTokenCount, g.ToolUsePromptTokenCount); ok {
				r.u.InputTokens, r.seen = n, true
			}
			if n, ok := sum(g.CandidatesTokenCount, g.ThoughtsTokenCount); ok {
				r.u.OutputTokens, r.seen = n, true
			}
		}
	}
}

// sum adds the counts given, ignoring negative ones; false if there is
// none to add.
func sum(counts ...*int64) (int64, bool) {
	var n int64
	any := false
	for _, c := range counts {
		if c != nil && *c >= 0 {
			n, any = n+*c, true
		}
	}
	return n, any
}

func (r *usageReader) tokens(t *usageTokens) {
	in, out := t.InputTokens, t.OutputTokens
	if r.meter == judge.MeterOpenAI {
		// Chat completions name them prompt and completion; the
		// Responses API input and output.
		if t.PromptTokens != nil {
			in = t.PromptTokens
		}
		if t.CompletionTokens != nil {
			out = t.CompletionTokens
		}
	}
	if in != nil && *in >= 0 {
		n := *in
		if r.meter == judge.MeterAnthropic {
			for _, c := range []*int64{t.CacheCreationInputTokens, t.CacheReadInputTokens} {
				if c != nil && *c > 0 {
					n += *c
				}
			}
		}
		r.u.InputTokens, r.seen = n, true
	}
	if out != nil && *out >= 0 {
		r.u.OutputTokens, r.seen = *out, true
	}
}

// usage is what the body reported once it has been relayed.
func (r *usageReader) usage() *Usage {
	switch {
	case r.sse && len(r.buf) > 0 && !r.over:
		// A stream that ends without a newline after its last line.
		r.event(r.buf)
	case !r.sse && !r.over:
		r.parse(r.buf)
	}
	r.buf = nil
	u := r.u
	u.Unknown = !r.seen
	return &u
}

// Asked is what a model call's request asks for: the model it names
// (in the body, or for Gemini in the path, models/NAME:generateContent)
// and the most output tokens it allows (max_tokens, max_output_tokens,
// max_completion_tokens or Gemini's generationConfig.maxOutputTokens,
// the largest when several are given), 0 when the body names none or is
// not a JSON object. A limit written as a fraction or an exponent counts
// by its value, as an upstream may read it so.
func (c Call) Asked() (model string, maxOutput int64) {
	var req struct {
		Model               any     `json:"model"`
		MaxTokens           float64 `json:"max_tokens"`
		MaxOutputTokens     float64 `json:"max_output_tokens"`
		MaxCompletionTokens float64 `json:"max_completion_tokens"`
		GenerationConfig    struct {
			MaxOutputTokens float64 `json:"maxOutputTokens"`
		} `json:"generationConfig"`
	}
	if json.Unmarshal(c.Body, &req) != nil {
		return "", 0
	}
	model, _ = req.Model.(string)
	if _, rest, ok := strings.Cut(c.Path, "/models/"); model == "" && ok {
		model, _, _ = strings.Cut(rest, ":")
	}
	m := max(req.MaxTokens, req.MaxOutputTokens, req.MaxCompletionTokens, req.GenerationConfig.MaxOutputTokens, 0)
	if m >= 1<<53 {
		m = 1 << 53
	}
	return model, int64(math.Ceil(m))
}

// keyIndex is bytes.Index(b, key) for a key that starts with a quote:
// JSON is full of quotes, so searching from the byte after it skips
// most false starts.
func keyIndex(b, key []byte) int {
	if len(b) < len(key) {
		return -1
	}
	off := 1
	for {
		k := bytes.Index(b[off:], key[1:])
		if k < 0 {
			return -1
		}
		k += off - 1
		if b[k] == '"' {
			return k
		}
		off = k + 2
	}
}
