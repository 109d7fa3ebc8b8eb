package cli

import (
	"fmt"
	"strconv"
	"strings"
	"time"
)

// ParseSince reads a --since value relative to now, the same forms in
// every command that takes one: a duration back from
// now (90s, 15m, 2h, 1h30m, or whole days such as 7d), an RFC 3339 time,
// or a date (YYYY-MM-DD, midnight UTC).
func ParseSince(s string, now time.Time) (time.Time, error) {
	if n, ok := strings.CutSuffix(s, "d"); ok {
		if days, err := strconv.Atoi(n); err == nil && days > 0 {
			return now.Add(-time.Duration(days) * 24 * time.Hour), nil
		}
	}
	if d, err := time.ParseDuration(s); err == nil {
		if d <= 0 {
			return time.Time{}, fmt.Errorf("--since %s: a duration must be positive", s)
		}
		return now.Add(-d), nil
	}
	if t, err := time.Parse(time.RFC3339, s); err == nil {
		return t, nil
	}
	if t, err := time.Parse(time.DateOnly, s); err == nil {
		return t, nil
	}
	return time.Time{}, fmt.Errorf("--since %q: want a duration (15m, 2h, 7d), an RFC 3339 time or a date (YYYY-MM-DD)", s)
}
