// Package strictjson decodes JSON the way a security boundary needs it:
// exactly one reading of the input, or an error.
//
// encoding/json accepts inputs that different parsers read differently. It
// keeps the last of two duplicate keys (others keep the first), it maps the
// key "NAME" onto the field tagged "name", and by default it ignores keys it
// does not know. strictjson refuses all of these, so a value that passed
// inspection is the value every consumer sees.
//
// Guarantees, for Unmarshal into a struct (at any depth, including structs
// inside slices, arrays, maps and pointers):
//   - the input is one well-formed JSON value, not empty, with nothing but
//     whitespace after it;
//   - no object anywhere has two keys that decode to the same string (so
//     "name" and "n\u0061me" are duplicates);
//   - every key of an object decoded into a struct names a field exactly,
//     byte for byte, following json tags and embedded structs; fields
//     tagged "-" are unknown;
//   - fields whose type decodes itself (json.RawMessage, types implementing
//     json.Unmarshaler) or is an interface (any) are checked for duplicate
//     keys but not for field names.
//
// Valid checks only the first two, for bodies whose shape is unknown.
//
// Errors that locate a problem are *Error values with a path such as
// $.rules[2].match; syntax errors wrap *json.SyntaxError.
//
// Unmarshal first tries encoding/json/v2 (through its mirror module
// github.com/go-json-experiment/json) with encoding/json's semantics and
// the refusals above switched on: one pass, several times faster than
// the check-then-decode below, which every yard file and request body
// paid for. Only what that pass accepts is taken from it; whatever it
// refuses is decoded again by the check-then-decode, so every error and
// every input only that path accepts (invalid UTF-8, which it replaces
// as encoding/json does) come out exactly as before. FuzzFastAgrees holds
// the two to the same answer.
package strictjson

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"sync"
	"unicode"
	"unicode/utf8"

	jsonv2 "github.com/go-json-experiment/json"
	"github.com/go-json-experiment/json/jsontext"
	jsonv1 "github.com/go-json-experiment/json/v1"
)

// Error reports a refusal at a place in the input.
type Error struct {
	Path string // location of the enclosing value, like $.rules[2].match
	Msg  string // what is wrong, like `unknown field "Verdict"`
}

func (e *Error) Error() string { return e.Msg + " at " + e.Path }

// Unmarshal decodes data into v (a non-nil pointer) like json.Unmarshal,
// but refuses the inputs described in the package comment.
func Unmarshal(data []byte, v any) error {
	rv := reflect.ValueOf(v)
	if rv.Kind() != reflect.Pointer || rv.IsNil() {
		return fmt.Errorf("strictjson: Unmarshal needs a non-nil pointer, not %T", v)
	}
	// Only into a zero value: one the fast pass left half-written can be
	// zeroed again before the second pass, so that pass starts where the
	// caller's did.
	if fast && rv.Elem().IsZero() && fastFits(rv.Type().Elem()) {
		if unmarshalFast(data, v) == nil {
			return nil
		}
		rv.Elem().SetZero()
	}
	return unmarshalChecked(data, rv)
}

// fast is switched off only by the package's tests, which run a second
// time with every input on the checked path, so that path is held to
// every answer the tests expect, not only to the refusals.
var fast = true

// fastOptions are encoding/json's semantics (v1) with names matched
// exactly, unknown members, duplicate names and invalid UTF-8 refused.
var fastOptions = jsonv2.JoinOptions(
	jsonv1.DefaultOptionsV1(),
	jsonv2.MatchCaseInsensitiveNames(false),
	jsonv2.RejectUnknownMembers(true),
	jsontext.AllowDuplicateNames(false),
	jsontext.AllowInvalidUTF8(false),
)

var fitCache sync.Map // reflect.Type -> bool

// fastFits says whether the fast pass decodes every value of t exactly as
// the checked path does. It does not for json.Number, which it fills from
// a JSON string where encoding/json refuses one; a type holding one takes
// the checked path alone.
func fastFits(t reflect.Type) bool {
	if ok, found := fitCache.Load(t); found {
		return ok.(bool)
	}
	ok := !holds(t, reflect.TypeFor[json.Number](), map[reflect.Type]bool{})
	fitCache.Store(t, ok)
	return ok
}

// holds says whether a value of t can contain a value of u.
func holds(t, u reflect.Type, seen map[reflect.Type]bool) bool {
	if t == u {
		return true
	}
	if seen[t] {
		return false
	}
	seen[t] = true
	switch t.Kind() {
	case reflect.Pointer, reflect.Slice, reflect.Array:
		return holds(t.Elem(), u, seen)
	case reflect.Map:
		return holds(t.Key(), u, seen) || holds(t.Elem(), u, seen)
	case reflect.Struct:
		for i := range t.NumField() {
			if holds(t.Field(i).Type, u, seen) {
				return true
			}
		}
	}
	return false
}

func unmarshalFast(data []byte, v any) error {
	return jsonv2.Unmarshal(data, v, fastOptions)
}

// unmarshalChecked checks data against the package's rules, then decodes
// it with encoding/json.
func unmarshalChecked(data []byte, rv reflect.Value) error {
	v := rv.Interface()
	if err := check(data, rv.Type().Elem()); err != nil {
		return err
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		var te *json.UnmarshalTypeError
		if errors.As(err, &te) {
			path := "$"
			if te.Field != "" {
				path += "." + te.Field
			}
			return &Error{Path: path, Msg: fmt.Sprintf("cannot use JSON %s as %s", te.Value, te.Type)}
		}
		return err
	}
	return nil
}

// Valid returns nil if data is one well-formed JSON value without
// duplicate keys in any object, and the reason otherwise.
func Valid(data []byte) error {
	return check(data, nil)
}

func check(data []byte, t reflect.Type) error {
	if len(bytes.TrimLeft(data, " \t\r\n")) == 0 {
		return &Error{Path: "$", Msg: "empty input"}
	}
	// After json.Valid the walk can trust the syntax, and its recursion
	// is bounded by json.Valid's nesting limit.
	if !json.Valid(data) {
		var raw json.RawMessage
		err := json.Unmarshal(data, &raw)
		var se *json.SyntaxError
		if errors.As(err, &se) {
			return fmt.Errorf("invalid JSON at byte %d: %w", se.Offset, err)
		}
		return fmt.Errorf("invalid JSON: %w", err)
	}
	w := walker{data: data}
	return w.value(t)
}

// walker visits every object key of input that json.Valid accepted. It
// reads bytes rather than json.Decoder tokens: it is an order of magnitude
// faster and allocates only for keys that contain escapes or non-ASCII.
type walker struct {
	data []byte
	i    int
	path []step // where the walk is, formatted only for errors
}

type step struct {
	key   []byte
	index int // when key is nil
}

func (w *walker) where() string {
	var b strings.Builder
	b.WriteString("$")
	for _, s := range w.path {
		switch {
		case s.key == nil:
			b.WriteString("[" + strconv.Itoa(s.index) + "]")
		case isIdent(s.key):
			b.WriteString("." + string(s.key))
		default:
			b.WriteString("[" + quote(string(s.key)) + "]")
		}
	}
	return b.String()
}

func isIdent(s []byte) bool {
	if len(s) == 0 || len(s) > 64 {
		return false
	}
	for i, c := range s {
		if !(c == '_' || 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || i > 0 && '0' <= c && c <= '9') {
			return false
		}
	}
	return true
}

// quote bounds attacker-chosen keys in error messages, which end up in
// decision records.
func quote(s string) string {
	const max = 64
	if len(s) > max {
		return strconv.Quote(s[:max]) + "..."
	}
	return strconv.Quote(s)
}

var unmarshalerType = reflect.TypeFor[json.Unmarshaler]()

// target reduces t to what shapes the check of the next value: nil means
// "any JSON", for interfaces and self-decoding types.
func target(t reflect.Type) reflect.Type {
	for t != nil {
		if t.Implements(unmarshalerType) || reflect.PointerTo(t).Implements(unmarshalerType) {
			return nil
		}
		switch t.Kind() {
		case reflect.Pointer:
			t = t.Elem()
		case reflect.Interface:
			return nil
		default:
			return t
		}
	}
	return nil
}

func (w *walker) space() {
	for w.i < len(w.data) {
		switch w.data[w.i] {
		case ' ', '\t', '\n', '\r':
			w.i++
		default:
			return
		}
	}
}

// key reads the string at w.i and returns it decoded exactly as
// encoding/json decodes it, so that "a" and "\u0061" compare equal.
func (w *walker) key() []byte {
	start := w.i
	w.i++
	plain := true
	for {
		switch c := w.data[w.i]; {
		case c == '"':
			w.i++
			if plain {
				return w.data[start+1 : w.i-1]
			}
			var s string
			json.Unmarshal(w.data[start:w.i], &s) // valid: json.Valid passed
			return []byte(s)
		case c == '\\':
			plain = false
			w.i += 2 // \uXXXX continues with hex digits, never a quote
		case c >= utf8.RuneSelf:
			plain = false // encoding/json replaces invalid UTF-8
			w.i++
		default:
			w.i++
		}
	}
}

func (w *walker) value(t reflect.Type) error {
	w.space()
	switch w.data[w.i] {
	case '{':
		return w.object(target(t))
	case '[':
		return w.array(target(t))
	case '"':
		w.i++
		for {
			w.i += bytes.IndexByte(w.data[w.i:], '"') + 1
			escapes := 0
			for w.data[w.i-2-escapes] == '\\' {
				escapes++
			}
			if escapes%2 == 0 {
				break
			}
		}
	default:
		for w.i < len(w.data) && !bytes.ContainsRune([]byte(",]} \t\r\n"), rune(w.data[w.i])) {
			w.i++
		}
	}
	return nil
}

func (w *walker) array(t reflect.Type) error {
	var elem reflect.Type
	if t != nil && (t.Kind() == reflect.Slice || t.Kind() == reflect.Array) {
		elem = t.Elem()
	}
	w.i++
	w.space()
	if w.data[w.i] == ']' {
		w.i++
		return nil
	}
	for n := 0; ; n++ {
		w.path = append(w.path, step{index: n})
		if err := w.value(elem); err != nil {
			return err
		}
		w.path = w.path[:len(w.path)-1]
		w.space()
		w.i++
		if w.data[w.i-1] == ']' {
			return nil
		}
	}
}

func (w *walker) object(t reflect.Type) error {
	var fields *fieldSet
	var elem reflect.Type
	if t != nil {
		switch t.Kind() {
		case reflect.Struct:
			fields = fieldsOf(t)
		case reflect.Map:
			elem = t.Elem()
		}
	}
	w.i++
	w.space()
	if w.data[w.i] == '}' {
		w.i++
		return nil
	}
	var small [16][]byte
	seen := small[:0] // a linear scan beats a map for small objects
	var many map[string]struct{}
	for {
		w.space()
		key := w.key()
		if many == nil {
			for _, k := range seen {
				if bytes.Equal(k, key) {
					return &Error{Path: w.where(), Msg: "duplicate key " + quote(string(key))}
				}
			}
			seen = append(seen, key)
			if len(seen) == len(small) {
				many = make(map[string]struct{}, 2*len(seen))
				for _, k := range seen {
					many[string(k)] = struct{}{}
				}
			}
		} else {
			if _, dup := many[string(key)]; dup {
				return &Error{Path: w.where(), Msg: "duplicate key " + quote(string(key))}
			}
			many[string(key)] = struct{}{}
		}
		next := elem
		if fields != nil {
			ft, ok := fields.byName[string(key)]
			if !ok {
				return &Error{Path: w.where(), Msg: fields.unknown(string(key))}
			}
			next = ft
		}
		w.space()
		w.i++ // the colon
		w.path = append(w.path, step{key: key})
		if err := w.value(next); err != nil {
			return err
		}
		w.path = w.path[:len(w.path)-1]
		w.space()
		w.i++
		if w.data[w.i-1] == '}' {
			return nil
		}
	}
}

type fieldSet struct {
	byName map[string]reflect.Type
	names  []string // in declaration order, for suggestions
}

func (f *fieldSet) unknown(key string) string {
	for _, n := range f.names {
		if strings.EqualFold(n, key) {
			return "unknown field " + quote(key) + " (names are case-sensitive: did you mean " + strconv.Quote(n) + "?)"
		}
	}
	return "unknown field " + quote(key)
}

var fieldCache sync.Map // reflect.Type -> *fieldSet

func fieldsOf(t reflect.Type) *fieldSet {
	if f, ok := fieldCache.Load(t); ok {
		return f.(*fieldSet)
	}
	type candidate struct {
		depth  int
		tagged bool
		typ    reflect.Type
	}
	cands := map[string][]candidate{}
	var order []string
	var collect func(t reflect.Type, depth int, visiting map[reflect.Type]bool)
	collect = func(t reflect.Type, depth int, visiting map[reflect.Type]bool) {
		if visiting[t] {
			return
		}
		visiting[t] = true
		defer delete(visiting, t)
		for i := range t.NumField() {
			sf := t.Field(i)
			ft := sf.Type
			if ft.Kind() == reflect.Pointer {
				ft = ft.Elem()
			}
			if sf.Anonymous {
				if !sf.IsExported() && ft.Kind() != reflect.Struct {
					continue
				}
			} else if !sf.IsExported() {
				continue
			}
			tag := sf.Tag.Get("json")
			if tag == "-" {
				continue
			}
			name, _, _ := strings.Cut(tag, ",")
			if !validTag(name) {
				name = ""
			}
			if name == "" && sf.Anonymous && ft.Kind() == reflect.Struct {
				collect(ft, depth+1, visiting)
				continue
			}
			tagged := name != ""
			if !tagged {
				name = sf.Name
			}
			if _, ok := cands[name]; !ok {
				order = append(order, name)
			}
			cands[name] = append(cands[name], candidate{depth, tagged, sf.Type})
		}
	}
	collect(t, 0, map[reflect.Type]bool{})

	// The dominant field, as encoding/json picks it: the shallowest, a
	// tagged one before an untagged one; a tie hides the name entirely.
	f := &fieldSet{byName: map[string]reflect.Type{}}
	for _, name := range order {
		cs := cands[name]
		slices.SortStableFunc(cs, func(a, b candidate) int {
			if a.depth != b.depth {
				return a.depth - b.depth
			}
			if a.tagged != b.tagged {
				if a.tagged {
					return -1
				}
				return 1
			}
			return 0
		})
		if len(cs) > 1 && cs[0].depth == cs[1].depth && cs[0].tagged == cs[1].tagged {
			continue
		}
		f.byName[name] = cs[0].typ
		f.names = append(f.names, name)
	}
	actual, _ := fieldCache.LoadOrStore(t, f)
	return actual.(*fieldSet)
}

// validTag is encoding/json's rule for usable tag names.
func validTag(s string) bool {
	if s == "" {
		return false
	}
	for _, c := range s {
		switch {
		case strings.ContainsRune("!#$%&()*+-./:;<=>?@[]^_{|}~ ", c):
		case !unicode.IsLetter(c) && !unicode.IsDigit(c):
			return false
		}
	}
	return true
}
