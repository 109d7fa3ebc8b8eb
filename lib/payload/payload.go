// Package payload owns the types of action payloads: the names an
// executor may give its fields in org.toml (address, addresses, url, text,
// line, number, bool, object), the check that a proposed payload is a JSON object
// whose every field is declared and of its type, and the strict parser of
// e-mail addresses behind address and addresses.
//
// What the check accepts is deliberately narrower than what mail systems
// accept, so that a trust rule's glob sees exactly the mailbox that will
// receive the mail and nothing a parser elsewhere could read differently:
// an address is one bare RFC 5322 addr-spec in dot-atom form, ASCII only,
// without quoted local parts, comments, display names, angle brackets,
// groups, routes, domain literals or the % and ! relay spellings.
package payload

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"slices"
	"strings"

	"github.com/impyard/impyard/lib/strictjson"
)

// Type names, as written in org.toml.
const (
	Address   = "address"   // one e-mail address (a JSON string)
	Addresses = "addresses" // a non-empty JSON array of addresses
	URL       = "url"       // an absolute http or https URL with a host
	Text      = "text"      // any JSON string
	Line      = "line"      // a JSON string without CR or LF: a mail header's value
	Number    = "number"    // a JSON number
	Bool      = "bool"      // true or false
	Object    = "object"    // a JSON object, never matched by a glob
)

// Types lists every type name, for messages.
var Types = []string{Address, Addresses, URL, Text, Line, Number, Bool, Object}

// Fields maps a payload's top-level field names to their type names.
type Fields map[string]string

// Errors of Check and ParseAddress, for errors.Is.
var (
	ErrNotObject  = errors.New("the payload is not a JSON object")
	ErrUndeclared = errors.New("is not a declared field")
	ErrType       = errors.New("is not of its declared type")
	ErrAddress    = errors.New("not one bare e-mail address")
)

// ValidType reports whether name is a type name.
func ValidType(name string) bool { return slices.Contains(Types, name) }

// Matchable reports whether a glob can match a field of type name: every
// type but object.
func Matchable(name string) bool { return ValidType(name) && name != Object }

// ValidField reports whether name can name a field: letters, digits, _ and
// -, starting with a letter or _, at most 64 bytes. A dot would read as a
// path, so it is not allowed.
func ValidField(name string) bool {
	if name == "" || len(name) > 64 {
		return false
	}
	for i, c := range []byte(name) {
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c == '_':
		case (c >= '0' && c <= '9' || c == '-') && i > 0:
		default:
			return false
		}
	}
	return true
}

// Check refuses a payload that is not a JSON object (duplicate keys
// refused), that has a field fields does not declare, or a field whose
// value is not of its declared type. The error names the field.
func Check(fields Fields, payload []byte) error {
	doc, err := Decode(payload)
	if err != nil {
		return err
	}
	names := make([]string, 0, len(doc))
	for k := range doc {
		names = append(names, k)
	}
	slices.Sort(names)
	for _, k := range names {
		typ, ok := fields[k]
		if !ok {
			return fmt.Errorf("field %q %w (declared: %s)", k, ErrUndeclared, declared(fields))
		}
		if err := checkValue(typ, doc[k]); err != nil {
			return fmt.Errorf("field %q %w %s: %v", k, ErrType, typ, err)
		}
	}
	return nil
}

func declared(f Fields) string {
	if len(f) == 0 {
		return "none"
	}
	var s []string
	for k := range f {
		s = append(s, k)
	}
	slices.Sort(s)
	return strings.Join(s, ", ")
}

// Decode reads a payload's top-level object, refusing duplicate keys
// anywhere in it.
func Decode(payload []byte) (map[string]json.RawMessage, error) {
	if err := strictjson.Valid(payload); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrNotObject, err)
	}
	b := bytes.TrimSpace(payload)
	if len(b) == 0 || b[0] != '{' {
		return nil, ErrNotObject
	}
	var doc map[string]json.RawMessage
	if err := json.Unmarshal(b, &doc); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrNotObject, err)
	}
	return doc, nil
}

func checkValue(typ string, raw json.RawMessage) error {
	_, err := Strings(typ, raw)
	return err
}

// Strings returns what a glob is matched against for a value of type typ:
// the lowercased address for address, each lowercased address for
// addresses, the string for url, text and line, the number as written, "true" or
// "false". It fails when the value is not of the type; an object yields no
// strings.
func Strings(typ string, raw json.RawMessage) ([]string, error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 {
		return nil, errors.New("no value")
	}
	str := func() (string, error) {
		var s string
		if raw[0] != '"' || json.Unmarshal(raw, &s) != nil {
			return "", errors.New("want a JSON string")
		}
		return s, nil
	}
	switch typ {
	case Address:
		s, err := str()
		if err != nil {
			return nil, err
		}
		a, err := ParseAddress(s)
		if err != nil {
			return nil, err
		}
		return []string{strings.ToLower(a)}, nil
	case Addresses:
		if raw[0] != '[' {
			return nil, errors.New("want a JSON array of addresses")
		}
		var elems []json.RawMessage
		if err := json.Unmarshal(raw, &elems); err != nil {
			return nil, errors.New("want a JSON array of addresses")
		}
		if len(elems) == 0 {
			return nil, errors.New("the list is empty (leave the field out instead)")
		}
		out := make([]string, 0, len(elems))
		for i, e := range elems {
			a, err := Strings(Address, e)
			if err != nil {
				return nil, fmt.Errorf("element %d: %w", i, err)
			}
			out = append(out, a...)
		}
		return out, nil
	case URL:
		s, err := str()
		if err != nil {
			return nil, err
		}
		if err := checkURL(s); err != nil {
			return nil, err
		}
		return []string{s}, nil
	case Text, Line:
		s, err := str()
		if err != nil {
			return nil, err
		}
		// A line break in a header's value starts a header of the
		// proposer's own (a Bcc), which no one approved.
		if typ == Line && strings.ContainsAny(s, "\r\n") {
			return nil, errors.New("want one line: no CR or LF")
		}
		return []string{s}, nil
	case Number:
		var n json.Number
		if raw[0] == '"' || json.Unmarshal(raw, &n) != nil {
			return nil, errors.New("want a JSON number")
		}
		return []string{string(raw)}, nil
	case Bool:
		switch string(raw) {
		case "true", "false":
			return []string{string(raw)}, nil
		}
		return nil, errors.New("want true or false")
	case Object:
		if raw[0] != '{' {
			return nil, errors.New("want a JSON object")
		}
		return nil, nil
	}
	return nil, fmt.Errorf("unknown type %q", typ)
}

// checkURL accepts an absolute http or https URL with a host and no
// userinfo, written the way Go prints it back, so no other parser can find
// another host in it.
func checkURL(s string) error {
	for _, r := range s {
		if r <= ' ' || r == 0x7f || r == '\\' || r > 0x7e {
			return errors.New("want a URL without spaces, control characters, backslashes or non-ASCII")
		}
	}
	u, err := url.Parse(s)
	if err != nil {
		return errors.New("not a URL")
	}
	switch {
	case u.Scheme != "http" && u.Scheme != "https":
		return errors.New("want an http:// or https:// URL")
	case u.User != nil:
		return errors.New("a URL may not carry userinfo (user@)")
	case u.Opaque != "" || u.Host == "" || u.Hostname() == "":
		return errors.New("want an absolute URL with a host")
	case u.String() != s:
		return errors.New("the URL is not in its plain form (write it as " + u.String() + ")")
	}
	return nil
}

// ParseAddress parses exactly one bare addr-spec, local@domain, and
// returns it with the domain lowercased. It refuses everything else: a
// display name, angle brackets, a comma or a list, a group, comments,
// quoted local parts, whitespace, a route (@a:b@c), more than one @, a
// domain literal, a trailing dot, non-ASCII (write an international domain
// in its xn-- form), and the relay spellings % and ! in the local part.
func ParseAddress(s string) (string, error) {
	bad := func(why string) (string, error) {
		return "", fmt.Errorf("%q is %w: %s", s, ErrAddress, why)
	}
	if len(s) > 254 {
		return bad("longer than 254 bytes")
	}
	at := strings.IndexByte(s, '@')
	if at < 0 {
		return bad("no @")
	}
	if strings.Count(s, "@") != 1 {
		return bad("more than one @")
	}
	local, domain := s[:at], s[at+1:]
	if local == "" || len(local) > 64 {
		return bad("the part before @ must be 1 to 64 bytes")
	}
	for _, part := range strings.Split(local, ".") {
		if part == "" {
			return bad("an empty dot-separated part before @")
		}
		for i := 0; i < len(part); i++ {
			if !atext(part[i]) {
				return bad(fmt.Sprintf("%q is not allowed before @", part[i]))
			}
		}
	}
	if domain == "" {
		return bad("no domain")
	}
	labels := strings.Split(domain, ".")
	for _, l := range labels {
		if l == "" {
			return bad("an empty label in the domain (a leading, trailing or double dot)")
		}
		if len(l) > 63 {
			return bad("a domain label over 63 bytes")
		}
		if l[0] == '-' || l[len(l)-1] == '-' {
			return bad("a domain label starts or ends with -")
		}
		for i := 0; i < len(l); i++ {
			c := l[i]
			if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-') {
				return bad(fmt.Sprintf("%q is not allowed in the domain", c))
			}
		}
	}
	if allDigits(labels[len(labels)-1]) {
		return bad("the domain is an IP address or ends in a numeric label")
	}
	return local + "@" + strings.ToLower(domain), nil
}

// atext is RFC 5322 atext less % and ! (relay spellings that send the mail
// on to a host the domain does not name).
func atext(c byte) bool {
	switch {
	case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9':
		return true
	}
	return strings.IndexByte("#$&'*+-/=?^_`{|}~", c) >= 0
}

func allDigits(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}
