package ledger

import (
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/impyard/impyard/lib/yard/yardtest"
)

// BenchmarkSpent: a budget check in a daemon, against a ledger holding
// 100,000 entries of earlier days, each turn after one more entry is
// debited. It takes turns with reading the whole ledger for the day (how
// every check read it before), in the same run, and reports both and the
// ratio. The daemon's first look, which reads the whole ledger as
// before, comes before the timing.
func BenchmarkSpent(b *testing.B) {
	y := yardtest.New(b)
	p := y.Path("ledger", "yuko.jsonl")
	if err := os.MkdirAll(y.Path("ledger"), 0o750); err != nil {
		b.Fatal(err)
	}
	var old strings.Builder
	then := time.Now().Add(-72 * time.Hour).UTC()
	for i := range 100_000 {
		fmt.Fprintf(&old, `{"schema":"impyard.ledger/1","ts":%q,"imp":"yuko","kind":"tokens","class":"proactive","task":"t-0000000000000001","cost":0.001,"model":"gpt-5","input_tokens":%d,"output_tokens":200}`+"\n",
			then.Add(time.Duration(i)*time.Second).Format(time.RFC3339), 1000+i%7)
	}
	if err := os.WriteFile(p, []byte(old.String()), 0o640); err != nil {
		b.Fatal(err)
	}
	// The daemon's first look reads it all, once.
	if _, err := Spent(y, "yuko", time.Now()); err != nil {
		b.Fatal(err)
	}
	var followT, rereadT time.Duration
	for b.Loop() {
		if err := Debit(y, Entry{Imp: "yuko", Kind: Tokens, Class: Proactive, Model: "gpt-5", InputTokens: 10, OutputTokens: 10}); err != nil {
			b.Fatal(err)
		}
		now := time.Now()
		start := time.Now()
		s, err := Spent(y, "yuko", now)
		followT += time.Since(start)
		if err != nil {
			b.Fatal(err)
		}
		start = time.Now()
		since, until := Day(now)
		var full Totals
		if err := Read(y, "yuko", since, until, func(e Entry) { full.Add(e) }); err != nil {
			b.Fatal(err)
		}
		rereadT += time.Since(start)
		if s[Proactive] != full {
			b.Fatalf("followed %+v, read whole %+v", s[Proactive], full)
		}
	}
	b.ReportMetric(float64(followT.Nanoseconds())/float64(b.N), "ns/followed")
	b.ReportMetric(float64(rereadT.Nanoseconds())/float64(b.N), "ns/reread")
	b.ReportMetric(rereadT.Seconds()/followT.Seconds(), "x-faster")
}
