package strictjson

import (
	"encoding/json"
	"errors"
	"reflect"
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

// Escaped quotes and backslashes inside string values do not end the
// string early.
func TestEscapedStringValues(t *testing.T) {
	type doc struct {
		Name string `json:"name"`
		N    int    `json:"n"`
	}
	for _, c := range []struct{ in, want string }{
		{`{"name":"say \"hi\"","n":1}`, `say "hi"`},
		{`{"name":"ends in \\","n":1}`, `ends in \`},
		{`{"name":"\\\"","n":1}`, `\"`},
		{`{"name":"\\\\\\","n":1}`, `\\\`},
	} {
		var d doc
		if err := Unmarshal([]byte(c.in), &d); err != nil || d.Name != c.want || d.N != 1 {
			t.Errorf("%s: %+v %v, want %q", c.in, d, err, c.want)
		}
	}
	// A key hidden inside an escaped string is not a key.
	var d doc
	if err := Unmarshal([]byte(`{"name":"\",\"extra\":\"x","n":2}`), &d); err != nil || d.Name != `","extra":"x` {
		t.Errorf("quote-escaped key: %+v %v", d, err)
	}
}

// Among embedded fields of one name the shallowest wins, then a tagged
// one over an untagged one, as encoding/json decides. The candidates here
// have different shapes, so checking the input against the wrong one
// refuses its inner key.
func TestEmbeddedDominantField(t *testing.T) {
	type WantA struct {
		A string `json:"a"`
	}
	type WantB struct {
		B string `json:"b"`
	}
	type Deep struct{ ID WantB }
	type Mid struct {
		Deep
		ID WantA `json:"ID"`
	}
	type Shallow struct {
		Mid
		ID WantA
	}
	type DeepFirst struct {
		Deep
		Tagged struct {
			ID WantB `json:"ID"`
		}
		ID WantA
	}
	type Untagged struct{ ID WantB }
	type Tagged struct {
		ID WantA `json:"ID"`
	}
	type Tie struct {
		Untagged
		Tagged
	}
	type TieReversed struct {
		Tagged
		Untagged
	}
	in := []byte(`{"ID":{"a":"x"}}`)
	for _, c := range []struct {
		name string
		v    any
	}{
		{"shallow over deeper", &Shallow{}},
		{"depth 1 over depth 2", &Mid{}},
		{"shallow over an earlier deeper one", &DeepFirst{}},
		{"tagged over untagged", &Tie{}},
		{"tagged over untagged, reversed", &TieReversed{}},
	} {
		if err := Unmarshal(in, c.v); err != nil {
			t.Errorf("%s: %v", c.name, err)
		}
		// encoding/json fills the same field.
		ref := reflect.New(reflect.TypeOf(c.v).Elem()).Interface()
		if err := json.Unmarshal(in, ref); err != nil || !reflect.DeepEqual(ref, c.v) {
			t.Errorf("%s: filled %+v, encoding/json fills %+v", c.name, c.v, ref)
		}
		if err := Unmarshal([]byte(`{"ID":{"b":"x"}}`), c.v); err == nil {
			t.Errorf("%s: the hidden field's key was taken", c.name)
		}
	}
}
