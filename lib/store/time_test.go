package store

import (
	"math/rand/v2"
	"testing"
	"time"
)

// TestAppendTimeIsTheLayout holds AppendTime's hand-set digits to the
// layout's rendering, across the years it writes directly, the ones
// outside them, zones other than UTC and sub-second parts.
func TestAppendTimeIsTheLayout(t *testing.T) {
	times := []time.Time{
		{},
		time.Date(0, 1, 1, 0, 0, 0, 0, time.UTC),
		time.Date(9999, 12, 31, 23, 59, 59, 999999999, time.UTC),
		time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC),
		time.Date(-1, 6, 15, 12, 30, 45, 0, time.UTC),
		time.Date(2026, 12, 1, 0, 59, 59, 999000000, time.FixedZone("east", 5*3600+30*60)),
		time.Date(2026, 1, 1, 0, 0, 0, 1, time.FixedZone("west", -8*3600)),
	}
	r := rand.New(rand.NewPCG(1, 2))
	for range 2000 {
		times = append(times, time.Unix(r.Int64N(300000000000)-62135596800, r.Int64N(1e9)).In(time.FixedZone("z", r.IntN(50000)-25000)))
	}
	for _, tm := range times {
		want := Second(tm).Format(TimeLayout)
		if got := string(AppendTime([]byte("x"), tm)); got != "x"+want {
			t.Fatalf("AppendTime(%v) = %q, want %q", tm, got, "x"+want)
		}
	}
}
