package notify

import (
	"os"
	"testing"
	"time"

	"github.com/impyard/impyard/lib/id"
	"github.com/impyard/impyard/lib/yard"
	"github.com/impyard/impyard/lib/yard/yardtest"
)

// A reminder is one entry per gate and a warning one per imp and UTC
// day, pending or sent: asked again, nothing more is written. An imp
// name that would not make an id is refused, writing nothing; so is any
// entry when no receiver wants the event.
func TestExpiringAndWarningOnce(t *testing.T) {
	y := yardtest.New(t)
	gid := id.New(id.Gate)
	day := time.Date(2026, 12, 1, 23, 59, 0, 0, time.UTC)
	none := func(*yard.Yard, string) bool { return false }
	if there, err := Expiring(y, "yuko", gid, day, none); there || err != nil {
		t.Fatalf("with no receiver: %v %v", there, err)
	}
	if _, err := os.Lstat(y.Path("outbox")); !os.IsNotExist(err) {
		t.Fatalf("an entry no one wants made outbox/: %v", err)
	}
	for range 2 {
		if there, err := Expiring(y, "yuko", gid, day, always); !there || err != nil {
			t.Fatalf("Expiring: %v %v", there, err)
		}
		if there, err := Warning(y, "yuko", "used 81%", day, always); !there || err != nil {
			t.Fatalf("Warning: %v %v", there, err)
		}
	}
	if _, err := Delivered(y, "budget-yuko.20261201", []string{"command"}, day); err != nil {
		t.Fatal(err)
	}
	if there, err := Warning(y, "yuko", "used 90%", day.Add(30*time.Second), always); !there || err != nil {
		t.Fatalf("Warning again after delivery: %v %v", there, err)
	}
	if _, err := Warning(y, "yuko", "used 90%", day.Add(time.Minute), always); err != nil {
		t.Fatalf("Warning the next day: %v", err)
	}
	pending, bad := Pending(y)
	sent, _ := Sent(y)
	var ids []string
	for _, en := range pending {
		ids = append(ids, en.ID)
	}
	want := []string{gid + ".expiring", "budget-yuko.20261202"}
	if len(bad) != 0 || len(ids) != 2 || ids[0] != want[0] || ids[1] != want[1] || len(sent) != 1 || sent[0].Why != "used 81%" {
		t.Errorf("pending %v (bad %v), sent %+v; want %v pending and the first warning sent", ids, bad, sent, want)
	}
	if _, err := Warning(y, "../x", "", day, always); err == nil {
		t.Error("an imp name that is not one was taken")
	}
}
