package strictjson

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"
)

// body builds a model-API-shaped request of about n bytes.
func body(n int) []byte {
	var msgs []string
	for i := 0; len(strings.Join(msgs, ",")) < n; i++ {
		msgs = append(msgs, fmt.Sprintf(`{"role":"user","content":[{"type":"text","text":%q}],"id":%d}`, strings.Repeat("lorem ipsum dolor sit amet ", 8), i))
	}
	return []byte(`{"model":"gpt-5","stream":true,"input":[` + strings.Join(msgs, ",") + `],"tools":[]}`)
}

func BenchmarkValid(b *testing.B) {
	for _, n := range []int{6 << 10, 1 << 20} {
		data := body(n)
		b.Run(fmt.Sprintf("%dKiB", n>>10), func(b *testing.B) {
			b.SetBytes(int64(len(data)))
			b.ReportAllocs()
			for b.Loop() {
				if err := Valid(data); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run(fmt.Sprintf("json.Valid/%dKiB", n>>10), func(b *testing.B) {
			b.SetBytes(int64(len(data)))
			for b.Loop() {
				json.Valid(data)
			}
		})
	}
}

// record is shaped as a yard task file: a few strings, a bool, a number,
// times, and a history of transitions.
type record struct {
	Schema    string    `json:"schema"`
	ID        string    `json:"id"`
	Imp       string    `json:"imp"`
	State     string    `json:"state"`
	Kind      string    `json:"kind"`
	Text      string    `json:"text"`
	Proactive bool      `json:"proactive"`
	Attempt   int       `json:"attempt"`
	Created   time.Time `json:"created"`
	Updated   time.Time `json:"updated"`
	History   []struct {
		From  string    `json:"from,omitempty"`
		To    string    `json:"to"`
		By    string    `json:"by,omitempty"`
		Actor string    `json:"actor,omitempty"`
		At    time.Time `json:"at"`
		Why   string    `json:"why,omitempty"`
	} `json:"history"`
}

const recordFile = `{
  "schema": "impyard.task/1",
  "id": "t-0000000000000001",
  "imp": "yuko",
  "state": "done",
  "kind": "research",
  "text": "draft the weekly digest",
  "proactive": false,
  "attempt": 1,
  "created": "2026-12-01T04:43:23Z",
  "updated": "2026-12-01T04:43:23Z",
  "history": [
    {"to": "waiting", "by": "alice", "actor": "impq", "at": "2026-12-01T04:43:23Z", "why": "added by alice"},
    {"from": "waiting", "to": "running", "by": "impsup", "actor": "impsup", "at": "2026-12-01T04:43:23Z"},
    {"from": "running", "to": "done", "by": "impsup", "actor": "impsup", "at": "2026-12-01T04:43:23Z"}
  ]
}
`

// BenchmarkUnmarshalRecord decodes a task file through Unmarshal as
// callers do (the one-pass decoder) and through the checked path alone,
// taking turns in one run, and reports each and their ratio.
func BenchmarkUnmarshalRecord(b *testing.B) {
	data := []byte(recordFile)
	defer func(was bool) { fast = was }(fast)
	var fastT, checkedT time.Duration
	for b.Loop() {
		for _, on := range []bool{true, false} {
			fast = on
			start := time.Now()
			var r record
			if err := Unmarshal(data, &r); err != nil {
				b.Fatal(err)
			}
			if on {
				fastT += time.Since(start)
			} else {
				checkedT += time.Since(start)
			}
		}
	}
	b.ReportMetric(float64(fastT.Nanoseconds())/float64(b.N), "ns/fast")
	b.ReportMetric(float64(checkedT.Nanoseconds())/float64(b.N), "ns/checked")
	b.ReportMetric(checkedT.Seconds()/fastT.Seconds(), "x-faster")
}
