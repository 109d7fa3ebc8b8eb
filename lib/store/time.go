package store

import "time"

// The yard writes every time as RFC 3339 in UTC with whole seconds and a
// Z, the form jq's fromdateiso8601 reads ("2026-11-30T12:00:00Z"). Where
// order or latency below a second matters, a record carries the instant
// again in a separate number of unix milliseconds (ts_ms), never as
// fractional seconds. Readers take both: Go parses a time with a fraction
// as well as one without, so files written before keep working.

// TimeLayout is the layout of a time in a yard file.
const TimeLayout = "2006-01-02T15:04:05Z"

// Now is the current time as the yard records it: UTC, whole seconds.
func Now() time.Time { return Second(time.Now()) }

// Second is t as the yard records it: UTC, truncated to the second. A
// time.Time so truncated marshals to JSON in the yard's form.
func Second(t time.Time) time.Time { return t.UTC().Truncate(time.Second) }

// FormatTime writes t in the yard's form.
func FormatTime(t time.Time) string { return Second(t).Format(TimeLayout) }

// AppendTime appends t in the yard's form, unquoted. The gateway writes
// two per request: the digits are put down directly, and only a year
// outside 1-9999 goes through the layout.
func AppendTime(b []byte, t time.Time) []byte {
	t = t.UTC()
	year, month, day := t.Date()
	if year < 1 || year > 9999 {
		return Second(t).AppendFormat(b, TimeLayout)
	}
	hour, minute, sec := t.Clock()
	b = append(b, byte('0'+year/1000), byte('0'+year/100%10), byte('0'+year/10%10), byte('0'+year%10), '-')
	b = append2(b, int(month), '-')
	b = append2(b, day, 'T')
	b = append2(b, hour, ':')
	b = append2(b, minute, ':')
	return append2(b, sec, 'Z')
}

// append2 appends n (0-99) in two digits, then sep.
func append2(b []byte, n int, sep byte) []byte {
	return append(b, byte('0'+n/10), byte('0'+n%10), sep)
}

// Millis is t in unix milliseconds, the sub-second companion of a time.
func Millis(t time.Time) int64 { return t.UnixMilli() }

// FromMillis is the instant of a unix-millisecond field, in UTC.
func FromMillis(ms int64) time.Time { return time.UnixMilli(ms).UTC() }
