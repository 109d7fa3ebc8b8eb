package gate

import (
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/impyard/impyard/lib/state"
	"github.com/impyard/impyard/lib/yard/yardtest"
)

// BenchmarkSubmit files a gate for an imp with 0 or 500 decided gates,
// decided now or (old) two hours ago: dedupe off, then on (it reads the
// imp's gates under the lock that files one, passing over the files not
// written within its window). The ratio of on to off is what dedupe costs
// a proposal in a yard that kept its gates.
func BenchmarkSubmit(b *testing.B) {
	benchN := 0
	for _, c := range []struct {
		kept int
		old  bool
	}{{0, false}, {500, false}, {500, true}} {
		kept := c.kept
		y := yardtest.New(b)
		for i := range kept {
			g, err := File(y, FileOptions{Imp: "yuko", Intent: "email-send", Payload: fmt.Appendf(nil, `{"n":%d}`, i), By: "yuko", Actor: "impgw"})
			if err != nil {
				b.Fatal(err)
			}
			if _, err := Move(y, g.ID, Change{To: state.Approved, By: "alice", Actor: "impgate", Signer: testKey}); err != nil {
				b.Fatal(err)
			}
			if c.old {
				then := time.Now().Add(-2 * time.Hour)
				os.Chtimes(y.Path("gates", resolved, g.ID+".json"), then, then)
			}
		}
		for _, dedupe := range []time.Duration{0, time.Hour} {
			b.Run(fmt.Sprintf("kept=%d/old=%v/dedupe=%v", kept, c.old, dedupe), func(b *testing.B) {
				for b.Loop() {
					// Each payload new, and the gate filed withdrawn, so
					// every round finds the same yard.
					benchN++
					g, dup, err := Submit(y, FileOptions{Imp: "yuko", Intent: "email-send", Payload: fmt.Appendf(nil, `{"new":%d}`, benchN), By: "yuko", Actor: "impgw", Dedupe: dedupe})
					if err == nil && !dup {
						b.StopTimer()
						_, err = Move(y, g.ID, Change{To: state.Denied, By: "alice", Actor: "impgate"})
						then := time.Now().Add(-2 * time.Hour)
						os.Chtimes(y.Path("gates", resolved, g.ID+".json"), then, then)
						b.StartTimer()
					}
					if err != nil || dup {
						b.Fatal(dup, err)
					}
				}
			})
		}
	}
}
