package config

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/robfig/cron/v3"
)

// Schedule is one [[schedule]] entry of imp.toml: when to file a task
// for the imp, and which.
type Schedule struct {
	// Cron is five cron fields or a descriptor such as @hourly.
	Cron string
	// Task is the text of the tasks it files.
	Task string
	// Kind is the tasks' kind: research (the default) or code.
	Kind string
	// Proactive marks its tasks the imp's own initiative, under its
	// budget; true unless the entry says false.
	Proactive bool
	// Continue asks for a continuation task when a gate of one of its
	// tasks resolves, as impq add --continue does.
	Continue bool
	// Key tells the entry's marker and its tasks' unique key apart from
	// the other entries': a digest of its cron and task, so an entry keeps
	// its place in time when others are added, removed or reordered. The
	// old single schedule key has none, and keeps its .schedule marker.
	Key string
	// N is the entry's number in the file, 0 for the old single key.
	N int
}

// Label names the entry in logs: "[[schedule]] #2", or "schedule".
func (e Schedule) Label() string {
	if e.N == 0 {
		return "schedule"
	}
	return fmt.Sprintf("[[schedule]] #%d", e.N)
}

// scheduleKeys are the keys a [[schedule]] entry may hold.
var scheduleKeys = []string{"cron", "task", "kind", "proactive", "continue"}

// Schedules is imp.toml's schedule: an array of [[schedule]] tables, or
// the old single schedule = "CRON" (with schedule_task), read as one
// entry. The two forms cannot meet in one file: TOML gives a key one
// type.
type Schedules struct {
	List []Schedule
	// Bad are the entries that cannot fire, each error naming the file,
	// line and entry: they are skipped (and reported), and the imp's
	// other entries, and impq add for the imp, go on.
	Bad []error
	// legacy is set when the file used the old single string.
	legacy bool
	// raw keeps each entry's table for check, which knows the file.
	raw []map[string]any
}

// UnmarshalTOML takes either form; check validates the entries.
func (s *Schedules) UnmarshalTOML(v any) error {
	switch v := v.(type) {
	case string:
		// schedule = "" has always meant no schedule.
		if v == "" {
			return nil
		}
		s.legacy = true
		s.List = []Schedule{{Cron: v, Proactive: true}}
		return nil
	case []map[string]any:
		s.raw = v
		return nil
	case map[string]any:
		return errors.New("[schedule] is one table: write each entry as [[schedule]]")
	}
	return fmt.Errorf("want [[schedule]] tables (%s), or the old single schedule = \"CRON\"; not %v", strings.Join(scheduleKeys, ", "), v)
}

// checkSchedules reads and checks im.Schedule's entries, naming the entry
// and its line in errors.
func (im *Imp) checkSchedules(p string, b []byte) error {
	s := &im.Schedule
	if s.legacy {
		s.List[0].Task = im.ScheduleTask
		if _, err := cron.ParseStandard(s.List[0].Cron); err != nil {
			s.Bad = []error{bad(p, b, "schedule", "invalid cron expression %q: %v", s.List[0].Cron, err)}
			s.List = nil
		}
		return nil
	}
	// schedule_task without any schedule has always been ignored; beside
	// [[schedule]] entries it would be a task text no entry takes.
	if im.ScheduleTask != "" && len(s.raw) > 0 {
		return bad(p, b, "schedule_task", "schedule_task goes with the old single schedule = \"CRON\"; with [[schedule]] entries give each its own task")
	}
	seen := map[string]int{}
	for i, raw := range s.raw {
		e, err := im.scheduleEntry(p, b, i+1, raw, seen)
		if err != nil {
			s.Bad = append(s.Bad, err)
			continue
		}
		s.List = append(s.List, e)
	}
	s.raw = nil
	return nil
}

// scheduleEntry reads and checks the nth [[schedule]] entry, raw, with
// seen the keys of the entries before it.
func (im *Imp) scheduleEntry(p string, b []byte, n int, raw map[string]any, seen map[string]int) (Schedule, error) {
	e := Schedule{Kind: "research", Proactive: true, N: n}
	for _, k := range slices.Sorted(maps.Keys(raw)) {
		var ok bool
		switch k {
		case "cron":
			e.Cron, ok = raw[k].(string)
		case "task":
			e.Task, ok = raw[k].(string)
		case "kind":
			e.Kind, ok = raw[k].(string)
		case "proactive":
			e.Proactive, ok = raw[k].(bool)
		case "continue":
			e.Continue, ok = raw[k].(bool)
		default:
			return Schedule{}, entryError(p, b, n, k, "unknown key (want %s)", strings.Join(scheduleKeys, ", "))
		}
		if !ok {
			return Schedule{}, entryError(p, b, n, k, "%s has the wrong type: %v", k, raw[k])
		}
	}
	if e.Cron == "" {
		return Schedule{}, entryError(p, b, n, "", "no cron")
	}
	if _, err := cron.ParseStandard(e.Cron); err != nil {
		return Schedule{}, entryError(p, b, n, "cron", "invalid cron expression %q: %v", e.Cron, err)
	}
	switch e.Kind {
	case "research":
	case "code":
		if im.Repo == "" {
			return Schedule{}, entryError(p, b, n, "kind", "a code task needs repo in imp.toml")
		}
	default:
		return Schedule{}, entryError(p, b, n, "kind", "kind %q is not research or code", e.Kind)
	}
	sum := sha256.Sum256([]byte(e.Cron + "\x00" + e.Task))
	e.Key = hex.EncodeToString(sum[:6])
	if first, dup := seen[e.Key]; dup {
		return Schedule{}, entryError(p, b, n, "", "repeats #%d: the same cron and task", first)
	}
	seen[e.Key] = n
	return e, nil
}

// entryLine is the line of the nth [[schedule]] header or, with a key,
// of that key within the entry.
func entryLine(b []byte, n int, key string) int {
	header := 0
	for i, line := range strings.Split(string(b), "\n") {
		line = strings.TrimSpace(line)
		switch {
		case line == "[[schedule]]":
			if n--; n == 0 {
				header = i + 1
				if key == "" {
					return header
				}
			}
		case header != 0 && strings.HasPrefix(line, "["):
			return header
		case header != 0 && lineOf([]byte(line), key) == 1:
			return i + 1
		}
	}
	return header
}

// entryError is a mistake in the nth entry, naming its line and key.
func entryError(p string, b []byte, n int, key, format string, a ...any) error {
	msg := fmt.Sprintf("[[schedule]] #%d: ", n) + fmt.Sprintf(format, a...)
	if key == "" {
		return fmt.Errorf("%s:%d: %s", p, entryLine(b, n, ""), msg)
	}
	return fmt.Errorf("%s:%d: key %q: %s", p, entryLine(b, n, key), key, msg)
}
