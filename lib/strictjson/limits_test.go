package strictjson

import (
	"errors"
	"fmt"
	"strings"
	"testing"
)

// A key is written in a path as .key when it is an identifier of 1 to 64
// bytes (a letter or underscore, then letters, digits or underscores), and
// as a quoted ["key"] otherwise. Each edge of each character range is
// tried from both sides.
func TestPathKeyForm(t *testing.T) {
	long := strings.Repeat("k", 64)
	for _, c := range []struct{ key, path string }{
		{"a", "$.a"},
		{"z", "$.z"},
		{"A", "$.A"},
		{"Z", "$.Z"},
		{"_", "$._"},
		{"a0", "$.a0"},
		{"a9", "$.a9"},
		{"Zz_09aA", "$.Zz_09aA"},
		{"`", "$[\"`\"]"}, // just below 'a'
		{"{", `$["{"]`},   // just above 'z'
		{"@", `$["@"]`},   // just below 'A'
		{"[", `$["["]`},   // just above 'Z'
		{"a/", `$["a/"]`}, // just below '0'
		{"a:", `$["a:"]`}, // just above '9'
		{"0", `$["0"]`},   // digits cannot lead
		{"9a", `$["9a"]`},
		{"", `$[""]`},
		{long, "$." + long},
		{long + "k", `$["` + long + `"...]`},
	} {
		in := fmt.Sprintf(`{"x":[{%q:{"d":1,"d":2}}]}`, c.key)
		err := Valid([]byte(in))
		var e *Error
		if !errors.As(err, &e) || e.Msg != `duplicate key "d"` || e.Path != "$.x[0]"+strings.TrimPrefix(c.path, "$") {
			t.Errorf("key %q: %v, want path $.x[0]%s", c.key, err, strings.TrimPrefix(c.path, "$"))
		}
	}
}

// A key named in a message is quoted whole up to 64 bytes and cut after.
func TestMessageKeyLength(t *testing.T) {
	k64 := strings.Repeat("k", 64)
	for _, c := range []struct{ key, want string }{
		{k64[:63], `"` + k64[:63] + `"`},
		{k64, `"` + k64 + `"`},
		{k64 + "k", `"` + k64 + `"...`},
	} {
		var v outer
		err := Unmarshal([]byte(`{"`+c.key+`":1}`), &v)
		if want := "unknown field " + c.want + " at $"; err == nil || err.Error() != want {
			t.Errorf("unknown key of %d bytes: %v, want %s", len(c.key), err, want)
		}
		err = Valid([]byte(`{"` + c.key + `":1,"` + c.key + `":2}`))
		if want := "duplicate key " + c.want + " at $"; err == nil || err.Error() != want {
			t.Errorf("duplicate key of %d bytes: %v, want %s", len(c.key), err, want)
		}
	}
}
