package config

import (
	"fmt"
	"maps"
	"regexp"
	"slices"
	"strings"

	"github.com/impyard/impyard/lib/intent"
	"github.com/impyard/impyard/lib/payload"
)

// builtinFields types the payloads of the trusted-side executor kinds,
// whose shape is fixed by the code that performs them.
var builtinFields = map[string]payload.Fields{
	MessageUser: {"text": payload.Text},
	GitPush:     intent.PushFields,
	EgressGrant: {"name": payload.Text, "comment": payload.Text, "match": payload.Object, "verdict": payload.Text, "expires": payload.Text, "scope": payload.Text},
	Memory:      intent.MemoryFields,
}

// Fields returns the declared fields of intent's payload and whether it
// has any declaration: the executor's own fields, else those built in for
// its kind (message-user, git-push, egress-grant, memory; a pull request for the
// intent a git-push executor's then names), else none. The built-in
// egress-grant intent is typed even without an executor.
func (o *Org) Fields(name string) (payload.Fields, bool) {
	e := o.Executors[name]
	if e == nil {
		if name == intent.EgressGrant {
			return builtinFields[EgressGrant], true
		}
		if _, s := o.MCPServerFor(name); s != nil {
			return MCPFields, true
		}
		return nil, false
	}
	if e.Fields != nil {
		return e.Fields, true
	}
	if f, ok := builtinFields[e.Kind]; ok {
		return f, true
	}
	for _, x := range o.Executors {
		if x != nil && x.Kind == GitPush && x.Then == name {
			return intent.PullRequestFields, true
		}
	}
	return nil, false
}

// CheckTrust checks a trust entry against the fields its intent declares:
// every match key and free entry must name a declared field, and a match
// key a field a glob can match. An imp.toml entry is checked here, when
// org.toml is at hand; org.toml's own are checked as it loads.
func (o *Org) CheckTrust(t Trust) error {
	if key, _, msg := o.trustFields(t); msg != "" {
		return fmt.Errorf("%s: key %q: %s", t.Where, key, msg)
	}
	return nil
}

// trustFields returns the key at fault, the field it names and what is
// wrong, or an empty msg.
func (o *Org) trustFields(t Trust) (key, field, msg string) {
	fields, typed := o.Fields(t.Intent)
	if !typed {
		return "", "", ""
	}
	for _, k := range slices.Sorted(maps.Keys(t.Match)) {
		if base, path, ok := strings.Cut(k, "."); ok {
			// A path into an object field: its value there is matched.
			if fields[base] != payload.Object || path == "" || strings.HasSuffix(path, ".") || strings.Contains(path, "..") {
				return "match", k, fmt.Sprintf("match key %q: a dotted key names a path into a field of type object (declared: %s)", k, strings.Join(slices.Sorted(maps.Keys(fields)), ", "))
			}
			continue
		}
		typ, ok := fields[k]
		if !ok {
			return "match", k, fmt.Sprintf("match key %q names no declared field of intent %s (declared: %s)", k, t.Intent, strings.Join(slices.Sorted(maps.Keys(fields)), ", "))
		}
		if !payload.Matchable(typ) {
			return "match", k, fmt.Sprintf("match key %q: a glob cannot match a field of type %s", k, typ)
		}
	}
	for _, f := range t.Free {
		if _, ok := fields[f]; !ok {
			return "free", f, fmt.Sprintf("free field %q names no declared field of intent %s (declared: %s)", f, t.Intent, strings.Join(slices.Sorted(maps.Keys(fields)), ", "))
		}
	}
	return "", "", ""
}

// checkFree checks what an entry's free list can mean without the
// executors: only an auto entry lets fields through.
func checkFree(p string, b []byte, i int, t Trust) error {
	if len(t.Free) > 0 && t.Level != Auto {
		return bad(p, b, "free", "[[trust]] #%d: free is only for auto entries (a %s entry applies whatever else the payload holds)", i+1, t.Level)
	}
	for _, f := range t.Free {
		if !payload.ValidField(f) {
			return bad(p, b, "free", "[[trust]] #%d: %q is not a field name", i+1, f)
		}
	}
	return nil
}

// checkFields checks org.toml's field declarations and its trust entries
// against them.
func (o *Org) checkFields(b []byte) error {
	p := o.path
	for _, intent := range slices.Sorted(maps.Keys(o.Executors)) {
		e := o.Executors[intent]
		if e.Fields == nil {
			continue
		}
		if e.Kind == GitPush || e.Kind == EgressGrant || e.Kind == Memory {
			return bad(p, b, "fields", "executor %s: the payload of a %s executor is fixed; it takes no fields", intent, e.Kind)
		}
		for _, f := range slices.Sorted(maps.Keys(e.Fields)) {
			typ := e.Fields[f]
			if !payload.ValidField(f) {
				return fmt.Errorf("%s:%d: key %q: executor %s: %q is not a field name", p, lineWith(b, "fields", f), "fields", intent, f)
			}
			if !payload.ValidType(typ) {
				return fmt.Errorf("%s:%d: key %q: executor %s: field %s has unknown type %q (want %s)",
					p, lineWith(b, f, `"`+typ+`"`), "fields."+f, intent, f, typ, strings.Join(payload.Types, ", "))
			}
		}
	}
	for i, e := range o.Earn {
		if _, typed := o.Fields(e.Intent); !typed {
			return bad(p, b, "intent", "[[earn]] #%d: intent %s declares no fields; an earned entry is an auto entry, which needs typed payloads ([executors.%s] fields)", i+1, e.Intent, e.Intent)
		}
	}
	for i, t := range o.Trust {
		if key, field, msg := o.trustFields(t); msg != "" {
			return fmt.Errorf("%s:%d: key %q: [[trust]] #%d: %s", p, lineWith(b, key, field), key+"."+field, i+1, msg)
		}
	}
	return nil
}

// lineWith finds the first line holding every needle, for messages about
// values that share their key's name with other tables.
func lineWith(b []byte, needles ...string) int {
	for i, line := range strings.Split(string(b), "\n") {
		ok := true
		for _, n := range needles {
			if !regexp.MustCompile(`(^|[^A-Za-z0-9_-])` + regexp.QuoteMeta(n) + `($|[^A-Za-z0-9_-])`).MatchString(line) {
				ok = false
				break
			}
		}
		if ok {
			return i + 1
		}
	}
	return 0
}
