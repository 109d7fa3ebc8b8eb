package mcp

import (
	"reflect"
	"strings"
	"testing"
)

// liftCase is one body and what Lift must make of it.
type liftCase struct {
	name  string
	ctype string
	body  string
	want  Lifted
	err   string
}

func runLift(t *testing.T, tests []liftCase) {
	t.Helper()
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := Lift(tt.ctype, []byte(tt.body))
			// The arguments are compared in TestLiftArguments; the
			// tables here are about what is lifted, not what rides along.
			for i := range got.Calls {
				got.Calls[i].Arguments = nil
			}
			gotErr := ""
			if err != nil {
				gotErr = err.Error()
			}
			if gotErr != tt.err {
				t.Errorf("error\n got: %s\nwant: %s", gotErr, tt.err)
			}
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("got %+v, want %+v", got, tt.want)
			}
		})
	}
}

const (
	notJSON  = "body is not valid JSON"
	encoding = "JSON body is not plain UTF-8 (byte-order mark or UTF-16/32)"
)

// A content type that mime.ParseMediaType refuses outright is still read
// for its media type, so a malformed parameter cannot hide that a body
// is declared as JSON.
func TestMalformedJSONContentType(t *testing.T) {
	runLift(t, []liftCase{
		{"duplicate parameter", "application/json; a=1; a=2", `hello`, Lifted{}, notJSON},
		{"duplicate parameter, upper case", " Application/JSON ; a=1; a=2", `hello`, Lifted{}, notJSON},
		{"text/json, duplicate parameter", "text/json; q=1; q=2", `{`, Lifted{}, notJSON},
		{"+json, duplicate parameter", "application/vnd.api+json; a=1; a=2", `<xml/>`, Lifted{}, notJSON},
		{"text/plain, duplicate parameter", "text/plain; a=1; a=2", `hello`, Lifted{}, ""},
		{"duplicate parameter, JSON-RPC", "application/json; a=1; a=2", rpc("ping", ""), Lifted{Calls: []Call{{Method: "ping"}}}, ""},
	})
}

// Brace-led text that is not JSON is refused when it mentions jsonrpc in
// any letter case anywhere, up to its very last byte.
func TestBraceTextMentioningJSONRPC(t *testing.T) {
	runLift(t, []liftCase{
		{"at the end", "text/plain", `{jsonrpc`, Lifted{}, notJSON},
		{"at the end, upper case", "text/plain", `{ x: JSONRPC`, Lifted{}, notJSON},
		{"in the middle", "text/plain", `{JsonRpc: 2.0}`, Lifted{}, notJSON},
		{"one byte short", "text/plain", `{jsonrp`, Lifted{}, ""},
		{"split", "text/plain", `{json rpc}`, Lifted{}, ""},
	})
}

// A byte-order mark is refused only before an object or array; a mark
// alone, or before other text, is not JSON-RPC.
func TestByteOrderMark(t *testing.T) {
	const bom = "\xef\xbb\xbf"
	runLift(t, []liftCase{
		{"before an object", "text/plain", bom + rpc("ping", ""), Lifted{}, encoding},
		{"before a batch", "text/plain", bom + "[" + rpc("ping", "") + "]", Lifted{}, encoding},
		{"before spaces and a batch", "", bom + " \r\n\t[1]", Lifted{}, encoding},
		{"alone", "text/plain", bom, Lifted{}, ""},
		{"alone, declared JSON", jsonType, bom, Lifted{}, notJSON},
		{"before spaces only", "text/plain", bom + " \n", Lifted{}, ""},
		{"before text", "text/plain", bom + "hello", Lifted{}, ""},
		{"before a string", "text/plain", bom + `"x"`, Lifted{}, ""},
	})
}

// UTF-16 is recognised from its first two code units, the second of which
// may be the body's last: {} is the shortest disguised object.
func TestUTF16Shortest(t *testing.T) {
	runLift(t, []liftCase{
		{"{} little-endian", "text/plain", utf16Body("{}", false, false), Lifted{}, encoding},
		{"{} big-endian", "text/plain", utf16Body("{}", true, false), Lifted{}, encoding},
		{"[] little-endian", "text/plain", utf16Body("[]", false, false), Lifted{}, encoding},
		{`{" big-endian`, "text/plain", utf16Body(`{"`, true, false), Lifted{}, encoding},
		{"lone { little-endian", "text/plain", utf16Body("{", false, false), Lifted{}, ""},
		{"lone [ big-endian", "text/plain", utf16Body("[", true, false), Lifted{}, ""},
		{"{x little-endian", "text/plain", utf16Body("{x", false, false), Lifted{}, ""},
		{"[x big-endian", "text/plain", utf16Body("[x", true, false), Lifted{}, ""},
	})
}

// A method, like a tool name, may be MaxName bytes long and no longer.
func TestMethodLength(t *testing.T) {
	longest := strings.Repeat("m", MaxName)
	runLift(t, []liftCase{
		{"longest method", jsonType, rpc(longest, ""), Lifted{Calls: []Call{{Method: longest}}}, ""},
		{"method one byte too long", jsonType, rpc(longest+"m", ""), Lifted{}, `JSON-RPC "method" must be a non-empty string of at most 256 bytes without control characters`},
		{"longest multi-byte method", jsonType, rpc(strings.Repeat("é", MaxName/2), ""), Lifted{Calls: []Call{{Method: strings.Repeat("é", MaxName/2)}}}, ""},
		{"multi-byte method one byte too long", jsonType, rpc("m"+strings.Repeat("é", MaxName/2), ""), Lifted{}, `JSON-RPC "method" must be a non-empty string of at most 256 bytes without control characters`},
	})
}
