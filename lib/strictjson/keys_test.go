package strictjson

import (
	"errors"
	"testing"
)

// Keys are compared as the strings they decode to, so escapes and
// non-ASCII bytes cannot smuggle a second copy of a key past the check,
// and the error names where in the input the object is.
func TestEscapedKeys(t *testing.T) {
	type inner struct {
		Name string `json:"name"`
	}
	type doc struct {
		Rules []map[string]inner `json:"rules"`
	}
	for _, c := range []struct {
		in, path, msg string
	}{
		{`{"rules":[{"a":{"name":"x","n\u0061me":"y"}}]}`, `$.rules[0].a`, `duplicate key "name"`},
		{`{"rules":[{"a":{},"\u0061":{}}]}`, `$.rules[0]`, `duplicate key "a"`},
		{`{"rules":[{"é":{},"\u00e9":{}}]}`, `$.rules[0]`, `duplicate key "é"`},
		{`{"rules":[{"k\"ey":{"name":"x","nam\\e":"y"}}]}`, `$.rules[0]["k\"ey"]`, `unknown field "nam\\e"`},
		{`{"rules":[{"ü":{"Name":"x"}}]}`, `$.rules[0]["ü"]`, `unknown field "Name" (names are case-sensitive: did you mean "name"?)`},
	} {
		var d doc
		err := Unmarshal([]byte(c.in), &d)
		var e *Error
		if !errors.As(err, &e) || e.Path != c.path || e.Msg != c.msg {
			t.Errorf("%s: %v, want %q at %s", c.in, err, c.msg, c.path)
		}
	}
	// Escaped keys that are distinct are taken, decoded.
	var d doc
	if err := Unmarshal([]byte(`{"rules":[{"\u0061\"b":{"n\u0061me":"x"}}]}`), &d); err != nil || d.Rules[0]["a\"b"].Name != "x" {
		t.Errorf("escaped distinct keys: %+v %v", d, err)
	}
}
