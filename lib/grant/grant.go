// Package grant turns an imp's request for egress into a policy rule and
// applies an approved one to policies/gateway.json. The rule a human
// approves is exactly the rule inserted: its subject forced to the
// proposing imp and its name prefixed with grant-<imp>- before the gate is
// filed, it may only allow plain requests (no credential injection, no
// tunnel, no CONNECT, no protocol upgrade, no network allowance past the
// gateway's refusal of private addresses, no subject of its own, no report
// mode), and the whole policy must load before it replaces the old one,
// which is kept as a numbered backup.
package grant

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"strings"

	"github.com/impyard/impyard/lib/gate"
	"github.com/impyard/impyard/lib/judge"
	"github.com/impyard/impyard/lib/store"
	"github.com/impyard/impyard/lib/strictjson"
	"github.com/impyard/impyard/lib/yard"
)

// Apply inserts an approved rule into policies/gateway.json above the
// first catch-all deny and returns what it did. The gateway picks the
// change up on its next request. Applying the same rule twice changes
// nothing the second time.
func Apply(y *yard.Yard, imp string, payload []byte) (string, error) {
	// The payload was made by Rule when the gate was filed, so the human
	// saw the very rule that goes in; it must still be its own fixed
	// point, or it was not made that way.
	canon, err := build(imp, payload, true)
	if err != nil {
		return "", err
	}
	if !bytes.Equal(canon, payload) {
		return "", errors.New("egress-grant: the approved rule is not in granted form (subject and name set by the gateway); nothing was changed")
	}
	var rule map[string]json.RawMessage
	if err := json.Unmarshal(payload, &rule); err != nil {
		return "", err
	}
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
		var name string
		_ = json.Unmarshal(rule["name"], &name)
		for _, existing := range rules {
			var n string
			_ = json.Unmarshal(existing["name"], &n)
			if n == name {
				// Already granted: a resumed execution finds its own rule.
				detail = "rule " + name + " already present"
				return nil
			}
		}
		at := len(rules)
		for i, existing := range rules {
			if catchAllDeny(existing) {
				at = i
				break
			}
		}
		rules = append(rules[:at], append([]map[string]json.RawMessage{rule}, rules[at:]...)...)
		if doc["rules"], err = json.Marshal(rules); err != nil {
			return err
		}
		next, err := store.Encode(doc)
		if err != nil {
			return err
		}
		if _, err := judge.Parse(next); err != nil {
			return fmt.Errorf("the policy with rule %s would not load: %w", name, err)
		}
		backup, err := tx.Backup("gateway.json", old)
		if err != nil {
			return err
		}
		if err := tx.Write("gateway.json", next); err != nil {
			return err
		}
		detail = fmt.Sprintf("rule %s inserted at position %d; previous policy kept as %s", name, at+1, filepath.Base(backup))
		return nil
	})
	return detail, err
}

// Rule turns a proposed rule into the rule that would be inserted, as
// canonical gate payload bytes: its subject set to the proposing imp, its
// name prefixed with grant-<imp>-. A proposal may only allow plain
// requests: no credential injection, no tunnel, no report mode, no CONNECT
// method, no headerContains on upgrade, no network allowance and no
// subject; the error names what was refused.
func Rule(imp string, payload []byte) ([]byte, error) {
	return build(imp, payload, false)
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
		case "name", "comment", "match", "verdict":
		default:
			return nil, fmt.Errorf("egress-grant: a proposed rule may not set %q", k)
		}
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
	// Validate the rule alone, so the proposal gets a clear error early.
	one, _ := json.Marshal(map[string]any{"schema": "impyard.policy/1", "rules": []any{rule}})
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
// which the gateway refuses unless a rule allows that network), and a
// subject (the gateway sets it to the proposing imp).
func plain(imp string, match map[string]json.RawMessage, granted bool) error {
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
