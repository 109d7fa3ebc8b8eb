package id

import (
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
)

// MinPrefix is the fewest characters after the kind and dash that name an
// id by a prefix. The first characters are the id's creation time, so a
// shorter prefix matches most of a yard's ids, and a prefix that happens
// to be unique today is ambiguous after the next id is made.
const MinPrefix = 4

// maxCandidates bounds how many ids an ambiguous prefix lists.
const maxCandidates = 10

// ErrAmbiguous is a prefix that begins more than one id.
var ErrAmbiguous = errors.New("ambiguous")

// ErrShortPrefix is a prefix with fewer than MinPrefix characters after
// the kind and dash.
var ErrShortPrefix = errors.New("too short")

// ErrNoMatch is a prefix that begins no id. The error Resolve returns for
// one is also an os.ErrNotExist, like a whole id that names no file.
var ErrNoMatch = errors.New("no match")

type noMatch struct{ kind string }

func (e noMatch) Error() string      { return "no such " + kindName(e.kind) }
func (noMatch) Is(target error) bool { return target == ErrNoMatch || target == os.ErrNotExist }

// CheckPrefix checks the shape of s as Resolve takes it, a whole id of
// kind or a prefix of one, with no lookup; it returns s with the kind
// and dash put in front when left off. A prefix shorter than MinPrefix
// wraps ErrShortPrefix.
func CheckPrefix(kind, s string) (string, error) {
	if wellFormed(s) && s[:1] == kind {
		return s, nil
	}
	p := s
	if !strings.HasPrefix(p, kind+"-") {
		p = kind + "-" + p
	}
	if len(p) > 18 || !wellFormed(p+strings.Repeat("0", 18-len(p))) {
		return "", Check(kind, s)
	}
	if len(p) < 18 && len(p)-2 < MinPrefix {
		return "", fmt.Errorf("%s id prefix %q is %w: give at least %d characters after %q", kindName(kind), s, ErrShortPrefix, MinPrefix, kind+"-")
	}
	return p, nil
}

// Shortest maps each of ids to its shortest prefix that begins no other
// of them and has at least MinPrefix characters after the kind and dash,
// the abbreviation a listing shows and Resolve takes back. ids need not
// be sorted; it should hold every id a prefix could match, not only
// those listed, or an abbreviation shown could be ambiguous.
func Shortest(ids []string) map[string]string {
	sorted := slices.Clone(ids)
	slices.Sort(sorted)
	sorted = slices.Compact(sorted)
	common := func(a, b string) int {
		n := 0
		for n < len(a) && n < len(b) && a[n] == b[n] {
			n++
		}
		return n
	}
	out := make(map[string]string, len(sorted))
	for i, s := range sorted {
		n := 2 + MinPrefix
		if i > 0 {
			n = max(n, common(s, sorted[i-1])+1)
		}
		if i+1 < len(sorted) {
			n = max(n, common(s, sorted[i+1])+1)
		}
		out[s] = s[:min(n, len(s))]
	}
	return out
}

// Resolve returns the whole id of the given kind that s names: s itself
// when it is a whole id (whether or not it exists; the caller's lookup
// says), else the one id among names that begins with s. The kind and
// dash may be left off a prefix ("01jf8k2m" for "g-01jf8k2m"). names is
// called only for a prefix; ids in it of another kind are ignored. A
// prefix that begins no id wraps ErrNoMatch, one that begins several
// ErrAmbiguous and lists them; where, the directory names lists, is named
// in the first of these errors; both are checked for shape first, and a
// prefix shorter than MinPrefix wraps ErrShortPrefix.
func Resolve(kind, s, where string, names func() ([]string, error)) (string, error) {
	p, err := CheckPrefix(kind, s)
	if err != nil || len(p) == 18 {
		return p, err
	}
	all, err := names()
	if err != nil {
		return "", err
	}
	var found []string
	for _, n := range all {
		if strings.HasPrefix(n, p) && wellFormed(n) && n[:1] == kind {
			found = append(found, n)
		}
	}
	slices.Sort(found)
	found = slices.Compact(found)
	switch len(found) {
	case 0:
		return "", fmt.Errorf("%s %s: %w in %s", kindName(kind), p, noMatch{kind}, where)
	case 1:
		return found[0], nil
	}
	list := found
	more := ""
	if len(list) > maxCandidates {
		more = fmt.Sprintf(" and %d more", len(list)-maxCandidates)
		list = list[:maxCandidates]
	}
	return "", fmt.Errorf("%s id prefix %s is %w: it begins %s%s", kindName(kind), p, ErrAmbiguous, strings.Join(list, ", "), more)
}
