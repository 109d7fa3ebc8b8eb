package gate

import (
	"os"
	"testing"
	"time"

	"github.com/impyard/impyard/lib/state"
	"github.com/impyard/impyard/lib/yard/yardtest"
)

// WrittenSince passes over resolved gates whose file is older, and never
// over a pending one; so a decided gate whose file was last written
// before the dedupe window is not a duplicate, unread, while one written
// within it is.
func TestWrittenSince(t *testing.T) {
	y := yardtest.New(t)
	old := file(t, y, `{"n":1}`)
	recent := file(t, y, `{"n":2}`)
	waiting := file(t, y, `{"n":3}`)
	for _, g := range []*Gate{old, recent} {
		if _, err := Move(y, g.ID, Change{To: state.Denied, By: "alice", Actor: "test"}); err != nil {
			t.Fatal(err)
		}
	}
	then := time.Now().Add(-3 * time.Hour)
	for _, p := range []string{y.Path("gates", resolved, old.ID+".json"), y.Path("gates", pending, waiting.ID+".json")} {
		if err := os.Chtimes(p, then, then); err != nil {
			t.Fatal(err)
		}
	}
	listed := map[string]bool{}
	if _, err := Each(y, Filter{All: true, WrittenSince: time.Now().Add(-time.Hour)}, func(g *Gate) error { listed[g.ID] = true; return nil }); err != nil {
		t.Fatal(err)
	}
	if listed[old.ID] || !listed[recent.ID] || !listed[waiting.ID] {
		t.Errorf("listed %v; want the recent and the pending gate, not the old one", listed)
	}
	for _, tc := range []struct {
		payload string
		dup     bool
	}{{`{"n":1}`, false}, {`{"n":2}`, true}, {`{"n":3}`, true}} {
		_, dup, err := Submit(y, FileOptions{Imp: "yuko", Intent: "email-send", Payload: []byte(tc.payload), By: "yuko", Actor: "test", Dedupe: time.Hour})
		if err != nil || dup != tc.dup {
			t.Errorf("%s: duplicate %v %v, want %v", tc.payload, dup, err, tc.dup)
		}
	}
}
