package gateway

import (
	"regexp"
	"strings"
	"testing"
	"time"
)

// TestRecordTimes: a decision record and an outcome line write ts in
// whole seconds and ts_ms in unix milliseconds; the parsers take both, and
// lines from before ts_ms, whose ts has a fraction, as they are.
func TestRecordTimes(t *testing.T) {
	at := time.Date(2026, 11, 30, 12, 0, 0, 987654321, time.UTC)
	r := &Record{ID: "d1", Time: at, Verdict: VerdictAllow, Request: RequestInfo{Method: "GET", Host: "example.com"}}
	line, _ := r.MarshalJSON()
	out := r.appendOutcomeJSON(nil, at.Add(1500*time.Millisecond))
	whole := regexp.MustCompile(`"ts":"2026-11-30T12:00:0[02]Z","ts_ms":\d+,`)
	for _, l := range [][]byte{line, out} {
		if !whole.Match(l) || strings.Contains(string(l), ".98") {
			t.Errorf("times of %s", l)
		}
	}
	got, err := ParseRecord(line)
	if err != nil || !got.Time.Equal(at.Truncate(time.Millisecond)) {
		t.Errorf("parsed %v: %v, want %v", got.Time, err, at.Truncate(time.Millisecond))
	}
	o, err := ParseOutcome(out)
	if err != nil || !o.Time.Equal(at.Add(1500*time.Millisecond).Truncate(time.Millisecond)) {
		t.Errorf("outcome %v: %v", o.Time, err)
	}

	for _, c := range []struct {
		line string
		want time.Time
	}{
		// Before ts_ms: nanoseconds in ts.
		{`{"schema":"impyard.decision/1","decision_id":"d2","ts":"2026-11-30T12:00:00.123456789Z","verdict":"deny","rule":"","reason":"","request":{"method":"GET","host":"a"},"status":403,"bytes_in":0,"bytes_out":0}`,
			time.Date(2026, 11, 30, 12, 0, 0, 123456789, time.UTC)},
		// Whole seconds without ts_ms.
		{`{"schema":"impyard.decision/1","decision_id":"d3","ts":"2026-11-30T12:00:00Z","verdict":"deny","rule":"","reason":"","request":{"method":"GET","host":"a"},"status":403,"bytes_in":0,"bytes_out":0}`,
			time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)},
		// A ts_ms outside ts's second is not believed.
		{`{"schema":"impyard.decision/1","decision_id":"d4","ts":"2026-11-30T12:00:00Z","ts_ms":1,"verdict":"deny","rule":"","reason":"","request":{"method":"GET","host":"a"},"status":403,"bytes_in":0,"bytes_out":0}`,
			time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)},
	} {
		got, err := ParseRecord([]byte(c.line))
		if err != nil || !got.Time.Equal(c.want) {
			t.Errorf("%s: %v %v, want %v", c.line, got, err, c.want)
		}
	}
	o, err = ParseOutcome([]byte(`{"schema":"impyard.outcome/1","decision_id":"d2","ts":"2026-11-30T12:00:01.5Z","status":200,"bytes_in":1,"bytes_out":2}`))
	if err != nil || !o.Time.Equal(time.Date(2026, 11, 30, 12, 0, 1, 5e8, time.UTC)) {
		t.Errorf("old outcome: %+v %v", o, err)
	}
}
