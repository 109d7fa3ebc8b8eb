package queue

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/impyard/impyard/lib/state"
)

// TestTaskTimes: a task written by an older impyard, with fractional
// seconds, is read and moved; the times it had stay as written, the new
// transition is in whole seconds, and a not_before is rounded up to one.
func TestTaskTimes(t *testing.T) {
	y := newYard(t)
	dir := y.Path("queue", "yuko")
	os.MkdirAll(dir, 0o750)
	const id = "t-01m8nfx6zme8w99f"
	old := `{"schema":"impyard.task/1","id":"` + id + `","imp":"yuko","state":"waiting","kind":"research",
"text":"digest","attempt":1,"created":"2026-11-30T05:47:46.363Z","updated":"2026-11-30T05:47:46.363Z",
"history":[{"to":"waiting","by":"alice","at":"2026-11-30T05:47:46.363Z","why":"added by impq"}]}`
	if err := os.WriteFile(filepath.Join(dir, id+".json"), []byte(old), 0o640); err != nil {
		t.Fatal(err)
	}
	got, err := Get(y, id)
	if err != nil || got.Created.Nanosecond() != 363e6 {
		t.Fatalf("old task: %+v %v", got, err)
	}
	if _, err := Move(y, id, Change{To: state.Running, By: "impsup", Actor: "impsup"}); err != nil {
		t.Fatal(err)
	}
	b, _ := os.ReadFile(filepath.Join(dir, id+".json"))
	if !strings.Contains(string(b), `"at": "2026-11-30T05:47:46.363Z"`) ||
		!regexp.MustCompile(`"updated": "\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ"`).Match(b) {
		t.Errorf("after a move:\n%s", b)
	}

	nb := time.Date(2026, 12, 1, 8, 0, 0, 1, time.UTC)
	nid, _, err := Add(y, AddOptions{Imp: "yuko", Text: "later", By: "alice", Actor: "test", NotBefore: nb})
	if err != nil {
		t.Fatal(err)
	}
	if got, _ := Get(y, nid); got.NotBefore == nil || !got.NotBefore.Equal(nb.Truncate(time.Second).Add(time.Second)) {
		t.Errorf("not_before %v, want the next whole second after %v", got.NotBefore, nb)
	}
}
