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

// AppendTime appends t in the yard's form, unquoted.
func AppendTime(b []byte, t time.Time) []byte { return Second(t).AppendFormat(b, TimeLayout) }

// Millis is t in unix milliseconds, the sub-second companion of a time.
func Millis(t time.Time) int64 { return t.UnixMilli() }

// FromMillis is the instant of a unix-millisecond field, in UTC.
func FromMillis(ms int64) time.Time { return time.UnixMilli(ms).UTC() }
