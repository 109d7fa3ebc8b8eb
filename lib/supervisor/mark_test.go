package supervisor

import (
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/impyard/impyard/lib/store"
)

// logTo collects what the supervisor logs.
func logTo(s *Supervisor) func() []string {
	var mu sync.Mutex
	var lines []string
	s.Logf = func(format string, a ...any) {
		mu.Lock()
		lines = append(lines, fmt.Sprintf(format, a...))
		mu.Unlock()
	}
	return func() []string {
		mu.Lock()
		defer mu.Unlock()
		return append([]string(nil), lines...)
	}
}

func naming(lines []string, path string) int {
	n := 0
	for _, l := range lines {
		if strings.Contains(l, path) {
			n++
		}
	}
	return n
}

// TestScheduleDamagedMarker: an empty or torn .schedule marker (a crash
// mid-write) used to silence the schedule for good, with nothing logged.
// It is now logged once, naming the file, and replaced, so the schedule
// fires when due, still without stacking.
func TestScheduleDamagedMarker(t *testing.T) {
	for name, content := range map[string]string{
		"empty":     "",
		"torn":      "2026-11-30T08:0",
		"torn-json": `{"schema":"impyard.mark/1","at":"2026-11-30T0`,
	} {
		t.Run(name, func(t *testing.T) {
			s, now := newSup(t)
			logs := logTo(s)
			writeImp(t, s.Yard, "yuko", "command = [\"x\"]\nschedule = \"*/10 * * * *\"\n")
			s.schedules() // first sight, 08:00:30
			p := s.Yard.Path("queue", "yuko", scheduleMark)
			if err := os.WriteFile(p, []byte(content), 0o640); err != nil {
				t.Fatal(err)
			}
			if err := os.Chtimes(p, *now, *now); err != nil {
				t.Fatal(err)
			}
			*now = now.Add(10 * time.Minute) // 08:10:30: due
			s.schedules()
			if n := len(tasks(t, s.Yard, "yuko")); n != 1 {
				t.Fatalf("%d tasks after the due time, want 1; log:\n%s", n, strings.Join(logs(), "\n"))
			}
			if naming(logs(), p) != 1 {
				t.Fatalf("log does not name %s once:\n%s", p, strings.Join(logs(), "\n"))
			}
			b, err := store.ReadFile(p)
			if err != nil || !strings.Contains(string(b), `"schema": "impyard.mark/1"`) {
				t.Errorf("marker after the pass: %q, %v", b, err)
			}
			*now = now.Add(10 * time.Minute) // due again; the first still waits
			s.schedules()
			if n := len(tasks(t, s.Yard, "yuko")); n != 1 {
				t.Errorf("stacked: %d tasks", n)
			}
			if naming(logs(), p) != 1 {
				t.Errorf("logged again:\n%s", strings.Join(logs(), "\n"))
			}
		})
	}
}

// TestScheduleMarkerFromNewerImpyard: a marker of an unknown major is
// left alone and logged once, not rewritten.
func TestScheduleMarkerFromNewerImpyard(t *testing.T) {
	s, now := newSup(t)
	logs := logTo(s)
	writeImp(t, s.Yard, "yuko", "command = [\"x\"]\nschedule = \"*/10 * * * *\"\n")
	s.schedules()
	p := s.Yard.Path("queue", "yuko", scheduleMark)
	newer := `{"schema":"impyard.mark/2","at":"2026-11-30T08:00:00Z"}`
	os.WriteFile(p, []byte(newer), 0o640)
	for range 3 {
		*now = now.Add(10 * time.Minute)
		s.schedules()
	}
	if b, _ := os.ReadFile(p); string(b) != newer {
		t.Errorf("rewrote a newer marker: %s", b)
	}
	if naming(logs(), p) != 1 {
		t.Errorf("want one log line naming %s:\n%s", p, strings.Join(logs(), "\n"))
	}
}

// TestLastRunDamagedMarker: a torn .lastrun is logged, naming the file,
// and replaced by the time it was last written.
func TestLastRunDamagedMarker(t *testing.T) {
	s, now := newSup(t)
	logs := logTo(s)
	if err := s.writeMark("yuko", lastRunMark, *now); err != nil {
		t.Fatal(err)
	}
	p := s.Yard.Path("queue", "yuko", lastRunMark)
	os.WriteFile(p, []byte(`{"schema":"impyard.mark/1","at":"20`), 0o640)
	ended := now.Add(-time.Hour)
	os.Chtimes(p, ended, ended)
	if got := s.lastRunTime("yuko"); !got.Equal(ended) {
		t.Errorf("last run %v, want the marker's last change %v", got, ended)
	}
	if naming(logs(), p) != 1 {
		t.Errorf("want one log line naming %s:\n%s", p, strings.Join(logs(), "\n"))
	}
	if at, ok, err := s.readMark("yuko", lastRunMark); err != nil || !ok || !at.Equal(ended) {
		t.Errorf("marker not replaced: %v %v %v", at, ok, err)
	}
}
