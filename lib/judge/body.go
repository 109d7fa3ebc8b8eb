package judge

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
)

// Body and argument conditions read a JSON document through RFC 6901
// pointers. Every pointer of a policy is compiled into one trie per
// document kind (request body, MCP arguments), and a document is read in
// one pass that validates it and keeps the raw bytes of the values those
// pointers name: however many rules read a body, it is parsed once.
//
// A document that is not valid JSON, nests deeper than maxDepth, or has a
// key twice in an object some pointer walks through (after unescaping, so
// "\u0074ype" is "type") matches no condition: parsers disagree on which
// of two values counts, and the judge will not guess the upstream's pick.

// MaxJSONBody is the largest body json conditions read: a larger body
// matches none of them.
const MaxJSONBody = 1 << 20

// maxDepth bounds nesting, so that a hostile body costs no deep recursion.
const maxDepth = 512

// pointer is an RFC 6901 JSON pointer, as written and split into
// unescaped reference tokens.
type pointer struct {
	text   string
	tokens []string
}

var errPointer = errors.New(`a JSON pointer is "" or starts with "/", and "~" is followed by 0 or 1`)

func parsePointer(s string) (pointer, error) {
	p := pointer{text: s}
	if s == "" {
		return p, nil
	}
	if s[0] != '/' {
		return p, fmt.Errorf("%s: %w", quote(s), errPointer)
	}
	for tok := range strings.SplitSeq(s[1:], "/") {
		for i := 0; i < len(tok); i++ {
			if tok[i] == '~' && (i+1 == len(tok) || tok[i+1] != '0' && tok[i+1] != '1') {
				return p, fmt.Errorf("%s: %w", quote(s), errPointer)
			}
		}
		// ~1 first: "~01" is "~1", not "/".
		tok = strings.ReplaceAll(strings.ReplaceAll(tok, "~1", "/"), "~0", "~")
		p.tokens = append(p.tokens, tok)
	}
	return p, nil
}

// trie holds the pointers of a policy: a node is a JSON location, slot
// its index in a scan's results (-1: no pointer ends here).
type trie struct {
	kids map[string]*trie
	slot int
}

func newTrie() *trie { return &trie{slot: -1} }

// add returns the slot of p, giving it the next one (*n) when new.
func (t *trie) add(p pointer, n *int) int {
	node := t
	for _, tok := range p.tokens {
		kid := node.kids[tok]
		if kid == nil {
			if node.kids == nil {
				node.kids = map[string]*trie{}
			}
			kid = newTrie()
			node.kids[tok] = kid
		}
		node = kid
	}
	if node.slot < 0 {
		node.slot = *n
		*n++
	}
	return node.slot
}

// document is a read JSON document: for each slot, the raw value found
// there (nil: absent). ok is false for a document no condition matches.
type document struct {
	ok     bool
	values [][]byte
}

// readHook, when set, hears every document read: the promise of one
// read per request is checked by counting, not by reading the code.
var readHook func()

// readDocument reads data against the pointers of t, which hold n slots.
func readDocument(data []byte, t *trie, n int) document {
	if readHook != nil {
		readHook()
	}
	s := scanner{b: data, out: make([][]byte, n)}
	s.space()
	if !s.value(t, 0) {
		return document{}
	}
	s.space()
	if s.i != len(s.b) {
		return document{}
	}
	return document{ok: true, values: s.out}
}

type scanner struct {
	b   []byte
	i   int
	out [][]byte
}

func (s *scanner) space() {
	for s.i < len(s.b) {
		switch s.b[s.i] {
		case ' ', '\t', '\r', '\n':
			s.i++
		default:
			return
		}
	}
}

// value reads one value at the location node (nil: no pointer reaches
// it, so it is only checked).
func (s *scanner) value(node *trie, depth int) bool {
	if s.i >= len(s.b) || depth > maxDepth {
		return false
	}
	start := s.i
	var ok bool
	switch c := s.b[s.i]; {
	case c == '{':
		ok = s.object(node, depth)
	case c == '[':
		ok = s.array(node, depth)
	case c == '"':
		_, ok = s.str()
	case c == 't':
		ok = s.literal("true")
	case c == 'f':
		ok = s.literal("false")
	case c == 'n':
		ok = s.literal("null")
	default:
		ok = s.number()
	}
	if ok && node != nil && node.slot >= 0 {
		s.out[node.slot] = s.b[start:s.i]
	}
	return ok
}

func (s *scanner) literal(word string) bool {
	if !bytes.HasPrefix(s.b[s.i:], []byte(word)) {
		return false
	}
	s.i += len(word)
	return true
}

// number checks the JSON number grammar.
func (s *scanner) number() bool {
	digits := func() int {
		n := 0
		for s.i < len(s.b) && s.b[s.i] >= '0' && s.b[s.i] <= '9' {
			s.i++
			n++
		}
		return n
	}
	if s.i < len(s.b) && s.b[s.i] == '-' {
		s.i++
	}
	lead := s.i
	n := digits()
	if n == 0 || n > 1 && s.b[lead] == '0' {
		return false
	}
	if s.i < len(s.b) && s.b[s.i] == '.' {
		s.i++
		if digits() == 0 {
			return false
		}
	}
	if s.i < len(s.b) && (s.b[s.i] == 'e' || s.b[s.i] == 'E') {
		s.i++
		if s.i < len(s.b) && (s.b[s.i] == '+' || s.b[s.i] == '-') {
			s.i++
		}
		if digits() == 0 {
			return false
		}
	}
	return true
}

// strPlain marks the bytes a string holds as they are: not a quote, a
// backslash or a control character.
var strPlain = func() (t [256]bool) {
	for c := 0x20; c < 256; c++ {
		t[c] = c != '"' && c != '\\'
	}
	return t
}()

// str checks a string and returns its raw bytes, quotes included. The
// hot loop of reading a body: it indexes a local slice with a table.
func (s *scanner) str() ([]byte, bool) {
	b, start := s.b, s.i
	i := start + 1
	for {
		for i < len(b) && strPlain[b[i]] {
			i++
		}
		if i >= len(b) {
			return nil, false
		}
		switch b[i] {
		case '"':
			s.i = i + 1
			return b[start:s.i], true
		case '\\':
			if i+1 >= len(b) {
				return nil, false
			}
			switch b[i+1] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
				i += 2
			case 'u':
				if i+6 > len(b) {
					return nil, false
				}
				for _, h := range b[i+2 : i+6] {
					if unhex(h) < 0 {
						return nil, false
					}
				}
				i += 6
			default:
				return nil, false
			}
		default:
			return nil, false // a control character
		}
	}
}

func (s *scanner) object(node *trie, depth int) bool {
	s.i++
	s.space()
	if s.i < len(s.b) && s.b[s.i] == '}' {
		s.i++
		return true
	}
	var seen []*trie // the pointed-at keys met in this object
	for {
		if s.i >= len(s.b) || s.b[s.i] != '"' {
			return false
		}
		raw, ok := s.str()
		if !ok {
			return false
		}
		var kid *trie
		if node != nil && node.kids != nil {
			key, ok := decodeString(raw)
			if !ok {
				return false
			}
			if kid = node.kids[key]; kid != nil {
				if slices.Contains(seen, kid) {
					return false
				}
				seen = append(seen, kid)
			}
		}
		s.space()
		if s.i >= len(s.b) || s.b[s.i] != ':' {
			return false
		}
		s.i++
		s.space()
		if !s.value(kid, depth+1) {
			return false
		}
		if more, ok := s.after('}'); !more {
			return ok
		}
	}
}

// after reads what follows a member or element: a comma (more to come)
// or the closing bracket (ok, no more).
func (s *scanner) after(closing byte) (more, ok bool) {
	s.space()
	switch {
	case s.i >= len(s.b):
		return false, false
	case s.b[s.i] == ',':
		s.i++
		s.space()
		return true, true
	case s.b[s.i] == closing:
		s.i++
		return false, true
	}
	return false, false
}

func (s *scanner) array(node *trie, depth int) bool {
	s.i++
	s.space()
	if s.i < len(s.b) && s.b[s.i] == ']' {
		s.i++
		return true
	}
	for n := 0; ; n++ {
		var kid *trie
		if node != nil && node.kids != nil {
			// Index tokens are decimal without leading zeros; "01" or "-"
			// name no element (RFC 6901 section 4).
			kid = node.kids[strconv.Itoa(n)]
		}
		if !s.value(kid, depth+1) {
			return false
		}
		if more, ok := s.after(']'); !more {
			return ok
		}
	}
}

// decodeString unquotes a checked JSON string. Without escapes it is its
// bytes; with them, encoding/json decides, so that "\ud800" and friends
// read as the upstream's standard library reads them.
func decodeString(raw []byte) (string, bool) {
	inner := raw[1 : len(raw)-1]
	if !slices.Contains(inner, '\\') {
		return string(inner), true
	}
	var out string
	if json.Unmarshal(raw, &out) != nil {
		return "", false
	}
	return out, true
}

// jsonValue is one value a pointer condition accepts: a glob for a
// string, else the JSON literal itself.
type jsonValue struct {
	glob *pattern // a string: the value found must be a string matching it
	lit  string   // a number, true, false or null, as written
	num  float64
	int  bool // lit is an integer that fits an int64
	i    int64
}

// valueCond is a pointer with the values it accepts (any of them).
type valueCond struct {
	ptr    pointer
	slot   int
	values []jsonValue
}

// parseValueConds reads {"/pointer": VALUE, ...}, VALUE a string (glob),
// number, boolean, null or a non-empty array of them; sorted by pointer
// so that Explain is stable.
func parseValueConds(raw json.RawMessage) ([]valueCond, error) {
	const want = `must be a non-empty object like {"/pointer": value}`
	var m map[string]json.RawMessage
	if raw[0] != '{' || json.Unmarshal(raw, &m) != nil || len(m) == 0 {
		return nil, errors.New(want)
	}
	var out []valueCond
	for text, v := range m {
		p, err := parsePointer(text)
		if err != nil {
			return nil, err
		}
		c := valueCond{ptr: p}
		elems := []json.RawMessage{v}
		if v[0] == '[' {
			if json.Unmarshal(v, &elems) != nil || len(elems) == 0 {
				return nil, fmt.Errorf("%s: an array of values must not be empty", quote(text))
			}
		}
		for _, e := range elems {
			jv, err := parseJSONValue(e)
			if err != nil {
				return nil, fmt.Errorf("%s: %w", quote(text), err)
			}
			c.values = append(c.values, jv)
		}
		out = append(out, c)
	}
	slices.SortFunc(out, func(a, b valueCond) int { return strings.Compare(a.ptr.text, b.ptr.text) })
	return out, nil
}

func parseJSONValue(e json.RawMessage) (jsonValue, error) {
	switch e[0] {
	case '"':
		ps, err := globList(e)
		if err != nil {
			return jsonValue{}, err
		}
		return jsonValue{glob: &ps[0]}, nil
	case 't', 'f', 'n':
		return jsonValue{lit: string(e)}, nil
	case '{', '[':
		return jsonValue{}, errors.New("a value is a string (glob), number, boolean or null, or an array of them")
	}
	jv := jsonValue{lit: string(e)}
	var err error
	if jv.num, err = strconv.ParseFloat(jv.lit, 64); err != nil {
		return jsonValue{}, fmt.Errorf("%s is not a number a float64 holds", e)
	}
	jv.i, err = strconv.ParseInt(jv.lit, 10, 64)
	jv.int = err == nil
	return jv, nil
}

// holds reports whether raw, the value found (nil: absent), is one the
// condition accepts.
func (c *valueCond) holds(raw []byte) bool {
	for i := range c.values {
		if c.values[i].equal(raw) {
			return true
		}
	}
	return false
}

func (v *jsonValue) equal(raw []byte) bool {
	if len(raw) == 0 {
		return false
	}
	switch {
	case v.glob != nil:
		s, ok := "", raw[0] == '"'
		if ok {
			s, ok = decodeString(raw)
		}
		return ok && v.glob.g.Match(s)
	case v.lit == "true" || v.lit == "false" || v.lit == "null":
		return string(raw) == v.lit
	case raw[0] != '-' && (raw[0] < '0' || raw[0] > '9'):
		return false
	}
	// Numbers compare by value: 1, 1.0 and 1e0 are one number. Integers
	// compare exactly, so 2^53+1 is not 2^53.
	if v.int {
		if i, err := strconv.ParseInt(string(raw), 10, 64); err == nil {
			return i == v.i
		}
	}
	f, err := strconv.ParseFloat(string(raw), 64)
	return err == nil && f == v.num
}

// describe is a value list for Explain.
func (c *valueCond) describe() string {
	parts := make([]string, len(c.values))
	for i, v := range c.values {
		if v.glob != nil {
			parts[i] = strconv.Quote(v.glob.text)
		} else {
			parts[i] = v.lit
		}
	}
	if len(parts) == 1 {
		return parts[0]
	}
	return list(parts)
}
