package rate

import (
	"errors"
	"strings"
	"testing"
	"time"
)

func TestParse(t *testing.T) {
	for in, want := range map[string]Limit{
		"10/1h":   {10, time.Hour},
		" 3/30s":  {3, 30 * time.Second},
		"1/1m":    {1, time.Minute},
		"5/1h30m": {5, 90 * time.Minute},
	} {
		got, err := Parse(in)
		if err != nil || got != want {
			t.Errorf("Parse(%q) = %v, %v; want %v", in, got, err, want)
		}
		if got.String() != strings.TrimSpace(in) {
			t.Errorf("%v.String() = %q, want %q", got, got.String(), in)
		}
		if again, _ := Parse(got.String()); again != want {
			t.Errorf("%q does not read back: %v", got.String(), again)
		}
	}
	for _, in := range []string{"", "10", "10/", "/1h", "0/1h", "-1/1h", "x/1h", "10/h", "10/0s", "10/-1h", "2000000/1s"} {
		if _, err := Parse(in); !errors.Is(err, ErrSyntax) {
			t.Errorf("Parse(%q): %v, want ErrSyntax", in, err)
		}
	}
}

func TestWindow(t *testing.T) {
	var w Window
	l := Limit{N: 3, Period: time.Minute}
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	for i := range 3 {
		if ok, _ := w.Take("a", l, t0.Add(time.Duration(i)*time.Second)); !ok {
			t.Fatalf("event %d refused", i+1)
		}
	}
	ok, retry := w.Take("a", l, t0.Add(10*time.Second))
	if ok || retry != 50*time.Second {
		t.Fatalf("fourth in the minute: ok=%v retry=%v, want refused for 50s", ok, retry)
	}
	if ok, _ := w.Take("b", l, t0.Add(10*time.Second)); !ok {
		t.Fatal("another key shares the count")
	}
	// A refused event is not counted: the first leaves the window at
	// t0+1m, and one more fits then.
	if ok, _ := w.Take("a", l, t0.Add(time.Minute+time.Millisecond)); !ok {
		t.Fatal("refused after the oldest left the window")
	}
	if ok, _ := w.Take("a", l, t0.Add(time.Minute+2*time.Millisecond)); ok {
		t.Fatal("admitted a fourth within the window")
	}
	if ok, _ := w.Take("a", Limit{}, t0); !ok {
		t.Fatal("the zero limit refused")
	}
}

// A key idle past its own period is swept, but a key counted under a long
// period is not swept by the events of a short one.
func TestWindowSweepKeepsLongPeriods(t *testing.T) {
	var w Window
	long := Limit{N: 1, Period: time.Hour}
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	w.Take("slow", long, t0)
	short := Limit{N: 1000, Period: time.Second}
	for i := range 3000 {
		w.Take("fast", short, t0.Add(time.Minute+time.Duration(i)*time.Millisecond))
	}
	if ok, _ := w.Take("slow", long, t0.Add(2*time.Minute)); ok {
		t.Fatal("the hourly count was forgotten after a minute")
	}
}
