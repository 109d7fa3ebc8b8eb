package config

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func loadImpText(t *testing.T, conf string) (*Imp, error) {
	t.Helper()
	y := yardWith(t, "")
	dir := y.Path("imps", "yuko")
	os.MkdirAll(dir, 0o750)
	if err := os.WriteFile(filepath.Join(dir, "imp.toml"), []byte(conf), 0o640); err != nil {
		t.Fatal(err)
	}
	return LoadImp(y, "yuko")
}

// TestSchedules: several [[schedule]] entries, each with its own key and
// defaults; the old single schedule key reads as one entry.
func TestSchedules(t *testing.T) {
	im, err := loadImpText(t, `command = ["x"]
repo = "/src/app"
[[schedule]]
cron = "0 8 * * 1"
task = "draft the weekly digest"
continue = true
[[schedule]]
cron = "@daily"
task = "fix the flaky test"
kind = "code"
proactive = false
[[schedule]]
cron = "@hourly"
`)
	if err != nil {
		t.Fatal(err)
	}
	l := im.Schedule.List
	if len(l) != 3 {
		t.Fatalf("entries: %+v", l)
	}
	if e := l[0]; e.Cron != "0 8 * * 1" || e.Task != "draft the weekly digest" || e.Kind != "research" || !e.Proactive || !e.Continue || e.Label() != "[[schedule]] #1" {
		t.Errorf("entry 1: %+v", e)
	}
	if e := l[1]; e.Kind != "code" || e.Proactive || e.Continue {
		t.Errorf("entry 2: %+v", e)
	}
	if e := l[2]; e.Task != "" || !e.Proactive {
		t.Errorf("entry 3: %+v", e)
	}
	if l[0].Key == "" || l[0].Key == l[1].Key || l[1].Key == l[2].Key {
		t.Errorf("keys %q %q %q: want three, all different", l[0].Key, l[1].Key, l[2].Key)
	}

	// As before [[schedule]]: an empty schedule, or a task text with no
	// schedule, is no schedule, not an imp that fails to load.
	for _, text := range []string{"command = [\"x\"]\nschedule = \"\"\n", "command = [\"x\"]\nschedule_task = \"weekly digest\"\n"} {
		if im, err := loadImpText(t, text); err != nil || len(im.Schedule.List) != 0 {
			t.Errorf("%q: %+v %v, want no schedule", text, im, err)
		}
	}
	im, err = loadImpText(t, "command = [\"x\"]\nschedule = \"*/10 * * * *\"\nschedule_task = \"weekly digest\"\n")
	if err != nil {
		t.Fatal(err)
	}
	if l := im.Schedule.List; len(l) != 1 || l[0].Cron != "*/10 * * * *" || l[0].Task != "weekly digest" || !l[0].Proactive || l[0].Continue || l[0].Key != "" || l[0].Label() != "schedule" {
		t.Errorf("the old single schedule: %+v", l)
	}
	if im, err := loadImpText(t, "command = [\"x\"]\n"); err != nil || len(im.Schedule.List) != 0 {
		t.Errorf("no schedule: %+v %v", im, err)
	}
}

// TestSchedulesRefused: every mistake names the file, its line and the
// entry. A mistake in one entry skips that entry (Bad), and the file
// still loads with the others, so impq add for the imp goes on; a mistake
// in the file's form refuses the file.
func TestSchedulesRefused(t *testing.T) {
	for _, c := range []struct{ name, conf, want string }{
		{"bad cron in the second entry", "[[schedule]]\ncron = \"@daily\"\n[[schedule]]\ncron = \"every tuesday\"\n",
			`imp.toml:5: key "cron": [[schedule]] #2: invalid cron expression "every tuesday"`},
		{"no cron", "[[schedule]]\ncron = \"@daily\"\n[[schedule]]\ntask = \"t\"\n", `imp.toml:4: [[schedule]] #2: no cron`},
		{"unknown key", "[[schedule]]\ncron = \"@daily\"\nwhen = \"now\"\n", `imp.toml:4: key "when": [[schedule]] #1: unknown key (want cron, task, kind, proactive, continue)`},
		{"wrong type", "[[schedule]]\ncron = \"@daily\"\ncontinue = \"yes\"\n", `imp.toml:4: key "continue": [[schedule]] #1: continue has the wrong type`},
		{"wrong type in the second entry", "[[schedule]]\ncron = \"@daily\"\ntask = \"a\"\n[[schedule]]\ncron = \"@hourly\"\ntask = 5\n", `imp.toml:7: key "task": [[schedule]] #2: task has the wrong type`},
		{"bad kind", "[[schedule]]\ncron = \"@daily\"\nkind = \"poetry\"\n", `imp.toml:4: key "kind": [[schedule]] #1: kind "poetry" is not research or code`},
		{"code without repo", "[[schedule]]\ncron = \"@daily\"\nkind = \"code\"\n", `[[schedule]] #1: a code task needs repo in imp.toml`},
		{"repeated entry", "[[schedule]]\ncron = \"@daily\"\ntask = \"t\"\n[[schedule]]\ncron = \"@daily\"\ntask = \"t\"\n", `imp.toml:5: [[schedule]] #2: repeats #1`},
		{"schedule_task with entries", "schedule_task = \"t\"\n[[schedule]]\ncron = \"@daily\"\n", `imp.toml:2: key "schedule_task": schedule_task goes with the old single schedule`},
		{"old form, bad cron", "schedule = \"every tuesday\"\n", `imp.toml:2: key "schedule": invalid cron expression "every tuesday"`},
		{"a number", "schedule = 5\n", `imp.toml:2: key "schedule": want [[schedule]] tables (cron, task, kind, proactive, continue), or the old single schedule = "CRON"; not 5`},
		{"one table", "[schedule]\ncron = \"@daily\"\n", `imp.toml:2: key "schedule": [schedule] is one table: write each entry as [[schedule]]`},
	} {
		im, err := loadImpText(t, "command = [\"x\"]\n"+c.conf)
		fileWide := strings.Contains(c.name, "schedule_task") || c.name == "a number" || c.name == "one table"
		switch {
		case fileWide && (err == nil || !strings.Contains(err.Error(), c.want)):
			t.Errorf("%s: %v\nwant the file refused with %q", c.name, err, c.want)
		case fileWide:
		case err != nil:
			t.Errorf("%s: the file is refused (%v); want only the entry skipped", c.name, err)
		case len(im.Schedule.Bad) != 1 || !strings.Contains(im.Schedule.Bad[0].Error(), c.want):
			t.Errorf("%s: skipped %v\nwant %q", c.name, im.Schedule.Bad, c.want)
		}
	}
	// The good entries beside a bad one fire.
	im, err := loadImpText(t, "command = [\"x\"]\n[[schedule]]\ncron = \"@daily\"\ntask = \"a\"\n[[schedule]]\ncron = \"61 * * * *\"\n[[schedule]]\ncron = \"@hourly\"\ntask = \"b\"\n")
	if err != nil || len(im.Schedule.List) != 2 || im.Schedule.List[0].N != 1 || im.Schedule.List[1].N != 3 || len(im.Schedule.Bad) != 1 {
		t.Errorf("entries %+v, skipped %v, %v; want #1 and #3, #2 skipped", im.Schedule.List, im.Schedule.Bad, err)
	}
}
