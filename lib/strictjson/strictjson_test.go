package strictjson

import (
	"encoding/json"
	"errors"
	"reflect"
	"strings"
	"testing"
)

type Embedded struct {
	Emb string `json:"emb"`
}

type inner struct {
	Name string `json:"name"`
	Kind string `json:"kind,omitempty"`
	Skip string `json:"-"`
	//lint:ignore SA5008 the "-," tag names a field "-", which strictjson must honour like encoding/json
	Dash string `json:"-,"`
}

type outer struct {
	Embedded
	Schema   string           `json:"schema"`
	Rules    []inner          `json:"rules"`
	ByName   map[string]inner `json:"byName"`
	Ptr      *inner           `json:"ptr"`
	Raw      json.RawMessage  `json:"raw"`
	Any      any              `json:"any"`
	Untagged int
	//lint:ignore U1000 an unexported field must stay unknown to strictjson
	private int
}

func TestUnmarshal(t *testing.T) {
	tests := []struct {
		name string
		in   string
		want string // "" = accepted; otherwise the exact error text
	}{
		{"full document", `{"emb":"e","schema":"s","rules":[{"name":"a","kind":"k","-":"d"}],"byName":{"x":{"name":"b"}},"ptr":{"name":"c"},"raw":{"Any":1,"any":[1,{"b":2e999}]},"any":{"Z":1},"Untagged":3}`, ""},
		{"surrounding whitespace", " \n\t{}\r\n ", ""},
		{"null fields", `{"ptr":null,"rules":null,"raw":null}`, ""},
		{"empty", ``, `empty input at $`},
		{"only whitespace", " \n\t ", `empty input at $`},
		{"truncated", `{"schema":"s"`, `invalid JSON at byte 13: unexpected end of JSON input`},
		{"trailing data", `{} {}`, `invalid JSON at byte 4: invalid character '{' after top-level value`},
		{"trailing garbage", `{}x`, `invalid JSON at byte 3: invalid character 'x' after top-level value`},
		{"duplicate top-level key", `{"schema":"a","schema":"b"}`, `duplicate key "schema" at $`},
		{"duplicate spelled with an escape", `{"schema":"a","sch\u0065ma":"b"}`, `duplicate key "schema" at $`},
		{"duplicate in slice element", `{"rules":[{},{},{"name":"a","name":"b"}]}`, `duplicate key "name" at $.rules[2]`},
		{"duplicate in map of structs", `{"byName":{"x":{"name":"a","name":"b"}}}`, `duplicate key "name" at $.byName.x`},
		{"duplicate map key", `{"byName":{"x":{},"x":{}}}`, `duplicate key "x" at $.byName`},
		{"duplicate inside raw", `{"raw":{"a":{"b":1,"b":2}}}`, `duplicate key "b" at $.raw.a`},
		{"duplicate inside any", `{"any":[0,{"b":1,"b":2}]}`, `duplicate key "b" at $.any[1]`},
		{"duplicate among many keys", `{"any":{"a":1,"b":1,"c":1,"d":1,"e":1,"f":1,"g":1,"h":1,"i":1,"j":1,"k":1,"l":1,"m":1,"n":1,"o":1,"p":1,"q":1,"r":1,"a":2}}`, `duplicate key "a" at $.any`},
		{"odd key path", `{"any":{"a b":{"x":1,"x":2}}}`, `duplicate key "x" at $.any["a b"]`},
		{"case-insensitive field", `{"Schema":"s"}`, `unknown field "Schema" (names are case-sensitive: did you mean "schema"?) at $`},
		{"upper-case nested field", `{"rules":[{},{},{"NAME":"x"}]}`, `unknown field "NAME" (names are case-sensitive: did you mean "name"?) at $.rules[2]`},
		{"kelvin sign folds to k in encoding/json", `{"ptr":{"\u212aind":"x"}}`, "unknown field \"\u212aind\" (names are case-sensitive: did you mean \"kind\"?) at $.ptr"},
		{"unknown field", `{"verdict":"allow"}`, `unknown field "verdict" at $`},
		{"unknown field in map of structs", `{"byName":{"x":{"nmae":"a"}}}`, `unknown field "nmae" at $.byName.x`},
		{"dash-tagged field is unknown", `{"rules":[{"Skip":"x"}]}`, `unknown field "Skip" at $.rules[0]`},
		{"unexported field is unknown", `{"private":1}`, `unknown field "private" at $`},
		{"untagged field needs its Go name", `{"untagged":1}`, `unknown field "untagged" (names are case-sensitive: did you mean "Untagged"?) at $`},
		{"embedded struct name is not a field", `{"Embedded":{}}`, `unknown field "Embedded" at $`},
		{"long key is shortened", `{"` + strings.Repeat("k", 100) + `":1}`, `unknown field "` + strings.Repeat("k", 64) + `"... at $`},
		{"type mismatch", `{"rules":[{"name":5}]}`, `cannot use JSON number as string at $.rules.name`},
		{"wrong top-level type", `[]`, `cannot use JSON array as strictjson.outer at $`},
		{"huge number into any", `{"any":1e999}`, `cannot use JSON number 1e999 as float64 at $.any`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var v outer
			err := Unmarshal([]byte(tt.in), &v)
			got := ""
			if err != nil {
				got = err.Error()
			}
			if got != tt.want {
				t.Errorf("Unmarshal(%s)\n got: %s\nwant: %s", tt.in, got, tt.want)
			}
		})
	}
}

func TestUnmarshalValues(t *testing.T) {
	var got outer
	in := `{"emb":"e","rules":[{"name":"a","-":"d"}],"byName":{"x":{"name":"b"}},"raw":{"k":1},"Untagged":3}`
	if err := Unmarshal([]byte(in), &got); err != nil {
		t.Fatal(err)
	}
	want := outer{
		Embedded: Embedded{Emb: "e"},
		Rules:    []inner{{Name: "a", Dash: "d"}},
		ByName:   map[string]inner{"x": {Name: "b"}},
		Raw:      json.RawMessage(`{"k":1}`),
		Untagged: 3,
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("got %+v, want %+v", got, want)
	}
}

func TestUnmarshalNeedsPointer(t *testing.T) {
	var v outer
	for _, target := range []any{v, (*outer)(nil), nil} {
		if err := Unmarshal([]byte(`{}`), target); err == nil {
			t.Errorf("Unmarshal into %T: got nil error", target)
		}
	}
}

// Ambiguous embedded fields are hidden by encoding/json; strict decoding
// must not let their name through to a field encoding/json would then
// pick by case-folding.
func TestEmbeddedConflicts(t *testing.T) {
	type A struct{ Name string }
	type B struct{ Name string }
	type C struct {
		Alias string `json:"NAME"`
	}
	type T struct {
		A
		B
		C
	}
	tests := []struct {
		in   string
		want string
	}{
		// encoding/json hides the tied Name fields, then folds "Name"
		// onto "NAME".
		{`{"Name":"a"}`, `unknown field "Name" (names are case-sensitive: did you mean "NAME"?) at $`},
		{`{"NAME":"a"}`, ``},
	}
	for _, tt := range tests {
		var v T
		err := Unmarshal([]byte(tt.in), &v)
		got := ""
		if err != nil {
			got = err.Error()
		}
		if got != tt.want {
			t.Errorf("Unmarshal(%s)\n got: %s\nwant: %s", tt.in, got, tt.want)
		}
	}
}

func TestValid(t *testing.T) {
	tests := []struct {
		in   string
		want string
	}{
		{`{"a":1,"A":2}`, ""},
		{`[{"a":1},{"a":1}]`, ""},
		{`"just a string"`, ""},
		{`1e999`, ""},
		{`{"a":{"b":[{"c":1,"c":2}]}}`, `duplicate key "c" at $.a.b[0]`},
		{`{"\u00e9":1,"é":2}`, `duplicate key "é" at $`},
		{"{\"a\xff\":1,\"a\xfe\":2}", "duplicate key \"a\ufffd\" at $"},
		{`{"a":1,}`, `invalid JSON at byte 8: invalid character '}' looking for beginning of object key string`},
		{``, `empty input at $`},
		{`[1] [2]`, `invalid JSON at byte 5: invalid character '[' after top-level value`},
		{strings.Repeat("[", 10001) + strings.Repeat("]", 10001), `invalid JSON at byte 10001: invalid character '[' exceeded max depth`},
	}
	for _, tt := range tests {
		err := Valid([]byte(tt.in))
		got := ""
		if err != nil {
			got = err.Error()
		}
		if got != tt.want {
			name := tt.in
			if len(name) > 40 {
				name = name[:40] + "..."
			}
			t.Errorf("Valid(%s)\n got: %s\nwant: %s", name, got, tt.want)
		}
	}
}

func TestErrorTypes(t *testing.T) {
	var se *json.SyntaxError
	if err := Valid([]byte(`{`)); !errors.As(err, &se) {
		t.Errorf("syntax error %v does not wrap *json.SyntaxError", err)
	}
	var e *Error
	if err := Valid([]byte(`{"a":1,"a":1}`)); !errors.As(err, &e) || e.Path != "$" || e.Msg != `duplicate key "a"` {
		t.Errorf("duplicate key error %#v is not the expected *Error", err)
	}
}

func FuzzUnmarshal(f *testing.F) {
	for _, s := range []string{
		`{"emb":"e","schema":"s","rules":[{"name":"a"}],"byName":{"x":{"name":"b"}},"raw":{"a":1},"any":[1]}`,
		`{"schema":"a","sch\u0065ma":"b"}`,
		`{"Schema":"a"}`,
		`{"rules":[{"name":"a","NAME":"b"}]}`,
		`{"raw":{"a":1,"a":2}}`,
		`{"any":{"\u212aind":1}}`,
		`{} {}`,
		``,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		var strict outer
		err := Unmarshal(data, &strict)
		validErr := Valid(data)
		if validErr == nil && !json.Valid(data) {
			t.Fatalf("Valid accepted malformed JSON %q", data)
		}
		if err != nil {
			return
		}
		if validErr != nil {
			t.Fatalf("Unmarshal accepted %q that Valid refuses: %v", data, validErr)
		}
		var loose outer
		if err := json.Unmarshal(data, &loose); err != nil {
			t.Fatalf("Unmarshal accepted %q that encoding/json refuses: %v", data, err)
		}
		if !reflect.DeepEqual(strict, loose) {
			t.Fatalf("Unmarshal(%q) = %+v, encoding/json gives %+v", data, strict, loose)
		}
		// Every key the strict decoder accepted at the top level must be
		// an exact field name: no case folding slipped through.
		var keys map[string]json.RawMessage
		if json.Unmarshal(data, &keys) == nil {
			fields := fieldsOf(reflect.TypeFor[outer]())
			for k := range keys {
				if _, ok := fields.byName[k]; !ok {
					t.Fatalf("Unmarshal accepted key %q, which is not a field", k)
				}
			}
		}
	})
}
