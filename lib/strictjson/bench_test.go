package strictjson

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
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
