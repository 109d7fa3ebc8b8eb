package main

import (
	"os/exec"
	"strings"
	"testing"
)

// impsup reaches the gateway only through the yard (runs/<run>/gateway.json)
// and its health endpoint, both in lib/run, so it links neither the
// gateway nor the judge, nor what they pull in.
func TestLinksNoGateway(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", ".").CombinedOutput()
	if err != nil {
		t.Fatalf("go list -deps: %v\n%s", err, out)
	}
	deps := strings.Fields(string(out))
	if len(deps) == 0 || deps[len(deps)-1] != "github.com/impyard/impyard/cmd/impsup" {
		t.Fatalf("go list -deps listed %d packages, not ending in impsup: %s", len(deps), out)
	}
	for _, d := range deps {
		for _, banned := range []string{"lib/gateway", "lib/judge", "lib/boxnet", "lib/mcp"} {
			if d == "github.com/impyard/impyard/"+banned {
				t.Errorf("impsup links %s", d)
			}
		}
	}
}
