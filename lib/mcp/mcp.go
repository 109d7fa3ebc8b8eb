// Package mcp lifts MCP calls (JSON-RPC 2.0 requests and notifications)
// out of HTTP request bodies, so that a judge can rule on the method and
// the tool.
//
// Lift aims at one reading of a body for every server that might receive
// it. When it returns calls, they are all the calls in the body, each
// strictly valid JSON-RPC 2.0. When it returns none, whatever the content
// type says, the body read as JSON (in UTF-8, UTF-16 or UTF-32) has no
// top-level object with a "jsonrpc" or "method" key in any letter case;
// text that starts with a brace but is not JSON passes only if it does not
// mention jsonrpc. Everything in between is an error whose text is a fixed
// phrase fit for a deny reason. In particular:
//   - the content type is not trusted: any body that starts with { or [
//     is inspected, and a body declared as JSON must be JSON;
//   - duplicate keys anywhere in a JSON body are refused;
//   - keys are case-sensitive: "Method" or "JSONRPC" is refused, not
//     ignored, as is "Name" in tools/call params;
//   - a batch is all requests or refused, and holds at most MaxBatch calls;
//   - methods and tool names are kept verbatim, never case-folded.
//
// Lift must see the body as the server will: the caller decodes any
// Content-Encoding first.
package mcp

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"mime"
	"slices"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/impyard/impyard/lib/strictjson"
)

// MaxBatch bounds the calls in one batch, and MaxName the bytes of a
// method or tool name, so that judging a body stays cheap (a name is
// matched against globs).
const (
	MaxBatch = 1000
	MaxName  = 256
)

// Call is one lifted JSON-RPC request or notification.
type Call struct {
	Method string `json:"method"`         // verbatim
	Tool   string `json:"tool,omitempty"` // params.name, only for tools/call
	// Arguments is params.arguments of a tools/call as sent, for a judge
	// to read; never recorded (arguments may hold what records must not).
	Arguments json.RawMessage `json:"-"`
}

// Lifted is what a body holds. Calls == nil: the body is not JSON-RPC.
type Lifted struct {
	Calls []Call
	Batch bool // the body was an array; Calls then holds every element
}

var (
	errNotJSON    = errors.New("body is not valid JSON")
	errEncoding   = errors.New("JSON body is not plain UTF-8 (byte-order mark or UTF-16/32)")
	errUTF8       = errors.New("JSON-RPC body is not valid UTF-8")
	errEmptyBatch = errors.New("JSON-RPC batch is empty")
	errBatchSize  = errors.New("JSON-RPC batch has more than " + strconv.Itoa(MaxBatch) + " calls")
	errNotRequest = errors.New("not a JSON-RPC request object")
	errResponse   = errors.New("JSON-RPC response sent by the client")
	errVersion    = errors.New(`JSON-RPC "jsonrpc" must be "2.0"`)
	errMethod     = errors.New(`JSON-RPC "method" must be a non-empty string of at most ` + strconv.Itoa(MaxName) + ` bytes without control characters`)
	errID         = errors.New(`JSON-RPC "id" must be a string, number or null`)
	errParams     = errors.New(`JSON-RPC "params" must be an object or array`)
	errToolParams = errors.New(`tools/call "params" must be an object`)
	errToolName   = errors.New(`tools/call "params.name" must be a non-empty string of at most ` + strconv.Itoa(MaxName) + ` bytes without control characters`)
)

// Lift reports the JSON-RPC calls in body, sent with the given
// Content-Type header value.
func Lift(contentType string, body []byte) (Lifted, error) {
	text := bytes.TrimLeft(body, " \t\r\n")
	if len(text) == 0 {
		return Lifted{}, nil
	}
	if disguisedJSON(body) {
		return Lifted{}, errEncoding
	}
	declared := IsJSONType(contentType)
	if text[0] != '{' && text[0] != '[' {
		if declared && !json.Valid(body) {
			return Lifted{}, errNotJSON
		}
		return Lifted{}, nil
	}
	if err := strictjson.Valid(body); err != nil {
		if _, ok := errors.AsType[*strictjson.Error](err); ok {
			return Lifted{}, fmt.Errorf("JSON body refused: %w", err)
		}
		// Text that merely starts with a brace is not JSON-RPC, unless it
		// says so: a lenient server might still read it as a request.
		if declared || containsFold(body, "jsonrpc") {
			return Lifted{}, errNotJSON
		}
		return Lifted{}, nil
	}

	if text[0] == '{' {
		var obj map[string]json.RawMessage
		if err := json.Unmarshal(text, &obj); err != nil {
			return Lifted{}, errNotJSON
		}
		if !looksLikeRPC(obj) {
			return Lifted{}, nil
		}
		if !utf8.Valid(body) {
			return Lifted{}, errUTF8
		}
		call, err := request(obj)
		if err != nil {
			return Lifted{}, err
		}
		return Lifted{Calls: []Call{call}}, nil
	}

	var elems []json.RawMessage
	if err := json.Unmarshal(text, &elems); err != nil {
		return Lifted{}, errNotJSON
	}
	if len(elems) == 0 {
		return Lifted{}, errEmptyBatch
	}
	objs := make([]map[string]json.RawMessage, len(elems))
	rpc := false
	for i, e := range elems {
		if e[0] == '{' && json.Unmarshal(e, &objs[i]) == nil && looksLikeRPC(objs[i]) {
			rpc = true
		}
	}
	if !rpc {
		return Lifted{}, nil
	}
	if len(elems) > MaxBatch {
		return Lifted{}, errBatchSize
	}
	if !utf8.Valid(body) {
		return Lifted{}, errUTF8
	}
	calls := make([]Call, len(elems))
	for i, obj := range objs {
		var err error
		if obj == nil || !looksLikeRPC(obj) {
			err = errNotRequest
		} else {
			calls[i], err = request(obj)
		}
		if err != nil {
			return Lifted{}, fmt.Errorf("JSON-RPC batch element %d: %w", i, err)
		}
	}
	return Lifted{Calls: calls, Batch: true}, nil
}

var members = []string{"jsonrpc", "method", "params", "id", "result", "error"}

// looksLikeRPC is deliberately loose: an object that some server could
// read as a request must then pass the strict checks in request.
func looksLikeRPC(obj map[string]json.RawMessage) bool {
	for k := range obj {
		if strings.EqualFold(k, "jsonrpc") || strings.EqualFold(k, "method") {
			return true
		}
	}
	return false
}

func request(obj map[string]json.RawMessage) (Call, error) {
	for _, k := range slices.Sorted(maps.Keys(obj)) {
		if slices.Contains(members, k) {
			continue
		}
		for _, m := range members {
			if strings.EqualFold(k, m) {
				return Call{}, fmt.Errorf("JSON-RPC key %s must be spelled %q", quote(k), m)
			}
		}
		return Call{}, fmt.Errorf("JSON-RPC request has unknown key %s", quote(k))
	}
	if _, ok := obj["result"]; ok {
		return Call{}, errResponse
	}
	if _, ok := obj["error"]; ok {
		return Call{}, errResponse
	}
	var version string
	if json.Unmarshal(obj["jsonrpc"], &version) != nil || version != "2.0" {
		return Call{}, errVersion
	}
	method, ok := plainString(obj["method"])
	if !ok {
		return Call{}, errMethod
	}
	if id, ok := obj["id"]; ok && !strings.ContainsRune(`"-0123456789n`, rune(id[0])) {
		return Call{}, errID
	}
	params, hasParams := obj["params"]
	if hasParams && params[0] != '{' && params[0] != '[' {
		return Call{}, errParams
	}
	call := Call{Method: method}
	if method != "tools/call" {
		return call, nil
	}
	var p map[string]json.RawMessage
	if !hasParams || params[0] != '{' || json.Unmarshal(params, &p) != nil {
		return Call{}, errToolParams
	}
	for k := range p {
		if k != "name" && strings.EqualFold(k, "name") {
			return Call{}, fmt.Errorf("tools/call params key %s must be spelled %q", quote(k), "name")
		}
	}
	if call.Tool, ok = plainString(p["name"]); !ok {
		return Call{}, errToolName
	}
	call.Arguments = p["arguments"]
	return call, nil
}

// plainString decodes a name: a non-empty JSON string of at most MaxName
// bytes, free of control characters and replacement characters, which
// parsers treat differently (a C server stops at NUL; a lenient one drops
// invalid bytes).
func plainString(raw json.RawMessage) (string, bool) {
	var s string
	if len(raw) == 0 || raw[0] != '"' || json.Unmarshal(raw, &s) != nil || s == "" || len(s) > MaxName {
		return "", false
	}
	for _, r := range s {
		if unicode.IsControl(r) || r == utf8.RuneError {
			return "", false
		}
	}
	return s, true
}

func quote(s string) string {
	if len(s) > 64 {
		return strconv.Quote(s[:64]) + "..."
	}
	return strconv.Quote(s)
}

// IsJSONType reports a Content-Type that declares JSON: application/json,
// text/json or application/*+json, parameters and letter case aside.
func IsJSONType(contentType string) bool {
	mt, _, err := mime.ParseMediaType(contentType)
	if err != nil {
		mt, _, _ = strings.Cut(contentType, ";")
		mt = strings.ToLower(strings.TrimSpace(mt))
	}
	return mt == "application/json" || mt == "text/json" ||
		strings.HasPrefix(mt, "application/") && strings.HasSuffix(mt, "+json")
}

func containsFold(b []byte, s string) bool {
	for i := 0; i+len(s) <= len(b); i++ {
		if bytes.EqualFold(b[i:i+len(s)], []byte(s)) {
			return true
		}
	}
	return false
}

// disguisedJSON reports a JSON object or array behind a UTF-8 byte-order
// mark or in UTF-16/32. encoding/json refuses these, but some servers
// (Python's json.loads on bytes, for one) detect the encoding and parse
// them, so they must not pass as "not JSON".
func disguisedJSON(b []byte) bool {
	if rest, ok := bytes.CutPrefix(b, []byte("\xef\xbb\xbf")); ok {
		rest = bytes.TrimLeft(rest, " \t\r\n")
		return len(rest) > 0 && (rest[0] == '{' || rest[0] == '[')
	}
	for _, size := range []int{2, 4} {
		for _, big := range []bool{true, false} {
			u, n := units(b, size, big)
			if n == 2 && (u[0] == '{' && (u[1] == '"' || u[1] == '}') ||
				u[0] == '[' && strings.ContainsRune(`"{[]-0123456789tfn`, u[1])) {
				return true
			}
		}
	}
	return false
}

// units decodes up to the first two code units of b other than a leading
// byte-order mark and JSON whitespace.
func units(b []byte, size int, big bool) (out [2]rune, n int) {
	for i := 0; i+size <= len(b) && n < 2; i += size {
		var u rune
		for j := range size {
			if big {
				u = u<<8 | rune(b[i+j])
			} else {
				u |= rune(b[i+j]) << (8 * j)
			}
		}
		if i == 0 && u == 0xfeff || u == ' ' || u == '\t' || u == '\r' || u == '\n' {
			continue
		}
		out[n] = u
		n++
	}
	return out, n
}
