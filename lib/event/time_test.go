package event

import (
	"encoding/json"
	"regexp"
	"testing"
	"time"
)

// TestEventTimes: a line's ts is in whole seconds and ts_ms carries the
// millisecond; a line of an older impyard, whose ts has a fraction and no
// ts_ms, still reads, and Ensure still finds it.
func TestEventTimes(t *testing.T) {
	at := time.Date(2026, 11, 30, 12, 0, 0, 987654321, time.UTC)
	line, err := prepare(&Event{TS: at, Event: "note", Imp: "yuko", Actor: "box"})
	if err != nil {
		t.Fatal(err)
	}
	if !regexp.MustCompile(`"ts":"2026-11-30T12:00:00Z","ts_ms":1796040000987,`).Match(line) {
		t.Errorf("line %s", line)
	}
	old := []byte(`{"schema":"impyard.event/1","ts":"2026-11-30T05:47:39.123456789Z","event":"gate-approved","imp":"yuko","actor":"impgate","id":"g-01m8nfx70pjmyn2n","seq":2}`)
	var e Event
	if err := json.Unmarshal(old, &e); err != nil || e.TS.Nanosecond() != 123456789 || e.TSMS != 0 {
		t.Errorf("old line: %+v %v", e, err)
	}
	if ts, ok := timeOf(old); !ok || !ts.Equal(e.TS) {
		t.Errorf("timeOf old line: %v %v", ts, ok)
	}
	if ts, ok := timeOf(line); !ok || !ts.Equal(at.Truncate(time.Second)) {
		t.Errorf("timeOf new line: %v %v", ts, ok)
	}
}
