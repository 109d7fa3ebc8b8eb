package strictjson

import (
	"encoding/json"
	"os"
	"reflect"
	"strings"
	"testing"
	"time"
)

// TestMain runs every test twice: through Unmarshal as callers see it,
// then with the fast pass off, so the checked path alone must give every
// answer too.
func TestMain(m *testing.M) {
	if code := m.Run(); code != 0 {
		os.Exit(code)
	}
	fast = false
	os.Exit(m.Run())
}

// wide has a field of every kind the yard's records and the gateway's
// bodies decode into, for FuzzFastAgrees.
type wide struct {
	S   string            `json:"s"`
	I8  int8              `json:"i8"`
	U   uint              `json:"u"`
	F32 float32           `json:"f32"`
	B   bool              `json:"b"`
	Q   int               `json:"q,string"`
	Bs  []byte            `json:"bs"`
	Arr [2]int            `json:"arr"`
	T   time.Time         `json:"t"`
	TP  *time.Time        `json:"tp"`
	D   time.Duration     `json:"d"`
	M   map[string]any    `json:"m"`
	MI  map[int]string    `json:"mi"`
	PS  *[]string         `json:"ps"`
	R   json.RawMessage   `json:"r"`
	O   *outer            `json:"o"`
	L   []map[string]bool `json:"l"`
}

// FuzzFastAgrees: whatever the one-pass decoder accepts, the
// check-then-decode accepts too, with the same value; so taking the fast
// answer never lets through what the package's rules refuse, nor decodes
// anything differently.
func FuzzFastAgrees(f *testing.F) {
	for _, s := range []string{
		`{"emb":"e","schema":"s","rules":[{"name":"a","kind":"k","-":"d"}],"byName":{"x":{"name":"b"}},"ptr":{"name":"c"},"raw":{"Any":1,"any":[1,{"b":2e999}]},"any":{"Z":1},"Untagged":3}`,
		`{"schema":"a","sch\u0065ma":"b"}`,
		`{"Schema":"a"}`,
		`{"rules":[{"Skip":"x"}]}`,
		`{"ptr":{"\u212aind":"x"}}`,
		`{"raw":{"a":1,"a":2}}`,
		`{"any":{"a":"\ud800"}}`,
		"{\"schema\":\"\xff\"}",
		`{"ptr":null,"rules":null,"raw":null}`,
		`{"s":"x","i8":127,"u":1,"f32":1.5,"b":true,"q":"7","bs":"aGk=","arr":[1,2],"t":"2026-12-01T04:43:23Z","tp":null,"d":5,"m":{"k":[1,"x",null]},"mi":{"3":"c"},"ps":["a"],"n":1.25,"r":[ 1 ,2 ],"o":{"emb":"e"},"l":[{"x":true}]}`,
		`{"i8":128}`,
		`{"arr":[1,2,3]}`,
		`{"t":"2026-12-01T04:43:23+0000"}`,
		`{"bs":"aGk"}`,
		`{"mi":{"x":"c"}}`,
		`{"q":7}`,
		` {} `,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		agree[outer](t, data)
		agree[wide](t, data)
	})
}

func agree[T any](t *testing.T, data []byte) {
	var fast, checked T
	if !fastFits(reflect.TypeFor[T]()) {
		t.Fatalf("%T does not fit the fast pass", fast)
	}
	if unmarshalFast(data, &fast) != nil {
		return
	}
	if err := unmarshalChecked(data, reflect.ValueOf(&checked)); err != nil {
		t.Fatalf("%T: the fast pass accepted %q, which the checks refuse: %v", fast, data, err)
	}
	if !reflect.DeepEqual(fast, checked) {
		t.Fatalf("%T: %q decodes as %+v in the fast pass, %+v after the checks", fast, data, fast, checked)
	}
}

// TestUnmarshalMergesIntoSetValue: into a value the caller set
// beforehand, Unmarshal merges as encoding/json does (the fast pass is
// only for zero values).
func TestUnmarshalMergesIntoSetValue(t *testing.T) {
	v := outer{Schema: "kept", Untagged: 9}
	if err := Unmarshal([]byte(`{"emb":"e"}`), &v); err != nil {
		t.Fatal(err)
	}
	if v.Schema != "kept" || v.Untagged != 9 || v.Emb != "e" {
		t.Errorf("got %+v, want the set fields kept and emb decoded", v)
	}
	// Invalid UTF-8, which only the checked path takes (replacing it as
	// encoding/json does), must not cost the set fields either.
	v = outer{Schema: "kept"}
	if err := Unmarshal([]byte("{\"emb\":\"\xff\"}"), &v); err != nil {
		t.Fatal(err)
	}
	if v.Schema != "kept" || v.Emb != "\ufffd" {
		t.Errorf("got %+v, want the set field kept and emb decoded as U+FFFD", v)
	}
}

// TestNumberTakesCheckedPath: json.Number, which the fast pass fills from
// a JSON string where encoding/json refuses one, keeps the checked path,
// wherever it is in the type.
func TestNumberTakesCheckedPath(t *testing.T) {
	type deep struct {
		L []map[string]*json.Number `json:"l"`
	}
	if fastFits(reflect.TypeFor[deep]()) || !fastFits(reflect.TypeFor[outer]()) {
		t.Fatal("fastFits: want false for a type holding json.Number, true for outer")
	}
	var v deep
	if err := Unmarshal([]byte(`{"l":[{"a":""}]}`), &v); err == nil {
		t.Errorf("Unmarshal accepted an empty string as a json.Number: %+v", v)
	}
}

// TestFastNestingLimit: at and past the nesting limit the fast pass
// takes nothing the checked path refuses, for a body whose depth sits in
// a field of type any, the shape an attacker controls.
func TestFastNestingLimit(t *testing.T) {
	for _, depth := range []int{9998, 9999, 10000, 10001, 10002} {
		data := []byte(`{"any":` + strings.Repeat("[", depth-1) + strings.Repeat("]", depth-1) + `}`)
		var fastV, checkedV outer
		fastErr := unmarshalFast(data, &fastV)
		checkedErr := unmarshalChecked(data, reflect.ValueOf(&checkedV))
		if fastErr == nil && checkedErr != nil {
			t.Errorf("depth %d: the fast pass accepted what the checks refuse: %v", depth, checkedErr)
		}
		if depth > 10000 && checkedErr == nil {
			t.Errorf("depth %d: accepted past the limit", depth)
		}
	}
}
