// Package grant turns an imp's request for egress into a policy rule and
// applies an approved one to policies/gateway.json. The rule a human
// approves is exactly the rule inserted: its subject forced to the
// proposing imp and its name prefixed with grant-<imp>- before the gate is
// filed, it may only allow plain requests (no credential injection, no
// tunnel, no CONNECT, no protocol upgrade, no network allowance past the
// gateway's refusal of private addresses, no subject of its own, no report
// mode), and the whole policy must load before it replaces the old one,
// which is kept as a numbered backup.
//
// A grant may be temporary: "expires": "DURATION" in the payload makes
// the inserted rule end that long after the approval (the rule's own
// expires, a time the gateway checks on every request), and "scope":
// "task" narrows it to the gate's task (match.task). Sweep removes the
// granted rules whose time has passed.
package grant

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/impyard/impyard/lib/gate"
	"github.com/impyard/impyard/lib/judge"
	"github.com/impyard/impyard/lib/store"
	"github.com/impyard/impyard/lib/strictjson"
	"github.com/impyard/impyard/lib/yard"
)

// Scopes of a grant: the proposing imp's every run (the default), or
// only the runs of the task that asked.
const (
	ScopeImp  = "imp"
	ScopeTask = "task"
)

// ErrNoTask refuses a grant scoped to a task by a gate that answers none.
var ErrNoTask = errors.New(`egress-grant: "scope": "task" needs a gate filed for a task`)

// Grant is who an approved grant is for and when it was approved.
type Grant struct {
	Imp      string
	Task     string    // the gate's task: a task-scoped grant holds for it alone
	Approved time.Time // a grant's expires counts from here
}

// Apply inserts an approved rule into policies/gateway.json above the
// first catch-all deny and returns what it did. The gateway picks the
// change up on its next request. Applying the same rule twice changes
// nothing the second time; a rule of the same name from an earlier grant
// (expired, or for another task) is replaced where it stands.
func Apply(y *yard.Yard, gr Grant, payload []byte) (string, error) {
	// The payload was made by Rule when the gate was filed, so the human
	// saw the very rule that goes in; it must still be its own fixed
	// point, or it was not made that way.
	canon, err := build(gr.Imp, payload, true)
	if err != nil {
		return "", err
	}
	if !bytes.Equal(canon, payload) {
		return "", errors.New("egress-grant: the approved rule is not in granted form (subject and name set by the gateway); nothing was changed")
	}
	rule, err := policyRule(gr, payload)
	if err != nil {
		return "", err
	}
	var name string
	_ = json.Unmarshal(rule["name"], &name)
	return rewrite(y, func(rules []map[string]json.RawMessage) ([]map[string]json.RawMessage, string, error) {
		at, replaced := -1, false
		for i, existing := range rules {
			var n string
			_ = json.Unmarshal(existing["name"], &n)
			if n != name {
				continue
			}
			if sameRule(existing, rule) {
				// Already granted: a resumed execution finds its own rule.
				return nil, "rule " + name + " already present", nil
			}
			at, replaced = i, true
			rules[i] = rule
			break
		}
		verb := "replaced the earlier grant"
		if !replaced {
			verb, at = "inserted", len(rules)
			for i, existing := range rules {
				if catchAllDeny(existing) {
					at = i
					break
				}
			}
			rules = append(rules[:at], append([]map[string]json.RawMessage{rule}, rules[at:]...)...)
		}
		return rules, fmt.Sprintf("rule %s %s at position %d%s", name, verb, at+1, lifetime(rule)), nil
	})
}

// rewrite changes the rules of policies/gateway.json in one transaction
// under the policy directory's lock. edit returns the new rules and what
// it did, or nil rules to change nothing; the whole policy must load
// before it replaces the old one, which is kept as a numbered backup the
// detail then names.
func rewrite(y *yard.Yard, edit func(rules []map[string]json.RawMessage) ([]map[string]json.RawMessage, string, error)) (string, error) {
	// A policy the gateway refuses as unsafe is not rewritten: the new
	// file would be the owner's, and take in whatever a writer of the
	// yard had put there.
	if err := y.CheckAuthority(y.PolicyPath()); err != nil {
		return "", err
	}
	dir, err := y.Dir("policies")
	if err != nil {
		return "", err
	}
	var detail string
	err = dir.Update(func(tx *store.Tx) error {
		old, err := tx.Read("gateway.json")
		if err != nil {
			return err
		}
		var doc map[string]json.RawMessage
		if err := json.Unmarshal(old, &doc); err != nil {
			return fmt.Errorf("%s: %w", tx.Path("gateway.json"), err)
		}
		var rules []map[string]json.RawMessage
		if err := json.Unmarshal(doc["rules"], &rules); err != nil {
			return fmt.Errorf("%s: rules: %w", tx.Path("gateway.json"), err)
		}
		next, what, err := edit(rules)
		if err != nil || next == nil {
			detail = what
			return err
		}
		if doc["rules"], err = json.Marshal(next); err != nil {
			return err
		}
		data, err := store.Encode(doc)
		if err != nil {
			return err
		}
		if _, err := judge.Parse(data); err != nil {
			return fmt.Errorf("%s: the policy would not load after this change (%s): %w", tx.Path("gateway.json"), what, err)
		}
		backup, err := tx.Backup("gateway.json", old)
		if err != nil {
			return err
		}
		if err := tx.Write("gateway.json", data); err != nil {
			return err
		}
		detail = what + "; previous policy kept as " + filepath.Base(backup)
		return nil
	})
	return detail, err
}

// policyRule is the rule a grant inserts: the approved one with its
// expires turned into the time it ends, and a task scope into match.task.
func policyRule(gr Grant, payload []byte) (map[string]json.RawMessage, error) {
	var rule map[string]json.RawMessage
	if err := json.Unmarshal(payload, &rule); err != nil {
		return nil, err
	}
	t, err := terms(rule)
	if err != nil {
		return nil, err
	}
	delete(rule, "scope")
	delete(rule, "expires")
	if t.expires > 0 {
		if gr.Approved.IsZero() {
			return nil, errors.New("egress-grant: an expiring grant needs its approval time")
		}
		rule["expires"], _ = json.Marshal(gr.Approved.Add(t.expires).UTC().Format(time.RFC3339))
	}
	if t.scope == ScopeTask {
		if gr.Task == "" {
			return nil, ErrNoTask
		}
		var match map[string]json.RawMessage
		if err := json.Unmarshal(rule["match"], &match); err != nil {
			return nil, fmt.Errorf("egress-grant: match: %w", err)
		}
		match["task"], _ = json.Marshal(gr.Task)
		rule["match"], _ = json.Marshal(match)
	}
	return rule, nil
}

// sameRule compares two rules as JSON values, whatever their spacing or
// key order.
func sameRule(a, b map[string]json.RawMessage) bool {
	x, err1 := json.Marshal(a)
	y, err2 := json.Marshal(b)
	if err1 != nil || err2 != nil {
		return false
	}
	cx, err1 := gate.Canonical(x)
	cy, err2 := gate.Canonical(y)
	return err1 == nil && err2 == nil && bytes.Equal(cx, cy)
}

// lifetime words a policy rule's end and task for a detail line.
func lifetime(rule map[string]json.RawMessage) string {
	var out string
	var match struct {
		Task string `json:"task"`
	}
	_ = json.Unmarshal(rule["match"], &match)
	if match.Task != "" {
		out += ", for task " + match.Task
	}
	var until string
	if json.Unmarshal(rule["expires"], &until) == nil && until != "" {
		out += ", until " + until
	}
	return out
}

// grantTerms are a payload's scope and expires.
type grantTerms struct {
	scope   string
	expires time.Duration // 0: never
}

// terms reads and checks a payload's scope and expires.
func terms(rule map[string]json.RawMessage) (grantTerms, error) {
	t := grantTerms{scope: ScopeImp}
	if raw, ok := rule["scope"]; ok {
		if json.Unmarshal(raw, &t.scope) != nil || t.scope != ScopeImp && t.scope != ScopeTask {
			return t, fmt.Errorf(`egress-grant: scope: %s is not "task" or "imp"`, raw)
		}
	}
	if raw, ok := rule["expires"]; ok {
		var text string
		d, err := time.Duration(0), json.Unmarshal(raw, &text)
		if err == nil {
			d, err = time.ParseDuration(text)
		}
		if err != nil || d <= 0 {
			return t, fmt.Errorf(`egress-grant: expires: %s is not a positive duration like "1h" or "30m"`, raw)
		}
		t.expires = d
	}
	return t, nil
}

// Describe says, for impgate show, how long an egress-grant payload
// holds and for whom: "permanent" without scope or expires. task is the
// gate's, approved its approval time (zero while pending).
func Describe(payload []byte, task string, approved time.Time) string {
	var rule map[string]json.RawMessage
	if json.Unmarshal(payload, &rule) != nil {
		return "permanent"
	}
	t, err := terms(rule)
	if err != nil {
		return "invalid: " + err.Error()
	}
	var parts []string
	if t.scope == ScopeTask {
		if task == "" {
			task = "(none: it cannot be applied)"
		}
		parts = append(parts, "scope task: only the runs of task "+task)
	}
	if t.expires > 0 {
		e := "expires " + t.expires.String() + " after approval"
		if !approved.IsZero() {
			e += ", at " + approved.Add(t.expires).UTC().Format(time.RFC3339)
		}
		parts = append(parts, e)
	}
	if parts == nil {
		return "permanent"
	}
	return strings.Join(parts, "; ")
}

// expired reports a granted rule whose expires has come by now. Rules
// the owner wrote are the owner's to remove, expired or not.
func expired(r map[string]json.RawMessage, now time.Time) bool {
	var name, until string
	_ = json.Unmarshal(r["name"], &name)
	_ = json.Unmarshal(r["expires"], &until)
	end, err := time.Parse(time.RFC3339, until)
	return strings.HasPrefix(name, "grant-") && err == nil && !now.Before(end)
}

// Sweep removes from policies/gateway.json every granted rule whose
// expires has come by now, keeping the old policy as a numbered backup,
// and names them; "" when there were none. The gateway stopped applying
// them at that moment already: this keeps the policy short and true.
func Sweep(y *yard.Yard, now time.Time) (string, error) {
	// A look first, without the lock: the rescan that calls this is
	// frequent, and almost always finds nothing to do (or no policy).
	data, err := store.ReadFile(y.PolicyPath())
	if errors.Is(err, fs.ErrNotExist) {
		return "", nil
	}
	if err != nil {
		return "", err
	}
	var look struct {
		Rules []map[string]json.RawMessage `json:"rules"`
	}
	if json.Unmarshal(data, &look) != nil || !slices.ContainsFunc(look.Rules, func(r map[string]json.RawMessage) bool { return expired(r, now) }) {
		return "", nil
	}
	return rewrite(y, func(rules []map[string]json.RawMessage) ([]map[string]json.RawMessage, string, error) {
		keep := []map[string]json.RawMessage{}
		var gone []string
		for _, r := range rules {
			if expired(r, now) {
				var name string
				_ = json.Unmarshal(r["name"], &name)
				gone = append(gone, name)
				continue
			}
			keep = append(keep, r)
		}
		if gone == nil {
			return nil, "", nil
		}
		return keep, "expired " + strings.Join(gone, ", ") + " removed", nil
	})
}

// Rule turns a proposed rule into the rule that would be inserted, as
// canonical gate payload bytes: its subject set to the proposing imp, its
// name prefixed with grant-<imp>-. A proposal may only allow plain
// requests: no credential injection, no tunnel, no report mode, no CONNECT
// method, no headerContains on upgrade, no network allowance and no
// subject; the error names what was refused. A proposal scoped to its
// task must come from a run of one (task is the proposing run's).
func Rule(imp, task string, payload []byte) ([]byte, error) {
	b, err := build(imp, payload, false)
	if err != nil {
		return nil, err
	}
	var rule map[string]json.RawMessage
	if err := json.Unmarshal(b, &rule); err != nil {
		return nil, err
	}
	if t, _ := terms(rule); t.scope == ScopeTask && task == "" {
		return nil, ErrNoTask
	}
	return b, nil
}

// build makes the granted form of a rule. granted accepts the subject
// that form carries (the imp's own, nothing else), so that the granted
// form is a fixed point.
func build(imp string, payload []byte, granted bool) ([]byte, error) {
	if err := strictjson.Valid(payload); err != nil {
		return nil, fmt.Errorf("egress-grant payload is not a rule object: %w", err)
	}
	var rule map[string]json.RawMessage
	if err := json.Unmarshal(payload, &rule); err != nil {
		return nil, fmt.Errorf("egress-grant payload is not a rule object: %w", err)
	}
	for k := range rule {
		switch k {
		case "name", "comment", "match", "verdict", "scope", "expires":
		default:
			return nil, fmt.Errorf("egress-grant: a proposed rule may not set %q", k)
		}
	}
	if _, err := terms(rule); err != nil {
		return nil, err
	}
	var verdict, name string
	_ = json.Unmarshal(rule["verdict"], &verdict)
	if verdict == "tunnel" {
		return nil, errors.New(`egress-grant: a proposed rule may not ask for "verdict": "tunnel" (a raw pipe the gateway cannot read)`)
	}
	if verdict != "allow" {
		return nil, errors.New(`egress-grant: a proposed rule must have "verdict": "allow"`)
	}
	_ = json.Unmarshal(rule["name"], &name)
	if name == "" {
		return nil, errors.New("egress-grant: the proposed rule has no name")
	}
	var match map[string]json.RawMessage
	if m, ok := rule["match"]; ok {
		if err := json.Unmarshal(m, &match); err != nil {
			return nil, fmt.Errorf("egress-grant: match: %w", err)
		}
	}
	if match == nil {
		match = map[string]json.RawMessage{}
	}
	if _, ok := match["host"]; !ok {
		return nil, errors.New("egress-grant: a proposed rule must name its host")
	}
	if err := plain(imp, match, granted); err != nil {
		return nil, err
	}
	match["subject"], _ = json.Marshal(imp)
	rule["match"], _ = json.Marshal(match)
	if prefix := "grant-" + imp + "-"; !strings.HasPrefix(name, prefix) {
		rule["name"], _ = json.Marshal(prefix + name)
	}
	// Validate the rule alone, so the proposal gets a clear error early;
	// scope and expires are the grant's, not the policy's, terms.
	alone := maps.Clone(rule)
	delete(alone, "scope")
	delete(alone, "expires")
	one, _ := json.Marshal(map[string]any{"schema": "impyard.policy/1", "rules": []any{alone}})
	if _, err := judge.Parse(one); err != nil {
		return nil, fmt.Errorf("egress-grant: %w", err)
	}
	b, err := json.Marshal(rule)
	if err != nil {
		return nil, err
	}
	return gate.Canonical(b)
}

// plain refuses the match fields that would let a granted rule do more
// than plain requests to the hosts it names: a CONNECT method (a nested
// tunnel), a headerContains on upgrade (a protocol switch the gateway stops
// reading), a network (reaching loopback, link-local or private addresses,
// which the gateway refuses unless a rule allows that network), a
// subject (the gateway sets it to the proposing imp), and a task (only a
// scope sets it, to the gate's own).
func plain(imp string, match map[string]json.RawMessage, granted bool) error {
	if _, ok := match["task"]; ok {
		return errors.New(`egress-grant: a proposed rule may not set match.task; ask for "scope": "task"`)
	}
	if _, ok := match["network"]; ok {
		return errors.New("egress-grant: a proposed rule may not ask for a network allowance (match.network); private, loopback and link-local addresses stay refused")
	}
	if raw, ok := match["subject"]; ok {
		var s string
		if !granted || json.Unmarshal(raw, &s) != nil || s != imp {
			return errors.New("egress-grant: a proposed rule may not set match.subject; the gateway scopes it to the proposing imp")
		}
	}
	if raw, ok := match["method"]; ok {
		var one string
		var list []string
		if json.Unmarshal(raw, &one) == nil {
			list = []string{one}
		} else {
			_ = json.Unmarshal(raw, &list)
		}
		for _, m := range list {
			if strings.EqualFold(strings.TrimSpace(m), "CONNECT") {
				return errors.New("egress-grant: a proposed rule may not ask for the CONNECT method (match.method)")
			}
		}
	}
	if raw, ok := match["headerContains"]; ok {
		var headers map[string]json.RawMessage
		_ = json.Unmarshal(raw, &headers)
		for h := range headers {
			if strings.EqualFold(strings.TrimSpace(h), "upgrade") {
				return errors.New("egress-grant: a proposed rule may not match headerContains on upgrade (a protocol switch the gateway stops reading)")
			}
		}
	}
	return nil
}

// catchAllDeny reports a deny rule that matches everything: grants go
// above it so they can take effect.
func catchAllDeny(rule map[string]json.RawMessage) bool {
	var verdict string
	_ = json.Unmarshal(rule["verdict"], &verdict)
	if verdict != "deny" {
		return false
	}
	m, ok := rule["match"]
	if !ok {
		return true
	}
	var match map[string]json.RawMessage
	if json.Unmarshal(m, &match) != nil {
		return false
	}
	for k, v := range match {
		if k != "host" || !bytes.Equal(bytes.TrimSpace(v), []byte(`"*"`)) {
			return false
		}
	}
	return true
}
