package transition

import (
	"os"
	"testing"

	"github.com/impyard/impyard/lib/id"
	"github.com/impyard/impyard/lib/store"
	"github.com/impyard/impyard/lib/yard/yardtest"
)

// TestKnownForgets: what Known remembers of a directory is what is in it,
// so a daemon's memory of finished records does not outgrow the yard.
func TestKnownForgets(t *testing.T) {
	y := yardtest.New(t)
	if err := os.MkdirAll(y.Path("recs"), 0o750); err != nil {
		t.Fatal(err)
	}
	type rec struct {
		Schema string `json:"schema"`
		ID     string `json:"id"`
	}
	ids := []string{"t-0000000000000001", "t-0000000000000002", "t-0000000000000003"}
	for _, rid := range ids {
		b, _ := store.Encode(rec{store.Schema("rec", 1), rid})
		if err := os.WriteFile(y.Path("recs", rid+".json"), b, 0o640); err != nil {
			t.Fatal(err)
		}
	}
	known := NewKnown()
	srcs := []Source[*rec]{{Rel: "recs", Known: known, Settled: func(*rec) bool { return true },
		Parse: func(path string, b []byte) (*rec, error) {
			var r rec
			return &r, store.Decode(path, b, "rec", 1, &r)
		}}}
	list := func() {
		t.Helper()
		if bad, err := Each(y, "rec", id.Task, srcs, func(*rec) error { return nil }); err != nil || len(bad) > 0 {
			t.Fatal(err, bad)
		}
	}
	list()
	list()
	if n := len(known.dirs["recs"]); n != 3 {
		t.Fatalf("Known holds %d files, want 3", n)
	}
	os.Remove(y.Path("recs", ids[1]+".json"))
	list()
	if _, ok := known.dirs["recs"][ids[1]]; ok || len(known.dirs["recs"]) != 2 {
		t.Errorf("Known still holds %v after %s went", known.dirs["recs"], ids[1])
	}
}
