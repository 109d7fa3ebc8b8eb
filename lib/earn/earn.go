// Package earn is earned trust promotion: an imp that the owner has
// trusted with the same kind of action often enough is proposed an auto
// trust entry for it, which the owner approves or denies like any gate.
//
// It is opt-in per (imp, intent) with [[earn]] in org.toml. After `after`
// consecutive gates of that (imp, intent), proposed by the imp through
// impgw, approved by the owner at the desk and executed, with no deny of
// that (imp, intent) between them, Propose files one gate of intent
// trust-promote whose payload is the narrowest [[trust]] entry covering
// those gates' payloads (Narrowest). Approved, that entry is appended to
// imps/<imp>/imp.toml marked earned = true with the gates it rests on
// (Append), but only when it is exactly the entry those gates and their
// signed approvals derive (Derive): a gate file is anyone's to write who
// can write the yard, so its payload is never taken as it stands, and an
// address, URL or object field is never free in an earned entry. The
// ladder (lib/trust) consults earned entries after every hand-written
// one. A deny of a gate that an earned entry would have approved is the
// owner disagreeing with it: Denied removes every earned entry of that
// (imp, intent) and records it.
//
// The count is not kept anywhere: Streak derives it each time from the
// gates themselves, which are the authoritative record of who decided
// what and when, so it cannot drift from them, survives any crash, and
// an owner can check it with impgate ls. A trust-promote gate of the
// (imp, intent) consumes the gates decided before it was decided (or,
// while it waits, before it was filed), whatever the owner decides, so
// the same approvals never propose twice and those made while it waited
// do not propose again the moment it is approved.
package earn

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/gobwas/glob"

	"github.com/impyard/impyard/lib/approval"
	"github.com/impyard/impyard/lib/config"
	"github.com/impyard/impyard/lib/gate"
	"github.com/impyard/impyard/lib/intent"
	"github.com/impyard/impyard/lib/payload"
	"github.com/impyard/impyard/lib/state"
	"github.com/impyard/impyard/lib/strictjson"
	"github.com/impyard/impyard/lib/trust"
	"github.com/impyard/impyard/lib/yard"
)

// Actor is how promotion signs what it files and records.
const Actor = "impexec"

// MaxAddresses is how many distinct addresses an address field's glob
// names one by one; past it the glob is their common domain.
const MaxAddresses = 10

// Entry is a trust-promote gate's payload: the [[trust]] entry that its
// approval appends to the imp's imp.toml, exactly.
type Entry struct {
	Intent string            `json:"intent"`
	Match  map[string]string `json:"match,omitempty"`
	Free   []string          `json:"free,omitempty"`
	Level  string            `json:"level"`
	Earned bool              `json:"earned"`
	Gates  []string          `json:"gates"`
}

// Trust is the entry as configuration.
func (e *Entry) Trust() config.Trust {
	return config.Trust{Intent: e.Intent, Match: e.Match, Free: e.Free, Level: e.Level, Earned: e.Earned, Gates: e.Gates}
}

// Wide says, field by field, where e lets through what none of the
// payloads it rests on held: an address field matched by its domain
// (past MaxAddresses distinct addresses), and each free field. An imp can
// widen its own promotion by spreading recipients over many addresses of
// one domain, so the owner is shown this before approving.
func (e *Entry) Wide() []string {
	var out []string
	for _, k := range slices.Sorted(maps.Keys(e.Match)) {
		if domain, ok := strings.CutPrefix(e.Match[k], "*@"); ok {
			out = append(out, fmt.Sprintf("%s: any address at %s, not only the addresses approved", k, domain))
		}
	}
	for _, k := range e.Free {
		out = append(out, k+": free, any value")
	}
	return out
}

// ErrNoNarrowEntry is a run of payloads no auto entry can cover without
// letting an address field through as free.
var ErrNoNarrowEntry = errors.New("no narrow entry covers these payloads")

// ErrNotEntry is a trust-promote payload that is not an earned entry.
var ErrNotEntry = errors.New("not an earned trust entry")

// Parse reads a trust-promote payload and checks that it is an earned
// auto entry resting on at least one gate, for an intent that is not
// trust-promote itself.
func Parse(body []byte) (*Entry, error) {
	var e Entry
	if err := strictjson.Unmarshal(body, &e); err != nil {
		return nil, fmt.Errorf("trust-promote payload: %w: %w", ErrNotEntry, err)
	}
	switch {
	case !e.Earned || e.Level != config.Auto:
		return nil, fmt.Errorf("trust-promote payload: %w: want earned = true and level = auto", ErrNotEntry)
	case len(e.Gates) == 0:
		return nil, fmt.Errorf("trust-promote payload: %w: it names no gates it rests on", ErrNotEntry)
	case e.Intent == intent.TrustPromote:
		return nil, fmt.Errorf("trust-promote payload: %w: trust-promote is never earned", ErrNotEntry)
	}
	return &e, nil
}

// checkFree refuses an entry that frees an address, URL or object field
// of its intent: free would let any value through, wider than any payload
// the owner approved, and Narrowest never makes such an entry.
func (e *Entry) checkFree(org *config.Org) error {
	fields, _ := org.Fields(e.Intent)
	for _, k := range e.Free {
		typ := fields[k]
		if typ == payload.Address || typ == payload.Addresses || typ == payload.URL || !payload.Matchable(typ) {
			return fmt.Errorf("trust-promote payload: %w: field %q (%s) is free; an earned entry never frees an address, URL or object field", ErrNotEntry, k, typ)
		}
	}
	return nil
}

// decided returns the transition that decided g (approved or denied) and
// whether there is one.
func decided(g *gate.Gate) (state.Transition, bool) {
	for _, h := range g.History {
		if h.To == state.Approved || h.To == state.Denied {
			return h, true
		}
	}
	return state.Transition{}, false
}

// byOwner reports whether a decision was the owner's at the desk, not a
// trust entry's.
func byOwner(h state.Transition) bool {
	return !strings.HasPrefix(h.By, "trust: ")
}

// proposed reports whether g was proposed by its imp through impgw, the
// only gates the ladder ever decides.
func proposed(g *gate.Gate) bool {
	return len(g.History) > 0 && g.History[0].Actor == "impgw"
}

// ErrStreakBroken is a trust-promote gate whose approvals the owner has
// broken since it was filed, by denying a gate of the same (imp, intent).
var ErrStreakBroken = errors.New("the owner has denied that kind of gate since this promotion was filed")

// brokenBy returns the first of imp's gates of intent in, proposed
// through impgw, that the owner denied at or after since (a deny in the
// same second as the filing counts as after it, so it is never outrun),
// or nil.
func brokenBy(y *yard.Yard, imp, in string, since time.Time) (*gate.Gate, time.Time, error) {
	var first *gate.Gate
	var at time.Time
	bad, err := gate.Each(y, gate.Filter{All: true, Imp: imp}, func(g *gate.Gate) error {
		if g.Intent != in || !proposed(g) {
			return nil
		}
		h, ok := decided(g)
		if !ok || h.To != state.Denied || !byOwner(h) || h.At.Before(since) {
			return nil
		}
		if first == nil || h.At.Before(at) {
			first, at = g, h.At
		}
		return nil
	})
	if err == nil {
		err = errors.Join(bad...)
	}
	if err != nil {
		return nil, time.Time{}, fmt.Errorf("looking for denies of %s %s: %w", imp, in, err)
	}
	return first, at, nil
}

// Broke returns the trust-promote gate of g's (imp, intent) that waits
// for the owner and that the owner's deny of g broke (see Append): g was
// proposed by its imp and denied at or after that gate was filed. Nil
// when there is none.
func Broke(y *yard.Yard, g *gate.Gate) (*gate.Gate, error) {
	h, ok := decided(g)
	if g.Intent == intent.TrustPromote || !proposed(g) || !ok || h.To != state.Denied || !byOwner(h) {
		return nil, nil
	}
	_, waiting, err := Streak(y, g.Imp, g.Intent)
	if err != nil || waiting == nil || h.At.Before(waiting.Created) {
		return nil, err
	}
	return waiting, nil
}

// Streak returns the gates of (imp, intent) that count toward promotion
// now, oldest decision first, and the trust-promote gate of that (imp,
// intent) still waiting for the owner, if any. Decisions are ordered by
// time; of two in the same second a deny counts as the later, so a deny
// is never outrun.
func Streak(y *yard.Yard, imp, in string) (streak []*gate.Gate, waiting *gate.Gate, err error) {
	all, bad := gate.List(y, gate.Filter{All: true, Imp: imp})
	if len(bad) > 0 {
		return nil, nil, fmt.Errorf("counting approvals of %s %s: %w", imp, in, errors.Join(bad...))
	}
	var cut time.Time
	type decision struct {
		g  *gate.Gate
		h  state.Transition
		no bool
	}
	var ds []decision
	for _, g := range all {
		if g.Intent == intent.TrustPromote {
			e, err := Parse(g.Payload)
			if err != nil || e.Intent != in {
				continue
			}
			if g.State == state.Filed {
				waiting = g
			}
			at := g.Created
			if h, ok := decided(g); ok {
				at = h.At
			}
			if at.After(cut) {
				cut = at
			}
			continue
		}
		if g.Intent != in || !proposed(g) {
			continue
		}
		h, ok := decided(g)
		if !ok || !byOwner(h) {
			continue
		}
		ds = append(ds, decision{g: g, h: h, no: h.To == state.Denied})
	}
	slices.SortStableFunc(ds, func(a, b decision) int {
		if c := a.h.At.Compare(b.h.At); c != 0 {
			return c
		}
		switch {
		case a.no == b.no:
			return strings.Compare(a.g.ID, b.g.ID)
		case a.no:
			return 1
		}
		return -1
	})
	for _, d := range ds {
		switch {
		case !d.h.At.After(cut):
		case d.no:
			streak = nil
		case d.g.State == state.Executed:
			streak = append(streak, d.g)
		}
	}
	return streak, waiting, nil
}

// ErrNotDerived is a trust-promote gate whose entry is not the one the
// owner's approvals derive: a gate written or edited by hand.
var ErrNotDerived = errors.New("not the entry the owner's approvals derive")

// Derive recomputes the entry that the trust-promote gate g may append
// from the gates themselves, trusting nothing in g's payload but the ids
// of the gates it names: exactly [[earn]] after of them, each a proposal
// of g's (imp, intent) approved by the owner (its approval verifies with
// kr, by a key other than the gateway's) and executed; none decided
// before a promotion filed before g consumed it; no approval of that
// (imp, intent) decided between them left out; no deny by the owner at
// or after the first of them (ErrStreakBroken). The entry is the
// narrowest covering them (Narrowest), their ids in decision order.
func Derive(y *yard.Yard, org *config.Org, kr *approval.Keyring, g *gate.Gate) (*Entry, error) {
	claimed, err := Parse(g.Payload)
	if err != nil {
		return nil, err
	}
	in := claimed.Intent
	notDerived := func(format string, a ...any) error {
		return fmt.Errorf("trust-promote gate %s: %w: %s", g.ID, ErrNotDerived, fmt.Sprintf(format, a...))
	}
	want := org.EarnFor(g.Imp, in)
	if want == nil {
		return nil, notDerived("org.toml has no [[earn]] entry for %s %s", g.Imp, in)
	}
	if len(claimed.Gates) != want.After {
		return nil, notDerived("it rests on %d gates, [[earn]] for %s %s asks for %d", len(claimed.Gates), g.Imp, in, want.After)
	}
	all, bad := gate.List(y, gate.Filter{All: true, Imp: g.Imp})
	if len(bad) > 0 {
		return nil, fmt.Errorf("checking trust-promote gate %s: %w", g.ID, errors.Join(bad...))
	}
	named := map[string]bool{}
	for _, id := range claimed.Gates {
		named[id] = true
	}
	type rest struct {
		g  *gate.Gate
		at time.Time
	}
	var rests []rest
	var cut time.Time
	var approvals []rest // every approval by the owner of (imp, in), executed
	for _, o := range all {
		h, ok := decided(o)
		if o.Intent == intent.TrustPromote {
			e, err := Parse(o.Payload)
			if err != nil || e.Intent != in || o.ID == g.ID || o.Created.After(g.Created) {
				continue
			}
			at := o.Created
			if ok {
				at = h.At
			}
			if at.After(cut) {
				cut = at
			}
			continue
		}
		if o.Intent != in || !proposed(o) || !ok || h.To != state.Approved || !byOwner(h) || o.State != state.Executed {
			if named[o.ID] {
				return nil, notDerived("gate %s is not a proposal of %s %s approved by the owner and executed", o.ID, g.Imp, in)
			}
			continue
		}
		approvals = append(approvals, rest{o, h.At})
		if named[o.ID] {
			rests = append(rests, rest{o, h.At})
			delete(named, o.ID)
		}
	}
	if len(named) > 0 {
		return nil, notDerived("it names gates that are not among %s's: %v", g.Imp, slices.Sorted(maps.Keys(named)))
	}
	order := func(a, b rest) int {
		if c := a.at.Compare(b.at); c != 0 {
			return c
		}
		return strings.Compare(a.g.ID, b.g.ID)
	}
	slices.SortStableFunc(rests, order)
	first, last := rests[0].at, rests[len(rests)-1].at
	if !first.After(cut) {
		return nil, notDerived("gate %s was decided before an earlier trust-promote gate of %s %s was, which consumed it", rests[0].g.ID, g.Imp, in)
	}
	for _, a := range approvals {
		if a.at.After(first) && a.at.Before(last) && !slices.ContainsFunc(rests, func(r rest) bool { return r.g.ID == a.g.ID }) {
			return nil, notDerived("it leaves out gate %s, approved between the gates it rests on", a.g.ID)
		}
	}
	d, at, err := brokenBy(y, g.Imp, in, first)
	if err != nil {
		return nil, err
	}
	if d != nil {
		return nil, fmt.Errorf("trust-promote gate %s: the owner denied gate %s of %s %s at %s: %w",
			g.ID, d.ID, g.Imp, in, at.UTC().Format(time.RFC3339), ErrStreakBroken)
	}
	gates := make([]*gate.Gate, len(rests))
	for i, r := range rests {
		key, err := r.g.VerifyApproval(kr)
		if err != nil {
			return nil, fmt.Errorf("trust-promote gate %s rests on gate %s: %w", g.ID, r.g.ID, err)
		}
		if key.Name == approval.Gateway {
			return nil, notDerived("gate %s was approved with the gateway's key, not by the owner", r.g.ID)
		}
		gates[i] = r.g
	}
	return Narrowest(org, in, gates)
}

// Check refuses the payload body of the trust-promote gate g unless it is
// exactly the entry Derive derives, and says how the two differ.
func Check(y *yard.Yard, org *config.Org, kr *approval.Keyring, g *gate.Gate, body []byte) error {
	claimed, err := Parse(body)
	if err != nil {
		return err
	}
	derived, err := Derive(y, org, kr, g)
	if err != nil {
		return err
	}
	a, _ := json.Marshal(claimed)
	b, _ := json.Marshal(derived)
	if !bytes.Equal(a, b) {
		return fmt.Errorf("trust-promote gate %s: %w: it proposes %s, the approvals it rests on derive %s", g.ID, ErrNotDerived, a, b)
	}
	return nil
}

// Narrowest returns the narrowest auto entry for intent that covers every
// one of gates' payloads: each field present in all of them and always
// the same is matched exactly; an address field is matched by its exact
// addresses (up to MaxAddresses, else their one common domain); any other
// field is free only where it varied or was sometimes absent. An address
// field that is absent from some payload, or whose addresses share no
// domain past MaxAddresses, has no narrow entry: an earned entry never
// lets an address through as free.
func Narrowest(org *config.Org, in string, gates []*gate.Gate) (*Entry, error) {
	fields, typed := org.Fields(in)
	if !typed {
		return nil, fmt.Errorf("intent %s declares no fields: %w", in, ErrNoNarrowEntry)
	}
	e := &Entry{Intent: in, Level: config.Auto, Earned: true, Match: map[string]string{}}
	docs := make([]map[string]json.RawMessage, len(gates))
	keys := map[string]bool{}
	for i, g := range gates {
		e.Gates = append(e.Gates, g.ID)
		if err := json.Unmarshal(g.Payload, &docs[i]); err != nil {
			return nil, fmt.Errorf("gate %s: payload: %w", g.ID, err)
		}
		for k := range docs[i] {
			keys[k] = true
		}
	}
	for _, k := range slices.Sorted(maps.Keys(keys)) {
		typ := fields[k]
		address := typ == payload.Address || typ == payload.Addresses
		var first, seen []string
		present, same := 0, true
		for i, d := range docs {
			raw, ok := d[k]
			if !ok {
				if address {
					return nil, fmt.Errorf("address field %q is absent from gate %s: %w", k, gates[i].ID, ErrNoNarrowEntry)
				}
				continue
			}
			vals, err := payload.Strings(typ, raw)
			if err != nil {
				return nil, fmt.Errorf("gate %s: field %q: %w", gates[i].ID, k, err)
			}
			if present == 0 {
				first = vals
			} else if !slices.Equal(vals, first) {
				same = false
			}
			present++
			seen = append(seen, vals...)
		}
		switch {
		case address:
			g, err := addressGlob(seen)
			if err != nil {
				return nil, fmt.Errorf("address field %q: %w", k, err)
			}
			e.Match[k] = g
		case present == len(docs) && same && payload.Matchable(typ) && len(first) == 1:
			e.Match[k] = quote(first[0])
		case !payload.Matchable(typ) || typ == payload.URL:
			// Free would mean any object, or any URL: wider than any
			// of the payloads the owner approved.
			return nil, fmt.Errorf("field %q (%s) varied or cannot be matched, and free would allow any value: %w", k, typ, ErrNoNarrowEntry)
		default:
			e.Free = append(e.Free, k)
		}
	}
	if len(e.Match) == 0 {
		e.Match = nil
	}
	t := e.Trust()
	if err := org.CheckTrust(t); err != nil {
		return nil, err
	}
	for _, g := range gates {
		if !trust.Covers(org, t, in, g.Payload) {
			return nil, fmt.Errorf("the entry made does not cover gate %s: %w", g.ID, ErrNoNarrowEntry)
		}
	}
	return e, nil
}

// addressGlob matches exactly the addresses given, or past MaxAddresses
// any address at their one common domain.
func addressGlob(addrs []string) (string, error) {
	slices.Sort(addrs)
	addrs = slices.Compact(addrs)
	if len(addrs) == 1 {
		return quote(addrs[0]), nil
	}
	if len(addrs) <= MaxAddresses {
		q := make([]string, len(addrs))
		for i, a := range addrs {
			q[i] = strings.ReplaceAll(quote(a), ",", `\,`)
		}
		return "{" + strings.Join(q, ",") + "}", nil
	}
	domain := ""
	for _, a := range addrs {
		d := a[strings.LastIndexByte(a, '@')+1:]
		if domain != "" && d != domain {
			return "", fmt.Errorf("%d addresses at more than one domain: %w", len(addrs), ErrNoNarrowEntry)
		}
		domain = d
	}
	return "*@" + quote(domain), nil
}

// quote makes a glob that matches s and nothing else.
func quote(s string) string { return glob.QuoteMeta(s) }
