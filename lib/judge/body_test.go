package judge

import (
	"bytes"
	"encoding/json"
	"errors"
	"strconv"
	"testing"

	"github.com/impyard/impyard/lib/strictjson"
)

// lookup resolves a pointer over a document encoding/json decoded.
func lookup(v any, p pointer) (any, bool) {
	for _, tok := range p.tokens {
		switch x := v.(type) {
		case map[string]any:
			var ok bool
			if v, ok = x[tok]; !ok {
				return nil, false
			}
		case []any:
			i, err := strconv.Atoi(tok)
			if err != nil || i < 0 || i >= len(x) || strconv.Itoa(i) != tok {
				return nil, false
			}
			v = x[i]
		default:
			return nil, false
		}
	}
	return v, true
}

// FuzzReadDocument checks the one-pass reader against encoding/json and
// strictjson: it accepts only valid JSON, accepts all valid JSON without
// duplicate keys, and finds at each pointer the value encoding/json finds.
func FuzzReadDocument(f *testing.F) {
	for _, s := range []string{
		`{"a":{"b":[1,"x",{"c":null}]},"d":true}`, `[]`, `{}`, `"s"`, `-0.5e+3`, `{"a":1,"a":2}`,
		`{"a\u0062":1}`, `{"a/b":{"m~n":2}}`, `[[[[]]]]`, `{"a":"\ud800"}`, `{"a":01}`, `{"a":1,}`, "{\"a\":\"\x01\"}",
	} {
		f.Add([]byte(s))
	}
	ptrs := []string{"", "/a", "/a/b", "/a/b/0", "/a/b/1", "/a/b/2/c", "/ab", "/a~1b/m~0n", "/d", "/0", "/0/0"}
	t := newTrie()
	n := 0
	var parsed []pointer
	for _, s := range ptrs {
		p, err := parsePointer(s)
		if err != nil {
			f.Fatal(err)
		}
		t.add(p, &n)
		parsed = append(parsed, p)
	}
	f.Fuzz(func(tt *testing.T, data []byte) {
		doc := readDocument(data, t, n)
		valid := json.Valid(data)
		if doc.ok && !valid {
			tt.Fatalf("read invalid JSON %q", data)
		}
		strict := strictjson.Valid(data)
		var se *strictjson.Error
		dup := errors.As(strict, &se)
		if valid && !dup && !doc.ok && bytes.Count(data, []byte("[")) < maxDepth && bytes.Count(data, []byte("{")) < maxDepth {
			tt.Fatalf("refused valid JSON without duplicate keys %q", data)
		}
		if !doc.ok {
			return
		}
		v, err := decodeNumbers(data)
		if err != nil {
			tt.Fatal(err)
		}
		for i, p := range parsed {
			slot := i
			want, found := lookup(v, p)
			raw := doc.values[slot]
			if found != (raw != nil) {
				tt.Fatalf("%q at %q: found %v, read %q", data, p.text, found, raw)
			}
			if !found {
				continue
			}
			got, err := decodeNumbers(raw)
			if err != nil {
				tt.Fatalf("%q at %q: read %q: %v", data, p.text, raw, err)
			}
			a, _ := json.Marshal(got)
			b, _ := json.Marshal(want)
			if !bytes.Equal(a, b) {
				tt.Fatalf("%q at %q: read %s, encoding/json %s", data, p.text, a, b)
			}
		}
	})
}

// decodeNumbers is encoding/json's reading of b with numbers kept as
// written: valid JSON may hold a number no float64 holds, which the
// body reader passes on as it is.
func decodeNumbers(b []byte) (any, error) {
	d := json.NewDecoder(bytes.NewReader(b))
	d.UseNumber()
	var v any
	err := d.Decode(&v)
	return v, err
}
