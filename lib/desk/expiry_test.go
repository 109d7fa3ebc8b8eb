package desk

import (
	"testing"
	"time"

	"github.com/impyard/impyard/lib/config"
	"github.com/impyard/impyard/lib/gate"
	"github.com/impyard/impyard/lib/state"
)

// Timing says the age of every gate, and the time left of a filed one
// with a deadline, from its executor or set at filing; past the
// deadline it says expired, and a decided gate has no time left.
func TestTiming(t *testing.T) {
	org, err := config.ParseOrg("org.toml", []byte("[executors.email-send]\nkind = \"message-user\"\nexpires = \"48h\"\nconfirm_after = \"12h\"\n"))
	if err != nil {
		t.Fatal(err)
	}
	filed := time.Date(2026, 11, 27, 17, 0, 0, 0, time.UTC)
	own := filed.Add(2 * time.Hour)
	for _, tc := range []struct {
		name       string
		g          gate.Gate
		org        *config.Org
		after      time.Duration
		age, left  string
		old, dated bool
	}{
		{"fresh", gate.Gate{Intent: "email-send", State: state.Filed}, org, 90 * time.Minute, "1h", "46h", false, true},
		{"old", gate.Gate{Intent: "email-send", State: state.Filed}, org, 17 * time.Hour, "17h", "31h", true, true},
		{"past", gate.Gate{Intent: "email-send", State: state.Filed}, org, 72 * time.Hour, "3d", "expired", true, true},
		{"its own deadline", gate.Gate{Intent: "email-send", State: state.Filed, Expires: &own}, org, time.Hour, "1h", "1h", false, true},
		{"decided", gate.Gate{Intent: "email-send", State: state.Denied}, org, time.Hour, "1h", "-", false, true},
		{"no executor deadline", gate.Gate{Intent: "other", State: state.Filed}, org, time.Hour, "1h", "-", false, false},
		{"org.toml unreadable", gate.Gate{Intent: "email-send", State: state.Filed}, nil, time.Hour, "1h", "-", false, false},
	} {
		tc.g.Created = filed
		tm := Timing(&tc.g, tc.org, filed.Add(tc.after))
		if tm.AgeText() != tc.age || tm.LeftText() != tc.left || tm.Old != tc.old || (tm.Deadline != nil) != tc.dated {
			t.Errorf("%s: age %s left %s old %v deadline %v; want %s %s %v dated %v", tc.name, tm.AgeText(), tm.LeftText(), tm.Old, tm.Deadline, tc.age, tc.left, tc.old, tc.dated)
		}
	}
}
