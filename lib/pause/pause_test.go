package pause

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/impyard/impyard/lib/notify"
	"github.com/impyard/impyard/lib/yard/yardtest"
)

// A damaged pause file pauses the whole yard, naming the file; the next
// change replaces it with a larger seq.
func TestDamagedPausesAll(t *testing.T) {
	y := yardtest.New(t)
	os.MkdirAll(y.Path(Dir), 0o750)
	if err := os.WriteFile(Path(y), []byte(`{"schema":"impyard.pause/1","seq":7,"imps":{"../x":{}}}`), 0o640); err != nil {
		t.Fatal(err)
	}
	s, err := Load(y)
	if !errors.Is(err, ErrDamaged) || !strings.Contains(err.Error(), Path(y)) && !strings.Contains(err.Error(), "../x") {
		t.Fatalf("Load: %v", err)
	}
	if s.Of("anyone") == nil || !strings.Contains(s.Why("anyone"), "the yard is paused") {
		t.Fatalf("a damaged file does not pause the yard: %+v", s)
	}
	s, err = Resume(y, Change{By: "alice", At: yardtest.FixedNow(t)})
	if err != nil || s.Seq != 8 || s.Any() {
		t.Fatalf("resume over a damaged file: %+v %v", s, err)
	}
}

// An unknown major is refused, and counts as paused.
func TestUnknownMajor(t *testing.T) {
	y := yardtest.New(t)
	os.MkdirAll(y.Path(Dir), 0o750)
	os.WriteFile(Path(y), []byte(`{"schema":"impyard.pause/2","seq":1}`), 0o640)
	if s, err := Load(y); err == nil || s.Of("yuko") == nil {
		t.Fatalf("Load of impyard.pause/2: %+v %v", s, err)
	}
}

// Pausing imps and the yard, and resuming: the yard's pause holds every
// imp, an imp resumed under a paused yard stays paused, and resume with
// no imp lifts everything. Seq grows with each change.
func TestPauseResume(t *testing.T) {
	y := yardtest.New(t)
	now := yardtest.FixedNow(t)
	if s, err := Load(y); err != nil || s.Any() || s.Seq != 0 {
		t.Fatalf("no file: %+v %v", s, err)
	}
	s, err := Pause(y, Change{Imps: []string{"yuko"}, Reason: "spend", By: "alice", At: now, Stop: true})
	if err != nil || s.Seq != 1 || s.Of("yuko") == nil || !s.Of("yuko").Stop || s.Of("kit") != nil {
		t.Fatalf("pause yuko: %+v %v", s, err)
	}
	if got, want := s.Why("yuko"), "imp yuko is paused (pause 1 by alice at "+now.UTC().Truncate(time.Second).Format(time.RFC3339)+": spend); 'impsup resume yuko' lifts it"; got != want {
		t.Errorf("Why: got %q, want %q", got, want)
	}
	if s, err = Pause(y, Change{By: "alice", At: now}); err != nil || s.Seq != 2 || s.Of("kit") == nil || s.Yard.Reason != "paused by the owner" {
		t.Fatalf("pause the yard: %+v %v", s, err)
	}
	if s, err = Resume(y, Change{Imps: []string{"yuko"}, By: "alice", At: now}); err != nil || s.Seq != 3 || s.Of("yuko") == nil {
		t.Fatalf("resume yuko under a paused yard: %+v %v", s, err)
	}
	if s, err = Resume(y, Change{By: "alice", At: now}); err != nil || s.Seq != 4 || s.Any() {
		t.Fatalf("resume all: %+v %v", s, err)
	}
	if s, err := Load(y); err != nil || s.Seq != 4 || s.Any() {
		t.Fatalf("reloaded: %+v %v", s, err)
	}
	if _, err := Pause(y, Change{Imps: []string{"../etc"}, By: "alice", At: now}); err == nil {
		t.Fatal("a path as an imp name was accepted")
	}
}

// Set records the pause in the journal of the imp and notifies it (pause
// is told to every receiver); with no daemon running nothing waits.
func TestSetRecordsAndNotifies(t *testing.T) {
	y := yardtest.New(t)
	os.MkdirAll(y.Path("imps", "yuko"), 0o750)
	os.WriteFile(y.Path("imps", "yuko", "imp.toml"), []byte("image = \"x\"\n"), 0o640)
	os.WriteFile(y.Path("org.toml"), []byte("[notify]\ncommand = [\"true\"]\n"), 0o640)
	res, err := Set(context.Background(), y, false, Change{Imps: []string{"yuko"}, Reason: "why not", By: "alice", At: yardtest.FixedNow(t)}, time.Second)
	if err != nil || len(res.Running) != 0 {
		t.Fatalf("Set: %+v %v", res, err)
	}
	j, _ := os.ReadFile(y.Path("journal", "yuko", "events.jsonl"))
	if !strings.Contains(string(j), `"event":"pause"`) || !strings.Contains(string(j), `"why":"why not"`) || !strings.Contains(string(j), `"by":"alice"`) {
		t.Errorf("journal: %s", j)
	}
	if _, err := Set(context.Background(), y, false, Change{Imps: []string{"yuk"}, By: "alice"}, time.Second); !errors.Is(err, ErrUnknownImp) {
		t.Fatalf("pause of an unknown imp: %v", err)
	}
	entries, bad := notify.Pending(y)
	if len(bad) > 0 || len(entries) != 1 || entries[0].Event != notify.Pause || entries[0].Why != "why not" || entries[0].ID != "pause.1" {
		t.Fatalf("outbox: %+v %v", entries, bad)
	}
	if _, err := Set(context.Background(), y, true, Change{Imps: []string{"yuko"}, By: "alice", At: yardtest.FixedNow(t)}, time.Second); err != nil {
		t.Fatal(err)
	}
	if entries, _ := notify.Pending(y); len(entries) != 2 || entries[1].Event != notify.Resume {
		t.Fatalf("outbox after resume: %+v", entries)
	}
}

// Wait returns the daemons that did not acknowledge, and none once each
// has acknowledged the seq or a later one.
func TestWait(t *testing.T) {
	y := yardtest.New(t)
	now := yardtest.FixedNow(t)
	if err := Acknowledge(y, "impgw", 3, now); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	if missing := Wait(ctx, y, []string{"impsup", "impgw"}, 3); len(missing) != 1 || missing[0] != "impsup" {
		t.Fatalf("missing: %v", missing)
	}
	done := make(chan []string)
	go func() { done <- Wait(context.Background(), y, []string{"impsup"}, 3) }()
	if err := Acknowledge(y, "impsup", 4, now); err != nil {
		t.Fatal(err)
	}
	if missing := <-done; len(missing) != 0 {
		t.Fatalf("missing after the acknowledgement: %v", missing)
	}
	if _, err := os.Stat(filepath.Join(y.Path(Dir), "ack-impsup.json")); err != nil {
		t.Fatal(err)
	}
}

// BenchmarkLoad is what the gateway pays per request of an imp: one read
// of the pause file, absent or present.
func BenchmarkLoad(b *testing.B) {
	y := yardtest.New(b)
	for _, c := range []struct {
		name  string
		setup func()
	}{
		{"absent", func() {}},
		{"present", func() {
			if _, err := Pause(y, Change{Imps: []string{"yuko"}, Reason: "r", By: "alice", At: yardtest.FixedNow(b)}); err != nil {
				b.Fatal(err)
			}
		}},
	} {
		c.setup()
		b.Run(c.name, func(b *testing.B) {
			for i := 0; i < b.N; i++ {
				if _, err := Load(y); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
