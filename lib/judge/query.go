package judge

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"slices"
	"strings"
)

// Query rules see the parameters of a raw query decoded once: split at
// "&" (empty pieces skipped), each piece at its first "=" (none: the
// value is ""), "+" read as a space and percent-escapes decoded. A query
// the parser cannot read matches no query condition:
//
//   - a malformed escape ("%zz", a lone "%");
//   - a name or value that still holds an escape once decoded ("%2541"
//     is "%41", which a server that decodes twice reads as "A");
//   - a control character (a "%00") in a name or value, which a C server
//     takes for the end of the string;
//   - a raw ";" anywhere, since some servers split parameters there too
//     (an encoded %3B is a character of a name or value).
//
// A name may repeat: every value it has must match its glob.

// RecordRedacted is the value records keep in place of a redacted query
// parameter; a request rebuilt from a record (Request.FromRecord) counts
// it as present and matching any glob, since what it hid is unknown.
const RecordRedacted = "<redacted>"

// queryCond is one parameter's condition: absent, or present with every
// value matching one of its globs.
type queryCond struct {
	name   string
	absent bool
	globs  []pattern
}

type param struct{ name, value string }

// parseQueryConds reads {"name": "glob" | ["glob", ...] | null, ...}.
func parseQueryConds(raw json.RawMessage) ([]queryCond, error) {
	var m map[string]json.RawMessage
	if raw[0] != '{' || json.Unmarshal(raw, &m) != nil || len(m) == 0 {
		return nil, errors.New(`must be a non-empty object like {"name": "glob", "other": null}`)
	}
	var out []queryCond
	for name, v := range m {
		if name == "" {
			return nil, errors.New("a parameter name must not be empty")
		}
		c := queryCond{name: name}
		if string(v) == "null" {
			c.absent = true
		} else {
			var err error
			if c.globs, err = globList(v); err != nil {
				return nil, fmt.Errorf("%s: %w (or null for absent)", quote(name), err)
			}
		}
		out = append(out, c)
	}
	slices.SortFunc(out, func(a, b queryCond) int { return strings.Compare(a.name, b.name) })
	return out, nil
}

// parseQuery decodes a raw query as described above; ok is false for
// one the parser cannot read.
func parseQuery(q string) (params []param, ok bool) {
	if strings.Contains(q, ";") {
		return nil, false
	}
	for piece := range strings.SplitSeq(q, "&") {
		if piece == "" {
			continue
		}
		name, value, _ := strings.Cut(piece, "=")
		n, err := url.QueryUnescape(name)
		if err != nil || !plainParam(n) {
			return nil, false
		}
		v, err := url.QueryUnescape(value)
		if err != nil || !plainParam(v) {
			return nil, false
		}
		params = append(params, param{n, v})
	}
	return params, true
}

// plainParam refuses a decoded name or value holding a control character
// or a percent-escape.
func plainParam(s string) bool {
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case c < 0x20 || c == 0x7f:
			return false
		case c == '%' && i+2 < len(s) && unhex(s[i+1]) >= 0 && unhex(s[i+2]) >= 0:
			return false
		}
	}
	return true
}

// holds checks one condition against the parameters.
func (c *queryCond) holds(params []param, fromRecord bool) bool {
	present := false
	for _, p := range params {
		if p.name != c.name {
			continue
		}
		present = true
		if c.absent {
			return false
		}
		if fromRecord && p.value == RecordRedacted {
			continue
		}
		if !anyGlob(c.globs, p.value) {
			return false
		}
	}
	return present != c.absent
}

// describe is the condition for Explain.
func (c *queryCond) describe() string {
	if c.absent {
		return "query " + quote(c.name) + " absent"
	}
	g := patterns(c.globs)
	if len(g) == 1 {
		return "query " + quote(c.name) + "=" + quote(g[0])
	}
	return "query " + quote(c.name) + " in " + list(g)
}
