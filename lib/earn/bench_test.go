package earn

import (
	"os"
	"testing"

	"github.com/impyard/impyard/internal/approvaltest"
	"github.com/impyard/impyard/lib/gate"
	"github.com/impyard/impyard/lib/state"
	"github.com/impyard/impyard/lib/yard/yardtest"
)

// BenchmarkStreak counts an imp's approvals over 200 decided gates, the
// work impexec does after each execution and, per [[earn]] entry, at
// every rescan.
func BenchmarkStreak(b *testing.B) {
	y := yardtest.New(b)
	os.WriteFile(y.Path("org.toml"), []byte(orgTOML), 0o640)
	key := approvaltest.Key(b, b.TempDir())
	for range 200 {
		g, err := gate.File(y, gate.FileOptions{Imp: "yuko", Intent: "email-send", Payload: []byte(`{"to":["a@ourco.com"]}`), By: "yuko", Actor: "impgw"})
		if err != nil {
			b.Fatal(err)
		}
		for _, to := range []string{state.Approved, state.Executing, state.Executed} {
			if _, err := gate.Move(y, g.ID, gate.Change{To: to, By: "alice", Actor: "impgate", Signer: key}); err != nil {
				b.Fatal(err)
			}
		}
	}
	b.ResetTimer()
	for b.Loop() {
		if streak, _, err := Streak(y, "yuko", "email-send"); err != nil || len(streak) != 200 {
			b.Fatal(len(streak), err)
		}
	}
}
