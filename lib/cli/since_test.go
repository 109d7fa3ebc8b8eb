package cli

import (
	"testing"
	"time"
)

func TestParseSince(t *testing.T) {
	now := time.Date(2026, 7, 8, 12, 0, 0, 0, time.UTC)
	for in, want := range map[string]time.Time{
		"90m":                       now.Add(-90 * time.Minute),
		"30m":                       now.Add(-30 * time.Minute),
		"1h30m":                     now.Add(-90 * time.Minute),
		"2h":                        now.Add(-2 * time.Hour),
		"7d":                        now.Add(-7 * 24 * time.Hour),
		"2026-07-01T10:00:00Z":      time.Date(2026, 7, 1, 10, 0, 0, 0, time.UTC),
		"2026-07-01T12:00:00+02:00": time.Date(2026, 7, 1, 10, 0, 0, 0, time.UTC),
		"2026-07-01":                time.Date(2026, 7, 1, 0, 0, 0, 0, time.UTC),
	} {
		got, err := ParseSince(in, now)
		if err != nil || !got.Equal(want) {
			t.Errorf("ParseSince(%q) = %v, %v; want %v", in, got, err, want)
		}
	}
	for _, in := range []string{"", "yesterday", "-1h", "0s", "0d", "-3d", "2026-13-01", "1w"} {
		if _, err := ParseSince(in, now); err == nil {
			t.Errorf("ParseSince(%q): no error", in)
		}
	}
}
