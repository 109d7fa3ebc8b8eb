package mcp

import (
	"encoding/binary"
	"encoding/json"
	"slices"
	"strings"
	"testing"
	"unicode/utf16"
)

const jsonType = "application/json"

func rpc(method, params string) string {
	if params == "" {
		return `{"jsonrpc":"2.0","id":1,"method":"` + method + `"}`
	}
	return `{"jsonrpc":"2.0","id":1,"method":"` + method + `","params":` + params + `}`
}

func batch(n int, elem string) string {
	return "[" + strings.TrimSuffix(strings.Repeat(elem+",", n), ",") + "]"
}

func utf16Body(s string, big, bom bool) string {
	u := utf16.Encode([]rune(s))
	if bom {
		u = append([]uint16{0xfeff}, u...)
	}
	b := make([]byte, 0, 2*len(u))
	for _, c := range u {
		if big {
			b = binary.BigEndian.AppendUint16(b, c)
		} else {
			b = binary.LittleEndian.AppendUint16(b, c)
		}
	}
	return string(b)
}

func utf32LE(s string) string {
	var b []byte
	for _, r := range s {
		b = binary.LittleEndian.AppendUint32(b, uint32(r))
	}
	return string(b)
}

func TestLift(t *testing.T) {
	getIssue := rpc("tools/call", `{"name":"get_issue","arguments":{"n":1}}`)
	runLift(t, []liftCase{
		// Plain requests.
		{"tools/call", jsonType, getIssue, Lifted{Calls: []Call{{Method: "tools/call", Tool: "get_issue"}}}, ""},
		{"notification without id", jsonType, `{"jsonrpc":"2.0","method":"notifications/initialized"}`, Lifted{Calls: []Call{{Method: "notifications/initialized"}}}, ""},
		{"initialize", jsonType, rpc("initialize", `{"protocolVersion":"2025-06-18","capabilities":{}}`), Lifted{Calls: []Call{{Method: "initialize"}}}, ""},
		{"string id", jsonType, `{"jsonrpc":"2.0","id":"a","method":"tools/list","params":{}}`, Lifted{Calls: []Call{{Method: "tools/list"}}}, ""},
		{"null id", jsonType, `{"jsonrpc":"2.0","id":null,"method":"ping"}`, Lifted{Calls: []Call{{Method: "ping"}}}, ""},
		{"array params", jsonType, rpc("sum", `[1,2]`), Lifted{Calls: []Call{{Method: "sum"}}}, ""},
		{"content type with parameters", "Application/JSON; charset=utf-8", getIssue, Lifted{Calls: []Call{{Method: "tools/call", Tool: "get_issue"}}}, ""},
		{"leading whitespace", jsonType, "\r\n\t " + getIssue, Lifted{Calls: []Call{{Method: "tools/call", Tool: "get_issue"}}}, ""},
		{"verbatim method, no case folding", jsonType, rpc("Tools/Call", `{"name":"delete_repo"}`), Lifted{Calls: []Call{{Method: "Tools/Call"}}}, ""},

		// Not JSON-RPC.
		{"empty body", jsonType, ``, Lifted{}, ""},
		{"whitespace body", jsonType, " \n", Lifted{}, ""},
		{"model API body", jsonType, `{"model":"gpt-5","input":[{"role":"user","content":"{\"jsonrpc\":\"2.0\",\"method\":\"x\"}"}]}`, Lifted{}, ""},
		{"JSON scalar", jsonType, `"hello"`, Lifted{}, ""},
		{"array of numbers", jsonType, `[1,2,3]`, Lifted{}, ""},
		{"array of plain objects", jsonType, `[{"a":1},{"b":2}]`, Lifted{}, ""},
		{"form body", "application/x-www-form-urlencoded", `a=1&method=tools/call`, Lifted{}, ""},
		{"text starting with a brace", "text/plain", `{not json}`, Lifted{}, ""},
		{"ndjson without JSON-RPC", "application/x-ndjson", "{\"a\":1}\n{\"b\":2}\n", Lifted{}, ""},
		{"binary", "application/octet-stream", "\x89PNG\r\n\x1a\n", Lifted{}, ""},
		{"invalid UTF-8 outside JSON-RPC", jsonType, "{\"text\":\"\xff\"}", Lifted{}, ""},

		// The content type does not decide.
		{"text/plain JSON-RPC", "text/plain", getIssue, Lifted{Calls: []Call{{Method: "tools/call", Tool: "get_issue"}}}, ""},
		{"no content type", "", getIssue, Lifted{Calls: []Call{{Method: "tools/call", Tool: "get_issue"}}}, ""},
		{"unparseable content type", "%%%", getIssue, Lifted{Calls: []Call{{Method: "tools/call", Tool: "get_issue"}}}, ""},
		{"ndjson hiding JSON-RPC", "application/x-ndjson", getIssue + "\n" + getIssue, Lifted{}, "body is not valid JSON"},
		{"text/plain broken JSON-RPC", "text/plain", `{"jsonrpc":"2.0","method":"tools/call",}`, Lifted{}, "body is not valid JSON"},
		{"UTF-8 byte-order mark", "text/plain", "\xef\xbb\xbf" + getIssue, Lifted{}, "JSON body is not plain UTF-8 (byte-order mark or UTF-16/32)"},
		{"UTF-16LE", "text/plain", utf16Body(getIssue, false, false), Lifted{}, "JSON body is not plain UTF-8 (byte-order mark or UTF-16/32)"},
		{"UTF-16BE with BOM", "", utf16Body(" "+getIssue, true, true), Lifted{}, "JSON body is not plain UTF-8 (byte-order mark or UTF-16/32)"},
		{"UTF-32LE", jsonType, utf32LE("[" + getIssue + "]"), Lifted{}, "JSON body is not plain UTF-8 (byte-order mark or UTF-16/32)"},

		// Declared JSON must be JSON.
		{"not JSON", jsonType, `hello`, Lifted{}, "body is not valid JSON"},
		{"not JSON, +json type", "application/vnd.api+json", `<xml/>`, Lifted{}, "body is not valid JSON"},
		{"not JSON, text/json", "text/json", `{`, Lifted{}, "body is not valid JSON"},
		{"truncated", jsonType, getIssue[:30], Lifted{}, "body is not valid JSON"},
		{"trailing data", jsonType, getIssue + "x", Lifted{}, "body is not valid JSON"},

		// Duplicate keys.
		{"duplicate tool name", "text/plain", rpc("tools/call", `{"name":"get_issue","name":"delete_repo"}`), Lifted{}, `JSON body refused: duplicate key "name" at $.params`},
		{"duplicate spelled with an escape", jsonType, rpc("tools/call", `{"name":"get_issue","n\u0061me":"delete_repo"}`), Lifted{}, `JSON body refused: duplicate key "name" at $.params`},
		{"duplicate method", jsonType, `{"jsonrpc":"2.0","method":"tools/list","method":"tools/call"}`, Lifted{}, `JSON body refused: duplicate key "method" at $`},
		{"nested duplicate", jsonType, rpc("tools/call", `{"name":"x","arguments":{"a":[{"b":1,"b":2}]}}`), Lifted{}, `JSON body refused: duplicate key "b" at $.params.arguments.a[0]`},
		{"duplicate in a non-RPC body", jsonType, `{"model":"a","model":"b"}`, Lifted{}, `JSON body refused: duplicate key "model" at $`},

		// Odd-case keys are errors, not "not JSON-RPC".
		{"Method", jsonType, `{"jsonrpc":"2.0","Method":"tools/call"}`, Lifted{}, `JSON-RPC key "Method" must be spelled "method"`},
		{"METHOD alone", jsonType, `{"METHOD":"tools/call","params":{"name":"x"}}`, Lifted{}, `JSON-RPC key "METHOD" must be spelled "method"`},
		{"Jsonrpc", jsonType, `{"Jsonrpc":"2.0","method":"ping"}`, Lifted{}, `JSON-RPC key "Jsonrpc" must be spelled "jsonrpc"`},
		{"Params", jsonType, `{"jsonrpc":"2.0","method":"tools/call","Params":{"name":"x"}}`, Lifted{}, `JSON-RPC key "Params" must be spelled "params"`},
		{"long s folds to s", jsonType, "{\"j\u017fonrpc\":\"2.0\",\"method\":\"ping\"}", Lifted{}, "JSON-RPC key \"j\u017fonrpc\" must be spelled \"jsonrpc\""},
		{"Name beside name", jsonType, rpc("tools/call", `{"name":"get_issue","Name":"delete_repo"}`), Lifted{}, `tools/call params key "Name" must be spelled "name"`},
		{"NAME alone", jsonType, rpc("tools/call", `{"NAME":"delete_repo"}`), Lifted{}, `tools/call params key "NAME" must be spelled "name"`},
		{"unknown member", jsonType, `{"jsonrpc":"2.0","method":"ping","tool":"x"}`, Lifted{}, `JSON-RPC request has unknown key "tool"`},

		// Strict JSON-RPC 2.0.
		{"version 1.0", jsonType, `{"jsonrpc":"1.0","method":"ping"}`, Lifted{}, `JSON-RPC "jsonrpc" must be "2.0"`},
		{"numeric version", jsonType, `{"jsonrpc":2.0,"method":"ping"}`, Lifted{}, `JSON-RPC "jsonrpc" must be "2.0"`},
		{"missing version", jsonType, `{"method":"ping"}`, Lifted{}, `JSON-RPC "jsonrpc" must be "2.0"`},
		{"missing method", jsonType, `{"jsonrpc":"2.0","id":1}`, Lifted{}, `JSON-RPC "method" must be a non-empty string of at most 256 bytes without control characters`},
		{"empty method", jsonType, rpc("", ""), Lifted{}, `JSON-RPC "method" must be a non-empty string of at most 256 bytes without control characters`},
		{"numeric method", jsonType, `{"jsonrpc":"2.0","method":7}`, Lifted{}, `JSON-RPC "method" must be a non-empty string of at most 256 bytes without control characters`},
		{"NUL in method", jsonType, rpc(`tools/call\u0000`, `{"name":"x"}`), Lifted{}, `JSON-RPC "method" must be a non-empty string of at most 256 bytes without control characters`},
		{"object id", jsonType, `{"jsonrpc":"2.0","id":{},"method":"ping"}`, Lifted{}, `JSON-RPC "id" must be a string, number or null`},
		{"boolean id", jsonType, `{"jsonrpc":"2.0","id":true,"method":"ping"}`, Lifted{}, `JSON-RPC "id" must be a string, number or null`},
		{"string params", jsonType, rpc("ping", `"x"`), Lifted{}, `JSON-RPC "params" must be an object or array`},
		{"null params", jsonType, rpc("ping", `null`), Lifted{}, `JSON-RPC "params" must be an object or array`},
		{"tools/call without params", jsonType, rpc("tools/call", ""), Lifted{}, `tools/call "params" must be an object`},
		{"tools/call with array params", jsonType, rpc("tools/call", `["get_issue"]`), Lifted{}, `tools/call "params" must be an object`},
		{"tools/call without name", jsonType, rpc("tools/call", `{"arguments":{}}`), Lifted{}, `tools/call "params.name" must be a non-empty string of at most 256 bytes without control characters`},
		{"tools/call empty name", jsonType, rpc("tools/call", `{"name":""}`), Lifted{}, `tools/call "params.name" must be a non-empty string of at most 256 bytes without control characters`},
		{"tools/call numeric name", jsonType, rpc("tools/call", `{"name":1}`), Lifted{}, `tools/call "params.name" must be a non-empty string of at most 256 bytes without control characters`},
		{"tools/call long name", jsonType, rpc("tools/call", `{"name":"`+strings.Repeat("a", 257)+`"}`), Lifted{}, `tools/call "params.name" must be a non-empty string of at most 256 bytes without control characters`},
		{"tools/call longest name", jsonType, rpc("tools/call", `{"name":"`+strings.Repeat("a", 256)+`"}`), Lifted{Calls: []Call{{Method: "tools/call", Tool: strings.Repeat("a", 256)}}}, ""},
		{"tools/call NUL in name", jsonType, rpc("tools/call", `{"name":"get_issue\u0000delete"}`), Lifted{}, `tools/call "params.name" must be a non-empty string of at most 256 bytes without control characters`},
		{"response", jsonType, `{"jsonrpc":"2.0","id":1,"result":{}}`, Lifted{}, "JSON-RPC response sent by the client"},
		{"error response", jsonType, `{"jsonrpc":"2.0","id":1,"error":{"code":1,"message":"x"}}`, Lifted{}, "JSON-RPC response sent by the client"},
		{"invalid UTF-8", jsonType, rpc("tools/call", "{\"name\":\"get_issue\",\"arguments\":{\"a\":\"\xff\"}}"), Lifted{}, "JSON-RPC body is not valid UTF-8"},

		// Batches.
		{"batch", jsonType, "[" + rpc("tools/list", "") + "," + getIssue + "]", Lifted{Calls: []Call{{Method: "tools/list"}, {Method: "tools/call", Tool: "get_issue"}}, Batch: true}, ""},
		{"batch of one", jsonType, "[" + getIssue + "]", Lifted{Calls: []Call{{Method: "tools/call", Tool: "get_issue"}}, Batch: true}, ""},
		{"batch hiding a call", "text/plain", "[" + rpc("initialize", "{}") + "," + rpc("tools/call", `{"name":"create_pull_request"}`) + "]", Lifted{Calls: []Call{{Method: "initialize"}, {Method: "tools/call", Tool: "create_pull_request"}}, Batch: true}, ""},
		{"batch of 1000", jsonType, batch(1000, getIssue), Lifted{Calls: slices.Repeat([]Call{{Method: "tools/call", Tool: "get_issue"}}, 1000), Batch: true}, ""},
		{"batch of 1001", jsonType, batch(1001, getIssue), Lifted{}, "JSON-RPC batch has more than 1000 calls"},
		{"empty batch", jsonType, `[]`, Lifted{}, "JSON-RPC batch is empty"},
		{"empty batch with spaces", "text/plain", ` [ ] `, Lifted{}, "JSON-RPC batch is empty"},
		{"batch mixing in a plain object", jsonType, "[" + getIssue + `,{"a":1}]`, Lifted{}, "JSON-RPC batch element 1: not a JSON-RPC request object"},
		{"batch mixing in a number", jsonType, "[1," + getIssue + `]`, Lifted{}, "JSON-RPC batch element 0: not a JSON-RPC request object"},
		{"batch with a nested batch", jsonType, "[" + getIssue + ",[" + getIssue + "]]", Lifted{}, "JSON-RPC batch element 1: not a JSON-RPC request object"},
		{"batch element with odd case", jsonType, "[" + getIssue + `,{"jsonrpc":"2.0","Method":"tools/call"}]`, Lifted{}, `JSON-RPC batch element 1: JSON-RPC key "Method" must be spelled "method"`},
		{"batch with a response", jsonType, "[" + getIssue + `,{"jsonrpc":"2.0","id":1,"result":{}}]`, Lifted{}, "JSON-RPC batch element 1: JSON-RPC response sent by the client"},
		{"batch with duplicate name", jsonType, "[" + getIssue + "," + rpc("tools/call", `{"name":"a","name":"b"}`) + "]", Lifted{}, `JSON body refused: duplicate key "name" at $[1].params`},
	})
}

func FuzzLift(f *testing.F) {
	for _, s := range []string{
		rpc("tools/call", `{"name":"get_issue"}`),
		rpc("tools/call", `{"name":"a","Name":"b"}`),
		`{"jsonrpc":"2.0","Method":"tools/call"}`,
		"[" + rpc("initialize", "{}") + "," + rpc("tools/call", `{"name":"x"}`) + "]",
		`[]`,
		`{"model":"m"}`,
		"\xef\xbb\xbf{}",
	} {
		f.Add(jsonType, []byte(s))
		f.Add("text/plain", []byte(s))
	}
	f.Fuzz(func(t *testing.T, ctype string, body []byte) {
		got, err := Lift(ctype, body)
		if err != nil {
			if got.Calls != nil {
				t.Fatalf("error %v with calls %v", err, got.Calls)
			}
			return
		}
		if got.Calls == nil {
			// Nothing that encoding/json (case-insensitive) would read as
			// a request may pass as "not JSON-RPC".
			var loose struct{ Jsonrpc, Method any }
			if json.Unmarshal(body, &loose) == nil && (loose.Jsonrpc != nil || loose.Method != nil) {
				t.Fatalf("%q passed as not JSON-RPC", body)
			}
			var elems []struct{ Jsonrpc, Method any }
			if json.Unmarshal(body, &elems) == nil {
				for _, e := range elems {
					if e.Jsonrpc != nil || e.Method != nil {
						t.Fatalf("%q passed as not JSON-RPC", body)
					}
				}
			}
			return
		}
		if len(got.Calls) == 0 || len(got.Calls) > MaxBatch || !got.Batch && len(got.Calls) != 1 {
			t.Fatalf("bad call count %d (batch %v)", len(got.Calls), got.Batch)
		}
		// What encoding/json reads, case-insensitively, must be what Lift
		// reports.
		type loose struct {
			Method string
			Params struct{ Name string }
		}
		var reads []loose
		if got.Batch {
			if err := json.Unmarshal(body, &reads); err != nil {
				t.Fatalf("Lift accepted a batch encoding/json refuses: %v", err)
			}
		} else {
			var one loose
			if err := json.Unmarshal(body, &one); err != nil {
				t.Fatalf("Lift accepted a request encoding/json refuses: %v", err)
			}
			reads = []loose{one}
		}
		for i, c := range got.Calls {
			if c.Method == "" || c.Method != reads[i].Method {
				t.Fatalf("call %d: Lift says method %q, encoding/json reads %q", i, c.Method, reads[i].Method)
			}
			if (c.Method == "tools/call") != (c.Tool != "") {
				t.Fatalf("call %d: tool %q for method %q", i, c.Tool, c.Method)
			}
			if c.Tool != "" && c.Tool != reads[i].Params.Name {
				t.Fatalf("call %d: Lift says tool %q, encoding/json reads %q", i, c.Tool, reads[i].Params.Name)
			}
		}
	})
}

// A tools/call keeps its params.arguments as sent, for the judge's
// argument rules; other methods carry none, and records never see them.
func TestLiftArguments(t *testing.T) {
	body := "[" + rpc("tools/call", `{"name":"create_issue","arguments":{"repo":"ourco/app","labels":["bug"]}}`) + "," +
		rpc("tools/call", `{"name":"list_issues"}`) + "," + rpc("initialize", `{"arguments":{"x":1}}`) + "]"
	got, err := Lift(jsonType, []byte(body))
	if err != nil {
		t.Fatal(err)
	}
	want := []string{`{"repo":"ourco/app","labels":["bug"]}`, "", ""}
	for i, c := range got.Calls {
		if string(c.Arguments) != want[i] {
			t.Errorf("call %d arguments %q, want %q", i, c.Arguments, want[i])
		}
	}
	rec, err := json.Marshal(got.Calls[0])
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(rec), "ourco") {
		t.Errorf("a call marshals its arguments: %s", rec)
	}
}
