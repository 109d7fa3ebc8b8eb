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

// JSON whitespace (space, tab, CR, LF) may stand between any two tokens;
// the walk skips all of it and still finds every key.
func TestWhitespaceBetweenTokens(t *testing.T) {
	ws := " \t\r\n"
	spaced := func(tokens ...string) []byte {
		return []byte(ws + strings.Join(tokens, ws) + ws)
	}
	err := Valid(spaced(`{`, `"a"`, `:`, `[`, `1`, `,`, `{`, `"b"`, `:`, `1`, `,`, `"b"`, `:`, `2`, `}`, `]`, `}`))
	if err == nil || err.Error() != `duplicate key "b" at $.a[1]` {
		t.Errorf("spaced duplicate: %v", err)
	}
	var v outer
	in := spaced(`{`, `"schema"`, `:`, `"s"`, `,`, `"rules"`, `:`, `[`, `{`, `"name"`, `:`, `"n"`, `}`, `,`, `{`, `}`, `]`, `,`, `"Untagged"`, `:`, `7`, `}`)
	if err := Unmarshal(in, &v); err != nil || v.Schema != "s" || len(v.Rules) != 2 || v.Rules[0].Name != "n" || v.Untagged != 7 {
		t.Errorf("spaced document: %+v %v", v, err)
	}
	err = Unmarshal(spaced(`{`, `"rules"`, `:`, `[`, `{`, `}`, `,`, `{`, `"nmae"`, `:`, `1`, `}`, `]`, `}`), &v)
	if err == nil || err.Error() != `unknown field "nmae" at $.rules[1]` {
		t.Errorf("spaced unknown field: %v", err)
	}
}

// An empty array or object ends where its closing bracket does: what
// follows it is still walked, at the right index.
func TestEmptyContainersThenMore(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{`[[],{"a":1,"a":2}]`, `duplicate key "a" at $[1]`},
		{`[{},{"a":1,"a":2}]`, `duplicate key "a" at $[1]`},
		{`{"x":[],"y":{"a":1,"a":2}}`, `duplicate key "a" at $.y`},
		{`{"x":{},"y":{"a":1,"a":2}}`, `duplicate key "a" at $.y`},
		{`[[ ],[],{ },{"a":1,"a":2}]`, `duplicate key "a" at $[3]`},
	} {
		if err := Valid([]byte(c.in)); err == nil || err.Error() != c.want {
			t.Errorf("Valid(%s): %v, want %s", c.in, err, c.want)
		}
	}
}

type promoted struct {
	X int `json:"x"`
}

type level int

// An unexported embedded struct still promotes its exported fields; an
// unexported embedded non-struct is no field at all, as in encoding/json.
func TestUnexportedEmbedded(t *testing.T) {
	type T struct {
		promoted
		level
	}
	var v T
	if err := Unmarshal([]byte(`{"x":3}`), &v); err != nil || v.X != 3 {
		t.Errorf("promoted field: %+v %v", v, err)
	}
	err := Unmarshal([]byte(`{"level":1}`), &v)
	if err == nil || err.Error() != `unknown field "level" at $` || v.level != 0 {
		t.Errorf("unexported embedded int: %v, level %d", err, v.level)
	}
	if err := Unmarshal([]byte(`{"promoted":{}}`), &v); err == nil || err.Error() != `unknown field "promoted" at $` {
		t.Errorf("unexported embedded struct name: %v", err)
	}
}

func plainKeys(n int) []byte {
	var b strings.Builder
	b.WriteString("{")
	for i := range n {
		if i > 0 {
			b.WriteString(",")
		}
		fmt.Fprintf(&b, `"k%d":%d`, i, i)
	}
	b.WriteString("}")
	return []byte(b.String())
}

// Keys are checked for duplicates by a scan of the keys so far while an
// object has fewer than 16, without allocating for them; from the 16th
// key on, a set sized for twice that takes over and does not grow before
// 32 keys, so each further key costs the same.
func TestDuplicateCheckAllocations(t *testing.T) {
	allocs := func(n int) float64 {
		data := plainKeys(n)
		if err := Valid(data); err != nil {
			t.Fatalf("%d keys: %v", n, err)
		}
		return testing.AllocsPerRun(50, func() { Valid(data) })
	}
	one := allocs(1)
	for n := 2; n < 16; n++ {
		if a := allocs(n); a != one {
			t.Errorf("%d plain keys: %v allocations, one key takes %v", n, a, one)
		}
	}
	if allocs(16) == one {
		t.Errorf("16 keys allocate no set")
	}
	step := allocs(17) - allocs(16)
	for n := 17; n < 32; n++ {
		if d := allocs(n+1) - allocs(n); d != step {
			t.Errorf("key %d costs %v allocations, key 17 costs %v: the set grew", n+1, d, step)
		}
	}
}

// Nesting is bounded by encoding/json's limit of 10000: at the limit the
// walk still reaches the innermost object, one past it is refused.
func TestNestingLimit(t *testing.T) {
	const max = 10000
	nest := func(depth int, inner string) []byte {
		return []byte(strings.Repeat(`{"a":`, depth-1) + inner + strings.Repeat("}", depth-1))
	}
	err := Valid(nest(max, `{"d":1,"d":2}`))
	if want := `duplicate key "d" at $` + strings.Repeat(".a", max-1); err == nil || err.Error() != want {
		t.Errorf("duplicate at depth %d: %.80v", max, err)
	}
	if err := Valid(nest(max, `{"d":1}`)); err != nil {
		t.Errorf("depth %d: %v", max, err)
	}
	err = Valid(nest(max+1, `{"d":1}`))
	if want := fmt.Sprintf("invalid JSON at byte %d: invalid character '{' exceeded max depth", 5*max+1); err == nil || err.Error() != want {
		t.Errorf("depth %d: %v, want %s", max+1, err, want)
	}
}
