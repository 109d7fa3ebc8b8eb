package supervisor

import (
	"os"
	"strings"
	"testing"
	"time"

	"github.com/impyard/impyard/lib/pause"
)

// TestScheduleSkippedWhilePaused: the times a schedule comes due while its
// imp is paused are journaled, each named, and not made up after resume;
// the next time after resume fires as usual.
func TestScheduleSkippedWhilePaused(t *testing.T) {
	s, now := newSup(t)
	writeImp(t, s.Yard, "yuko", "command = [\"x\"]\nschedule = \"@hourly\"\nschedule_task = \"digest\"\n")
	s.schedules() // first sight, 08:00:30
	if _, err := pause.Pause(s.Yard, pause.Change{Imps: []string{"yuko"}, Reason: "audit", By: "alice", At: *now}); err != nil {
		t.Fatal(err)
	}
	*now = now.Add(3 * time.Hour) // 11:00:30: 09:00, 10:00 and 11:00 came due
	s.schedules()
	if n := len(tasks(t, s.Yard, "yuko")); n != 0 {
		t.Fatalf("a paused schedule fired %d tasks", n)
	}
	j, _ := os.ReadFile(s.Yard.Path("journal", "yuko", "events.jsonl"))
	want := "schedule skipped 2026-11-30T09:00:00Z, 2026-11-30T10:00:00Z, 2026-11-30T11:00:00Z: imp yuko is paused (pause 1 by alice"
	if !strings.Contains(string(j), `"event":"schedule-skipped"`) || !strings.Contains(string(j), want) {
		t.Fatalf("journal does not record the skipped times (want %q):\n%s", want, j)
	}
	if _, err := pause.Resume(s.Yard, pause.Change{Imps: []string{"yuko"}, By: "alice", At: *now}); err != nil {
		t.Fatal(err)
	}
	*now = now.Add(10 * time.Minute) // 11:10:30
	s.schedules()
	if n := len(tasks(t, s.Yard, "yuko")); n != 0 {
		t.Fatalf("the skipped times were made up after resume: %d tasks", n)
	}
	*now = now.Add(time.Hour) // 12:10:30: 12:00 came due
	s.schedules()
	if n := len(tasks(t, s.Yard, "yuko")); n != 1 {
		t.Fatalf("after resume the schedule fired %d tasks, want 1", n)
	}
}
