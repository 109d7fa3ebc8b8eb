// Package trust is the trust ladder: for an imp proposing an intent with a
// payload, it says whether the action is gated for a human (the default),
// executed automatically, or refused, and which configured entry said so.
// Entries in the imp's imp.toml come first, then org.toml's, in file order;
// the first that matches decides. A list field in the payload matches only
// if every element does, so one external recipient keeps a whole email
// gated.
package trust

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/gobwas/glob"

	"github.com/impyard/impyard/lib/config"
)

// Decision is the ladder's answer.
type Decision struct {
	Level string // config.Gate, config.Auto or config.Deny
	Entry string // the deciding entry ("" when none matched)
	Why   string
}

// Decide climbs the ladder for (imp, intent, payload). impCfg may be nil.
func Decide(org *config.Org, impCfg *config.Imp, imp, intent string, payload []byte) Decision {
	var doc any
	dec := json.NewDecoder(bytes.NewReader(payload))
	dec.UseNumber()
	if err := dec.Decode(&doc); err != nil {
		return Decision{Level: config.Gate, Why: "payload is not JSON; gated"}
	}
	var entries []config.Trust
	if impCfg != nil {
		entries = append(entries, impCfg.Trust...)
	}
	if org != nil {
		entries = append(entries, org.Trust...)
	}
	for _, t := range entries {
		if t.Intent != intent || (t.Imp != "" && t.Imp != imp) {
			continue
		}
		if !matches(t.Match, doc) {
			continue
		}
		return Decision{Level: t.Level, Entry: t.Where, Why: fmt.Sprintf("%s: level %s", t.Where, t.Level)}
	}
	return Decision{Level: config.Gate, Why: "no trust entry matches: gated for a human"}
}

// matches reports whether every field glob holds for the payload. A
// missing field, an object, or a glob that does not compile never matches:
// an entry that cannot be evaluated leaves the action gated.
func matches(m map[string]string, doc any) bool {
	for field, pattern := range m {
		g, err := glob.Compile(pattern)
		if err != nil {
			return false
		}
		v, ok := lookup(doc, field)
		if !ok || !valueMatches(g, v) {
			return false
		}
	}
	return true
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

func valueMatches(g *glob.Pattern, v any) bool {
	switch x := v.(type) {
	case string:
		return g.Match(x)
	case json.Number:
		return g.Match(x.String())
	case bool:
		return g.Match(fmt.Sprint(x))
	case []any:
		if len(x) == 0 {
			return false
		}
		for _, e := range x {
			if !valueMatches(g, e) {
				return false
			}
		}
		return true
	}
	return false
}
