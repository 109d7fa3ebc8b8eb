package inbound_test

import (
	"fmt"
	"testing"
)

// BenchmarkHMACDelivery: one signed delivery verified, filed and
// remembered, through loopback HTTP, with the replay memory holding
// every delivery the benchmark filed before it.
func BenchmarkHMACDelivery(b *testing.B) {
	r := newRelay(b)
	b.ResetTimer()
	for i := range b.N {
		body := fmt.Appendf(nil, `{"n":%d}`, i)
		if code, out := r.github(b, fmt.Sprint("d-", i), body); code != 202 {
			b.Fatalf("%d %s", code, out)
		}
	}
}
