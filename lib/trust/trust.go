// Package trust is the trust ladder: for an imp proposing an intent with a
// payload, it says whether the action is gated for a human (the default),
// executed automatically, or refused, and which configured entry said so.
// It also keeps the door: Admit refuses a payload its intent's declared
// fields do not allow, before anything is filed.
//
// Entries in the imp's imp.toml come first, then org.toml's, in file
// order, and last the earned ones (earned = true, see lib/earn); the first
// that applies decides. An entry that only restricts
// (deny, gate) applies when each of its match globs holds for the field it
// names, and for a list when any element matches: one blocked recipient is
// enough to deny or gate a whole email, and extra fields do not matter. An
// entry that permits (auto) applies only when the intent's payload is typed
// (lib/payload), every field of the payload is named in its match or
// listed in its free, every match glob holds, and for a list every
// element: one external recipient or one field the owner did not think of
// keeps a whole email gated, and an auto entry that does not apply never
// denies anything by itself. A glob on an address field sees the parsed,
// lowercased address, never the string as sent.
package trust

import (
	"bytes"
	"encoding/json"
	"fmt"
	"slices"
	"strings"

	"github.com/gobwas/glob"

	"github.com/impyard/impyard/lib/config"
	"github.com/impyard/impyard/lib/payload"
	"github.com/impyard/impyard/lib/rate"
)

// Decision is the ladder's answer.
type Decision struct {
	Level string // config.Gate, config.Auto or config.Deny
	Entry string // the deciding entry ("" when none matched)
	Why   string
	// Rule is the deciding entry itself (see Rule), nil when none
	// matched: a gate records it, and an auto-approval signs it.
	Rule json.RawMessage
	// Rate is the deciding auto entry's rate: lib/gate files the
	// approval for a human instead once the entry has spent it.
	Rate rate.Limit
}

// Rule is the canonical JSON of a trust entry: every field that decides
// what it lets through (keys sorted, where it was written left out).
func Rule(t config.Trust) json.RawMessage {
	b, _ := json.Marshal(struct {
		Intent string            `json:"intent"`
		Imp    string            `json:"imp,omitempty"`
		Match  map[string]string `json:"match,omitempty"`
		Free   []string          `json:"free,omitempty"`
		Level  string            `json:"level"`
		Earned bool              `json:"earned,omitempty"`
		Gates  []string          `json:"gates,omitempty"`
		Rate   string            `json:"rate,omitempty"`
	}{t.Intent, t.Imp, t.Match, t.Free, t.Level, t.Earned, t.Gates, t.Rate.String()})
	return b
}

// Admit checks a proposed payload against the fields its intent declares
// (config.Org.Fields): a payload that is not a JSON object, has a field
// not declared, or a value not of its type is refused, and the error names
// the field. An intent that declares no fields admits any payload.
func Admit(org *config.Org, intent string, body []byte) error {
	fields, typed := org.Fields(intent)
	if !typed {
		return nil
	}
	if err := payload.Check(fields, body); err != nil {
		return fmt.Errorf("%s payload: %w", intent, err)
	}
	return nil
}

// Decide climbs the ladder for (imp, intent, payload). impCfg may be nil.
// An imp.toml entry that names a field its intent does not declare is a
// configuration error and denies the action.
func Decide(org *config.Org, impCfg *config.Imp, imp, intent string, body []byte) Decision {
	if org == nil {
		org = config.Default()
	}
	var doc any
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.UseNumber()
	if err := dec.Decode(&doc); err != nil {
		return Decision{Level: config.Gate, Why: "payload is not JSON; gated"}
	}
	var entries, earned []config.Trust
	if impCfg != nil {
		for _, t := range impCfg.Trust {
			if err := org.CheckTrust(t); err != nil {
				return Decision{Level: config.Deny, Entry: t.Where, Why: err.Error()}
			}
		}
		entries, earned = split(impCfg.Trust)
	}
	hand, orgEarned := split(org.Trust)
	entries = append(append(append(entries, hand...), earned...), orgEarned...)
	fields, typed := org.Fields(intent)
	why := "no trust entry matches: gated for a human"
	for _, t := range entries {
		if t.Intent != intent || (t.Imp != "" && t.Imp != imp) {
			continue
		}
		if t.Level != config.Auto {
			if restricts(t.Match, doc, fields, typed) {
				return Decision{Level: t.Level, Entry: t.Where, Why: fmt.Sprintf("%s: level %s", t.Where, t.Level), Rule: Rule(t)}
			}
			continue
		}
		if !permits(t.Match, doc, fields, typed) {
			continue
		}
		// The entry's globs hold; it applies only if it accounts for the
		// whole payload. Otherwise the ladder goes on, and without another
		// entry the action is gated for this reason, which the box is told:
		// it names no file, since a box learns no host path.
		if !typed {
			if why == "no trust entry matches: gated for a human" {
				why = fmt.Sprintf("executor %s declares no fields; auto trust needs typed payloads", intent)
			}
			continue
		}
		if f := unaccounted(t, doc); f != "" {
			if why == "no trust entry matches: gated for a human" {
				why = fmt.Sprintf("field %q is neither matched nor free in the auto entry that matches; auto applies only when every field is accounted for", f)
			}
			continue
		}
		return Decision{Level: t.Level, Entry: t.Where, Why: fmt.Sprintf("%s: level %s", t.Where, t.Level), Rule: Rule(t), Rate: t.Rate}
	}
	return Decision{Level: config.Gate, Why: why}
}

// split separates hand-written entries from earned ones, each in file
// order: an earned entry is consulted only after every hand-written one,
// so it never widens what the owner's own deny or gate entry holds back.
func split(ts []config.Trust) (hand, earned []config.Trust) {
	for _, t := range ts {
		if t.Earned {
			earned = append(earned, t)
		} else {
			hand = append(hand, t)
		}
	}
	return hand, earned
}

// unaccounted returns a field of the payload that the entry neither
// matches nor lists as free, or "". An object field the entry matches
// paths into ("arguments.path") is accounted for when each of its
// fields is, at every depth: one argument the owner did not think of
// keeps the call gated.
func unaccounted(t config.Trust, doc any) string {
	obj, ok := doc.(map[string]any)
	if !ok {
		return "(the payload is not an object)"
	}
	return unaccountedIn(t, obj, "")
}

func unaccountedIn(t config.Trust, obj map[string]any, prefix string) string {
	keys := make([]string, 0, len(obj))
	for k := range obj {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		path := prefix + k
		if _, ok := t.Match[path]; ok || prefix == "" && slices.Contains(t.Free, k) {
			continue
		}
		inner, isObj := obj[k].(map[string]any)
		if isObj && pathsInto(t.Match, path) {
			if f := unaccountedIn(t, inner, path+"."); f != "" {
				return f
			}
			continue
		}
		return path
	}
	return ""
}

// pathsInto reports whether a match key names a path into field.
func pathsInto(m map[string]string, field string) bool {
	for k := range m {
		if strings.HasPrefix(k, field+".") {
			return true
		}
	}
	return false
}

// permits reports whether every glob holds for its field, and for a list
// every element. A missing field, an empty list, a value not of its type,
// or a glob that does not compile never matches: an entry that cannot be
// evaluated leaves the action gated.
func permits(m map[string]string, doc any, fields payload.Fields, typed bool) bool {
	for field, pattern := range m {
		vals, ok := values(doc, field, fields, typed)
		if !ok || len(vals) == 0 {
			return false
		}
		g, err := compile(pattern, field, fields, typed, lineBreaks...)
		if err != nil {
			return false
		}
		for _, v := range vals {
			if !withinLines(g, v) {
				return false
			}
		}
	}
	return true
}

// restricts reports whether every glob holds for its field, where a list
// holds when any element matches; its wildcards match line breaks too, so
// a second line never slips past a deny. A missing field or an empty list does not
// match. A glob that does not compile (config refuses those) matches, so a
// broken restriction errs toward refusing.
func restricts(m map[string]string, doc any, fields payload.Fields, typed bool) bool {
	for field, pattern := range m {
		vals, ok := values(doc, field, fields, typed)
		if !ok || len(vals) == 0 {
			return false
		}
		g, err := compile(pattern, field, fields, typed)
		if err != nil {
			return true
		}
		if !slices.ContainsFunc(vals, g.Match) {
			return false
		}
	}
	return true
}

// compile compiles a glob, with sep as the characters * and ? do not
// match; on an address field it is lowercased like the addresses it is
// matched against.
func compile(pattern, field string, fields payload.Fields, typed bool, sep ...rune) (*glob.Pattern, error) {
	if typed && (fields[field] == payload.Address || fields[field] == payload.Addresses) {
		pattern = strings.ToLower(pattern)
	}
	return glob.Compile(pattern, sep...)
}

// lineBreaks are what a permitting glob's * and ? never match: "Weekly
// digest*" vouches for a subject, not for a second line (a header, once
// in a mail) appended to it.
var lineBreaks = []rune{'\n', '\r'}

// withinLines reports whether g, compiled with lineBreaks, matches v
// without a wildcard spanning a line break: ** and a character class
// ([!x] included) can match one whatever the separators, so a pattern
// with either matches no value that holds a line break. A line break
// written in the pattern itself still matches its own.
func withinLines(g *glob.Pattern, v string) bool {
	if strings.ContainsAny(v, "\r\n") && spansLines(g.String()) {
		return false
	}
	return g.Match(v)
}

// spansLines reports whether a pattern holds an unescaped ** or [.
func spansLines(pattern string) bool {
	for i := 0; i < len(pattern); i++ {
		switch pattern[i] {
		case '\\':
			i++
		case '[':
			return true
		case '*':
			if i+1 < len(pattern) && pattern[i+1] == '*' {
				return true
			}
		}
	}
	return false
}

// values returns the strings a glob is matched against for field: for a
// typed payload what lib/payload makes of the field's value (parsed
// addresses), for an untyped one the value at the dotted path as written.
func values(doc any, field string, fields payload.Fields, typed bool) ([]string, bool) {
	if base, _, dotted := strings.Cut(field, "."); typed && dotted {
		// A path into an object field: the value there, as written.
		if fields[base] != payload.Object {
			return nil, false
		}
		typed = false
	}
	if typed {
		obj, ok := doc.(map[string]any)
		typ, declared := fields[field]
		if !ok || !declared {
			return nil, false
		}
		v, ok := obj[field]
		if !ok {
			return nil, false
		}
		raw, err := json.Marshal(v)
		if err != nil {
			return nil, false
		}
		out, err := payload.Strings(typ, raw)
		return out, err == nil
	}
	v, ok := lookup(doc, field)
	if !ok {
		return nil, false
	}
	return scalars(v)
}

// lookup follows a dotted path through JSON objects.
func lookup(doc any, path string) (any, bool) {
	cur := doc
	for _, k := range strings.Split(path, ".") {
		obj, ok := cur.(map[string]any)
		if !ok {
			return nil, false
		}
		if cur, ok = obj[k]; !ok {
			return nil, false
		}
	}
	return cur, true
}

// scalars returns an untyped value's strings: a scalar's text, a list's
// elements' (none may be an object or a nested list).
func scalars(v any) ([]string, bool) {
	switch x := v.(type) {
	case string:
		return []string{x}, true
	case json.Number:
		return []string{x.String()}, true
	case bool:
		return []string{fmt.Sprint(x)}, true
	case []any:
		var out []string
		for _, e := range x {
			if _, nested := e.([]any); nested {
				return nil, false
			}
			s, ok := scalars(e)
			if !ok {
				return nil, false
			}
			out = append(out, s...)
		}
		return out, true
	}
	return nil, false
}

// Covers reports whether the auto entry t would apply to body, a payload
// of intent: what Decide asks of an auto entry, for that entry alone.
// lib/earn checks with it that the entry it proposes covers the payloads
// it rests on.
func Covers(org *config.Org, t config.Trust, intent string, body []byte) bool {
	fields, typed := org.Fields(intent)
	if t.Intent != intent || t.Level != config.Auto || !typed {
		return false
	}
	var doc any
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.UseNumber()
	if dec.Decode(&doc) != nil {
		return false
	}
	return permits(t.Match, doc, fields, typed) && unaccounted(t, doc) == ""
}
