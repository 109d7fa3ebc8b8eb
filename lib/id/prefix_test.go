package id

import (
	"errors"
	"os"
	"strings"
	"testing"
)

func TestResolve(t *testing.T) {
	names := []string{"g-01m8qpf3kf64ff15", "g-01m8qpf3r92c0g0r", "t-01m8qpf3kf64ff99", "g-01m8qpf3kf64ff15", ".lock"}
	listed := 0
	list := func() ([]string, error) { listed++; return names, nil }
	for _, tc := range []struct {
		in, want string
		err      error
		msg      string
	}{
		{"g-01m8qpf3kf64ff15", "g-01m8qpf3kf64ff15", nil, ""},
		{"g-zzzzzzzzzzzzzzzz", "g-zzzzzzzzzzzzzzzz", nil, ""}, // whole: the lookup says whether it exists
		{"g-01m8qpf3k", "g-01m8qpf3kf64ff15", nil, ""},
		{"01m8qpf3r", "g-01m8qpf3r92c0g0r", nil, ""},
		{"01m8qpf3r92c0g0r", "g-01m8qpf3r92c0g0r", nil, ""},
		{"zzzzzzzzzzzzzzzz", "g-zzzzzzzzzzzzzzzz", nil, ""},
		{"g-01m8", "", ErrAmbiguous, "gate id prefix g-01m8 is ambiguous: it begins g-01m8qpf3kf64ff15, g-01m8qpf3r92c0g0r"},
		{"g-01m", "", ErrShortPrefix, `gate id prefix "g-01m" is too short: give at least 4 characters after "g-"`},
		{"g-zzzz", "", ErrNoMatch, "gate g-zzzz: no such gate in gates"},
		{"g-../x", "", nil, "invalid gate id"},
		{"g-01M8", "", nil, "invalid gate id"},
		{"g-01m8qpf3kf64ff15x", "", nil, "invalid gate id"},
		{"t-01m8qpf3", "", nil, "invalid gate id"},
	} {
		got, err := Resolve(Gate, tc.in, "gates", list)
		switch {
		case tc.msg == "" && (err != nil || got != tc.want):
			t.Errorf("Resolve(%q) = %q, %v; want %q", tc.in, got, err, tc.want)
		case tc.msg != "" && (err == nil || !strings.Contains(err.Error(), tc.msg) || got != ""):
			t.Errorf("Resolve(%q) = %q, %v; want an error with %q", tc.in, got, err, tc.msg)
		case tc.err != nil && !errors.Is(err, tc.err):
			t.Errorf("Resolve(%q): %v is not %v", tc.in, err, tc.err)
		}
	}
	if _, err := Resolve(Gate, "g-zzzz", "gates", list); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("no match: %v is not os.ErrNotExist", err)
	}
	listed = 0
	if _, err := Resolve(Gate, "g-01m8qpf3kf64ff15", "gates", list); err != nil || listed != 0 {
		t.Errorf("a whole id listed the directory %d times (%v)", listed, err)
	}
	boom := errors.New("unreadable")
	if _, err := Resolve(Gate, "g-01m8", "gates", func() ([]string, error) { return nil, boom }); !errors.Is(err, boom) {
		t.Errorf("a listing error is lost: %v", err)
	}
}

func TestResolveManyCandidates(t *testing.T) {
	var names []string
	for i := 0; i < 12; i++ {
		names = append(names, "g-01m8qpf3kf64ff"+string(alphabet[i])+"0")
	}
	_, err := Resolve(Gate, "g-01m8", "gates", func() ([]string, error) { return names, nil })
	if err == nil || !strings.HasSuffix(err.Error(), "g-01m8qpf3kf64ff90 and 2 more") {
		t.Errorf("got %v; want ten candidates and 2 more", err)
	}
}

// TestResolvePassesOverCraftedNames: names in the directory that only
// look like ids (one short, one long, with a suffix, with a path, of
// another kind) neither match a prefix nor make it ambiguous.
func TestResolvePassesOverCraftedNames(t *testing.T) {
	names := []string{"g-01m8qpf3kf64ff1", "g-01m8qpf3kf64ff15x", "g-01m8qpf3kf64ff15.json", "g-01m8qpf3kf/../x", "t-01m8qpf3kf64ff15", "g-01m8qpf3kf64ff15"}
	got, err := Resolve(Gate, "g-01m8qpf3kf", "gates", func() ([]string, error) { return names, nil })
	if err != nil || got != "g-01m8qpf3kf64ff15" {
		t.Errorf("Resolve among crafted names = %q, %v; want the one real id", got, err)
	}
}

// Shortest gives each id the fewest characters that begin no other, never
// fewer than MinPrefix after the dash, and Resolve takes each back to its id.
func TestShortest(t *testing.T) {
	ids := []string{"g-01m8tg16agjyf77k", "g-01m8tg16agjzaaaa", "g-01m8zzzzzzzzzzzz", "g-01m9000000000000", "g-7zzzzzzzzzzzzzzz"}
	want := map[string]string{
		"g-01m8tg16agjyf77k": "g-01m8tg16agjy",
		"g-01m8tg16agjzaaaa": "g-01m8tg16agjz",
		"g-01m8zzzzzzzzzzzz": "g-01m8z",
		"g-01m9000000000000": "g-01m9",
		"g-7zzzzzzzzzzzzzzz": "g-7zzz",
	}
	got := Shortest(append(ids, ids[0]))
	if len(got) != len(want) {
		t.Fatalf("got %d abbreviations, want %d: %v", len(got), len(want), got)
	}
	for full, short := range want {
		if got[full] != short {
			t.Errorf("Shortest(%s) = %q, want %q", full, got[full], short)
		}
		back, err := Resolve(Gate, got[full], "gates", func() ([]string, error) { return ids, nil })
		if err != nil || back != full {
			t.Errorf("Resolve(%q) = %q, %v; want %s", got[full], back, err, full)
		}
	}
	if _, err := Resolve(Gate, "g-01m8tg16agj", "gates", func() ([]string, error) { return ids, nil }); !errors.Is(err, ErrAmbiguous) ||
		!strings.Contains(err.Error(), "g-01m8tg16agjyf77k, g-01m8tg16agjzaaaa") {
		t.Errorf("one character short of both: %v; want ambiguous naming both", err)
	}
}
