package id

import (
	"bytes"
	"strings"
	"testing"
	"time"
)

func TestNewIsWellFormedAndSortable(t *testing.T) {
	prev := ""
	base := time.Date(2026, 11, 30, 5, 0, 0, 0, time.UTC)
	for i := 0; i < 1000; i++ {
		Now = func() time.Time { return base.Add(time.Duration(i) * time.Millisecond) }
		s := New(Task)
		if err := Check(Task, s); err != nil {
			t.Fatal(err)
		}
		if s <= prev {
			t.Fatalf("%s sorts before %s", s, prev)
		}
		if got := Time(s); !got.Equal(Now()) {
			t.Fatalf("Time(%s) = %v, want %v", s, got, Now())
		}
		prev = s
	}
	Now = time.Now
}

// TestSameMillisecond: ids made in one millisecond sort in the order they
// were made, whatever the random bytes say.
func TestSameMillisecond(t *testing.T) {
	at := time.Date(2026, 11, 30, 5, 0, 0, 0, time.UTC)
	Now = func() time.Time { return at }
	Rand = bytes.NewReader(bytes.Repeat([]byte{31, 31, 31, 31, 31, 30, 0, 0, 0, 0, 0, 0, 5, 5, 5, 5, 5, 5}, 1))
	defer func() { Now, Rand = time.Now, randReader }()
	a, b, c := New(Task), New(Task), New(Task)
	if a >= b {
		t.Errorf("%s %s do not sort in the order made", a, b)
	}
	if a[12:] != "zzzzzy" || b[12:] != "zzzzzz" {
		t.Errorf("%s %s: want the random part raised by one", a, b)
	}
	// Past the top of the range, order gives way; the id is still new.
	if c[12:] != "555555" || c == b || !Time(c).Equal(at) {
		t.Errorf("%s: want the fresh random part at the top of the range", c)
	}
}

func TestDeterministic(t *testing.T) {
	Now = func() time.Time { return time.UnixMilli(0) }
	Rand = bytes.NewReader(make([]byte, 6))
	defer func() { Now, Rand = time.Now, randReader }()
	if got := New(Gate); got != "g-0000000000000000" {
		t.Errorf("got %s", got)
	}
}

func TestCheck(t *testing.T) {
	for _, s := range []string{"", "t-", "t-../../etc/passwd", "t-0000000000000000/", "T-0000000000000000",
		"t-000000000000000u", "t-00000000000000000", "g-0000000000000000", "t_0000000000000000", "t-00000000000000\x000"} {
		if Check(Task, s) == nil {
			t.Errorf("Check(%q) accepted", s)
		}
	}
	if err := Check(Task, "t-0123456789abcdef"); err != nil {
		t.Error(err)
	}
	if KindOf("e-0123456789abcdef") != Entry || Check(Entry, "e-0123456789abcdef") != nil || Check(Entry, "m-0123456789abcdef") == nil {
		t.Error("memory entry ids")
	}
	if KindOf("g-0123456789abcdef") != Gate || KindOf("x") != "" {
		t.Error("KindOf")
	}
}

func TestCheckName(t *testing.T) {
	for _, s := range []string{"yuko", "a", "imp-2", strings.Repeat("a", 32)} {
		if err := CheckName(s); err != nil {
			t.Errorf("CheckName(%q) = %v", s, err)
		}
	}
	for _, s := range []string{"", "Yuko", "-x", "a/b", "..", "a.b", "ü", strings.Repeat("a", 33), "a b", "org"} {
		if CheckName(s) == nil {
			t.Errorf("CheckName(%q) accepted", s)
		}
	}
}

func FuzzCheck(f *testing.F) {
	f.Add("t-0123456789abcdef")
	f.Add("../x")
	f.Fuzz(func(t *testing.T, s string) {
		if Check(Task, s) == nil && (strings.ContainsAny(s, "/.\\\x00") || len(s) != 18) {
			t.Errorf("accepted %q", s)
		}
		if CheckName(s) == nil && strings.ContainsAny(s, "/.\\\x00 ") {
			t.Errorf("accepted name %q", s)
		}
	})
}
