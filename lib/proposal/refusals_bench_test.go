package proposal

import (
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/impyard/impyard/lib/store"
	"github.com/impyard/impyard/lib/yard/yardtest"
)

// BenchmarkRefusals measures what impq show adds: finding a task's
// refusals in an audit log of 100,000 request decisions with a refusal of
// the task every 1,000, against reading the same log line by line
// (store.ReadJSONL, the floor any reader of the file pays) in the same
// run; it reports the ratio.
func BenchmarkRefusals(b *testing.B) {
	y := yardtest.New(b)
	p, err := y.DecisionsPath()
	if err != nil {
		b.Fatal(err)
	}
	const task = "t-0000000000000001"
	var log strings.Builder
	at := time.Date(2026, 7, 1, 10, 0, 0, 0, time.UTC)
	for i := range 100_000 {
		fmt.Fprintf(&log, `{"schema":"impyard.decision/1","decision_id":"%08d-0000-4000-8000-000000000000","ts":"2026-07-01T10:00:00Z","verdict":"allow","rule":"model-api","reason":"rule model-api","request":{"imp":"yuko","protocol":"https","method":"POST","host":"api.openai.com","port":443,"path":"/v1/responses","headers":{"content-type":"application/json","user-agent":"codex"},"bodySize":%d}}`+"\n", i, i)
		if i%1000 == 0 {
			r := &Record{Time: at, Imp: "yuko", Task: task, Intent: "email-send", Verdict: Refused, Refusal: PayloadRefused, Reason: "payload: to"}
			line, _ := r.MarshalJSON()
			log.Write(append(line, '\n'))
		}
	}
	if err := os.WriteFile(p, []byte(log.String()), 0o644); err != nil {
		b.Fatal(err)
	}
	var floor, refusals time.Duration
	for b.Loop() {
		start := time.Now()
		if _, err := store.ReadJSONL(p, func([]byte) error { return nil }); err != nil {
			b.Fatal(err)
		}
		floor += time.Since(start)
		start = time.Now()
		got, _, err := Refusals(y, task)
		if err != nil || len(got) != 100 {
			b.Fatalf("%d refusals, %v", len(got), err)
		}
		refusals += time.Since(start)
	}
	b.ReportMetric(float64(refusals)/float64(b.N)/1e6, "ms/refusals")
	b.ReportMetric(float64(floor)/float64(b.N)/1e6, "ms/readjsonl")
	b.ReportMetric(float64(refusals)/float64(floor), "ratio")
	b.ReportMetric(float64(log.Len())/1e6, "MB")
}
