package earn

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/BurntSushi/toml"

	"github.com/impyard/impyard/lib/approval"
	"github.com/impyard/impyard/lib/config"
	"github.com/impyard/impyard/lib/event"
	"github.com/impyard/impyard/lib/gate"
	"github.com/impyard/impyard/lib/intent"
	"github.com/impyard/impyard/lib/notify"
	"github.com/impyard/impyard/lib/store"
	"github.com/impyard/impyard/lib/trust"
	"github.com/impyard/impyard/lib/yard"
)

// Event names in the journal and the audit log.
const (
	EventEarned  = "trust-earned"
	EventRemoved = notify.TrustEarnedRemoved
)

// TOML renders e as the [[trust]] table Append writes, headed by a
// comment naming the trust-promote gate that approved it.
func (e *Entry) TOML(promote string) string {
	var b strings.Builder
	b.WriteString("[[trust]]")
	if promote != "" {
		b.WriteString(" # earned: approved with trust-promote gate " + promote)
	}
	fmt.Fprintf(&b, "\nintent = %s\n", str(e.Intent))
	if len(e.Match) > 0 {
		var kv []string
		for _, k := range slices.Sorted(maps.Keys(e.Match)) {
			kv = append(kv, key(k)+" = "+str(e.Match[k]))
		}
		fmt.Fprintf(&b, "match = { %s }\n", strings.Join(kv, ", "))
	}
	if len(e.Free) > 0 {
		fmt.Fprintf(&b, "free = %s\n", list(e.Free))
	}
	fmt.Fprintf(&b, "level = %s\nearned = true\ngates = %s\n", str(e.Level), list(e.Gates))
	return b.String()
}

// str is a TOML basic string: JSON's escapes are all TOML's too.
func str(s string) string {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(s)
	return strings.TrimSuffix(b.String(), "\n")
}

var bare = regexp.MustCompile(`^[A-Za-z0-9_-]+$`)

func key(k string) string {
	if bare.MatchString(k) {
		return k
	}
	return str(k)
}

func list(ss []string) string {
	q := make([]string, len(ss))
	for i, s := range ss {
		q[i] = str(s)
	}
	return "[" + strings.Join(q, ", ") + "]"
}

// Append appends the earned entry of an approved trust-promote gate g to
// imps/<imp>/imp.toml, keeping the previous file as imp.toml.N, and
// records it in the imp's journal and the audit log. The file must load
// with the entry, or nothing is written. An entry resting on the same
// gates already there is not appended again: a resumed execution finds
// its own entry. Nor is one whose streak the owner broke after g was
// filed, by denying a gate of the same (imp, intent) that the imp
// proposed: approving a promotion grants trust for the approvals it
// names, and those are no longer consecutive (ErrStreakBroken). Nor is
// one other than the entry the owner's approvals derive (Check), with
// their signatures checked against kr: the payload of a gate file is
// never taken as it is, since anyone who writes the yard can write one.
func Append(y *yard.Yard, org *config.Org, kr *approval.Keyring, g *gate.Gate, body []byte) (string, error) {
	e, err := Parse(body)
	if err != nil {
		return "", err
	}
	t := e.Trust()
	t.Where = "trust-promote gate " + g.ID
	if err := org.CheckTrust(t); err != nil {
		return "", err
	}
	if err := e.checkFree(org); err != nil {
		return "", err
	}
	if err := Check(y, org, kr, g, body); err != nil {
		return "", fmt.Errorf("%w; nothing appended to %s", err, config.ImpPath(y, g.Imp))
	}
	return edit(y, g.Imp, func(p string, old []byte, im *config.Imp) ([]byte, string, error) {
		for _, have := range im.Trust {
			if have.Earned && have.Intent == e.Intent && slices.Equal(have.Gates, e.Gates) {
				return nil, "entry already in " + p, nil
			}
		}
		// Under the lock of imp.toml, so a deny committed after this look
		// finds the entry in place when it asks whether it disagrees.
		d, at, err := brokenBy(y, g.Imp, e.Intent, g.Created)
		if err != nil {
			return nil, "", err
		}
		if d != nil {
			return nil, "", fmt.Errorf("trust-promote gate %s: the owner denied gate %s of %s %s at %s: %w; nothing appended to %s",
				g.ID, d.ID, g.Imp, e.Intent, at.UTC().Format(time.RFC3339), ErrStreakBroken, p)
		}
		next := append([]byte{}, old...)
		if len(next) > 0 && !bytes.HasSuffix(next, []byte("\n")) {
			next = append(next, '\n')
		}
		if len(next) > 0 {
			next = append(next, '\n')
		}
		next = append(next, e.TOML(g.ID)...)
		return next, fmt.Sprintf("earned entry for %s appended to %s", e.Intent, p), nil
	}, func(detail string) event.Event {
		return event.Event{Event: EventEarned, Imp: g.Imp, Actor: Actor, By: approver(g), ID: g.ID, Intent: e.Intent, Why: detail}
	}, nil)
}

// approver names who approved g, for the record.
func approver(g *gate.Gate) string {
	if h, ok := decided(g); ok {
		return h.By
	}
	return ""
}

// Denied is called when the owner, by, denies g in its seq-th
// transition. When the trust ladder as configured now would have
// auto-approved g's payload by an earned entry of g's imp (a gate filed
// before the entry was earned, say), the owner disagrees with what was
// earned: every earned entry of that (imp, intent) is removed from
// imp.toml (the previous file kept as imp.toml.N) and the removal recorded
// in the journal and the audit log. A deny of a gate that a hand-written
// entry holds back, or that no earned entry covers, agrees with the
// ladder and removes nothing. It returns what it did, "" when nothing.
//
// It is called before the deny is committed, and again if the deny is
// repeated: a crash between the two leaves the gate pending with the
// entry gone, the safe side, never a committed deny with the entry it
// disagrees with still in force.
func Denied(y *yard.Yard, g *gate.Gate, by string, seq int) (string, error) {
	if g.Intent == intent.TrustPromote {
		return "", nil
	}
	org, err := config.LoadOrg(y)
	if err != nil {
		return "", err
	}
	im, err := config.LoadImp(y, g.Imp)
	if errors.Is(err, config.ErrNoImpConfig) {
		return "", nil
	}
	if err != nil {
		return "", err
	}
	d := trust.Decide(org, im, g.Imp, g.Intent, g.Payload)
	covered := ""
	for _, t := range im.Trust {
		if t.Earned && d.Level == config.Auto && d.Entry == t.Where {
			covered = t.Where
		}
	}
	if covered == "" {
		return "", nil
	}
	return edit(y, g.Imp, func(p string, old []byte, im *config.Imp) ([]byte, string, error) {
		next, n, err := removeEarned(p, old, g.Intent)
		if err != nil || n == 0 {
			return nil, "", err
		}
		return next, fmt.Sprintf("the owner denied gate %s, which %s would have approved: %d earned entr%s for %s removed from %s",
			g.ID, covered, n, plural(n), g.Intent, p), nil
	}, func(detail string) event.Event {
		return event.Event{Event: EventRemoved, Imp: g.Imp, Actor: "impgate", By: by, ID: g.ID, Intent: g.Intent, Why: detail}
	}, func(e event.Event) error {
		// The owner is told of trust taken back through [notify], under
		// the id of the deny that took it: the outbox entry is written
		// before the journal line, as a transition writes its own.
		e.Seq = seq
		return notify.Enqueue(y, e, config.Notifies)
	})
}

func plural(n int) string {
	if n == 1 {
		return "y"
	}
	return "ies"
}

// edit rewrites imps/<imp>/imp.toml under the lock of its directory:
// change returns the new content (nil: leave the file) and what it did.
// The new content must load as the imp's configuration; the old is kept
// as imp.toml.N; the record is appended while the lock is held, after
// tell (when set) has been given it to queue the owner's notification.
func edit(y *yard.Yard, imp string, change func(p string, old []byte, im *config.Imp) ([]byte, string, error),
	record func(detail string) event.Event, tell func(event.Event) error) (string, error) {
	d, err := config.ImpDir(y, imp)
	if err != nil {
		return "", err
	}
	p := config.ImpPath(y, imp)
	// An imp.toml the daemons refuse as unsafe is not rewritten: the
	// new file would be the owner's, and take in whatever a writer of
	// the yard had put there.
	if err := y.CheckAuthority(p); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return "", err
	}
	detail := ""
	err = d.Update(func(tx *store.Tx) error {
		old, err := tx.Read("imp.toml")
		exists := err == nil
		if err != nil && !store.IsNotExist(err) {
			return err
		}
		im := &config.Imp{}
		if exists {
			if im, err = config.ParseImp(p, imp, old); err != nil {
				return fmt.Errorf("not changed, it does not load: %w", err)
			}
		}
		next, what, err := change(p, old, im)
		if err != nil || next == nil {
			detail = what
			return err
		}
		if _, err := config.ParseImp(p, imp, next); err != nil {
			return fmt.Errorf("%s not changed: with the change it would not load: %w", p, err)
		}
		if exists {
			b, err := tx.Backup("imp.toml", old)
			if err != nil {
				return err
			}
			what += "; previous kept as " + filepath.Base(b)
		}
		if err := tx.Write("imp.toml", next); err != nil {
			return err
		}
		e := record(what)
		if tell != nil {
			// The change is made: a notification that cannot be queued
			// is said where the change is, not turned into its failure.
			if err := tell(e); err != nil {
				what += fmt.Sprintf("; the owner's notification of it could not be queued: %v", err)
				e.Why = what
			}
		}
		detail = what
		return event.Record(y, e)
	})
	return detail, err
}

var header = regexp.MustCompile(`^\s*\[`)

// removeEarned removes from an imp.toml's text every [[trust]] table
// that is earned and for intent, keeping everything else as written,
// and returns the text and how many it removed. A table runs from its
// header to the next header. The result is checked: it must hold no
// earned entry for intent and every other entry.
func removeEarned(p string, b []byte, in string) ([]byte, int, error) {
	lines := strings.SplitAfter(string(b), "\n")
	var out strings.Builder
	removed := 0
	for i := 0; i < len(lines); {
		j := i + 1
		for j < len(lines) && !header.MatchString(lines[j]) {
			j++
		}
		block := strings.Join(lines[i:j], "")
		if strings.HasPrefix(strings.TrimSpace(lines[i]), "[[trust]]") {
			var one struct {
				Trust []config.Trust `toml:"trust"`
			}
			if _, err := toml.Decode(block, &one); err == nil && len(one.Trust) == 1 && one.Trust[0].Earned && one.Trust[0].Intent == in {
				removed++
				i = j
				continue
			}
		}
		out.WriteString(block)
		i = j
	}
	next := []byte(strings.TrimRight(out.String(), "\n") + "\n")
	if strings.TrimSpace(out.String()) == "" {
		next = []byte{}
	}
	// Both files are compared as decoded: counting entries is not enough,
	// as a [trust.match] table written by hand below an earned entry
	// would, with that entry cut, become the match of the entry above it.
	var before, after map[string]any
	_, err1 := toml.Decode(string(b), &before)
	_, err2 := toml.Decode(string(next), &after)
	if err := errors.Join(err1, err2); err != nil {
		return nil, 0, fmt.Errorf("%s: %w", p, err)
	}
	earned := func(t map[string]any) bool { return t["earned"] == true && t["intent"] == in }
	if slices.ContainsFunc(trustTables(after), earned) {
		return nil, 0, fmt.Errorf("%s: an earned entry for %s is written in a form that cannot be removed automatically; remove it by hand", p, in)
	}
	if entries, ok := before["trust"].([]map[string]any); ok {
		if kept := slices.DeleteFunc(entries, earned); len(kept) > 0 {
			before["trust"] = kept
		} else {
			delete(before, "trust")
		}
	}
	if !reflect.DeepEqual(before, after) {
		return nil, 0, fmt.Errorf("%s: removing the earned entries for %s would change others; remove them by hand", p, in)
	}
	return next, removed, nil
}

// trustTables is the trust entries of a decoded imp.toml, written as
// [[trust]] tables or as an inline array.
func trustTables(m map[string]any) []map[string]any {
	switch t := m["trust"].(type) {
	case []map[string]any:
		return t
	case []any:
		var out []map[string]any
		for _, e := range t {
			if table, ok := e.(map[string]any); ok {
				out = append(out, table)
			}
		}
		return out
	}
	return nil
}
