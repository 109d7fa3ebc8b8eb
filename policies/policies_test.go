package policies

import (
	"testing"

	"github.com/impyard/impyard/lib/judge"
)

// TestGatewayLoads: the shipped policy is one the gateway enforces, not
// one it would answer with deny-everything.
func TestGatewayLoads(t *testing.T) {
	p, err := judge.Parse(Gateway)
	if err != nil {
		t.Fatal(err)
	}
	if len(p.Rules()) == 0 {
		t.Error("the shipped policy has no rules")
	}
}
