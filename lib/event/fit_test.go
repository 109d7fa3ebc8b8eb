package event

import (
	"encoding/json"
	"os"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/impyard/impyard/lib/store"
	"github.com/impyard/impyard/lib/yard/yardtest"
)

// A reason too long for one record is cut so the record fits, at a rune
// boundary and marked with an ellipsis; a reason that fits is kept whole.
func TestRecordFitsLongReasons(t *testing.T) {
	for _, c := range []struct {
		name    string
		why     string
		cut     bool
		escaped bool // each byte costs six in the line, so the cut is coarser
	}{
		{"short", "looks right", false, false},
		{"ascii over", strings.Repeat("r", store.MaxLine), true, false},
		{"multi-byte over", strings.Repeat("é", store.MaxLine/2), true, false},
		{"escaped over", strings.Repeat("\x01", store.MaxLine/4), true, true},
		// Three-byte runes behind 0, 1 and 2 ASCII bytes: the cut lands
		// inside a rune for some, and must back off to its start.
		{"three-byte runes", strings.Repeat("€", store.MaxLine/3), true, false},
		{"three-byte runes after one byte", "a" + strings.Repeat("€", store.MaxLine/3), true, false},
		{"three-byte runes after two bytes", "ab" + strings.Repeat("€", store.MaxLine/3), true, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			y := yardtest.New(t)
			e := Event{Event: "gate-filed", Imp: "yuko", ID: "g-0000000000000001", Seq: 1, Why: c.why}
			if err := Record(y, e); err != nil {
				t.Fatal(err)
			}
			// Ensure finds the record it would write, so it adds none.
			if err := Ensure(y, e); err != nil {
				t.Fatal(err)
			}
			for _, p := range []string{y.Path("journal", "yuko", "events.jsonl"), y.Path("runs", "decisions.jsonl")} {
				b, err := os.ReadFile(p)
				if err != nil {
					t.Fatal(err)
				}
				if len(b) > store.MaxLine || strings.Count(string(b), "\n") != 1 {
					t.Fatalf("%s: %d bytes in %d lines, want one record within MaxLine", p, len(b), strings.Count(string(b), "\n"))
				}
				var got Event
				if err := json.Unmarshal(b, &got); err != nil {
					t.Fatal(err)
				}
				switch {
				case !c.cut && got.Why != c.why:
					t.Errorf("reason changed to %.40q", got.Why)
				case c.cut && len(got.Why) < store.MaxLine/8:
					t.Errorf("reason cut to %d bytes, far more than needed", len(got.Why))
				case c.cut && (!strings.HasSuffix(got.Why, "…") || !strings.HasPrefix(c.why, strings.TrimSuffix(got.Why, "…")) || !utf8.ValidString(got.Why)):
					t.Errorf("reason cut to %d bytes, not a prefix of the original ending in an ellipsis", len(got.Why))
				case c.cut && !c.escaped && len(b) < store.MaxLine-8:
					t.Errorf("record of %d bytes: cut more than needed", len(b))
				}
			}
		})
	}
}
