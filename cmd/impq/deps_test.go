package main

import (
	"os/exec"
	"strings"
	"testing"
)

// TestNoHTTPClient fails when impq links net/http: its code and init are
// paid by every impq add, about a sixth of the command's CPU, and impq
// speaks to no server.
func TestNoHTTPClient(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", ".").CombinedOutput()
	if err != nil {
		t.Fatalf("go list -deps: %v\n%s", err, out)
	}
	for _, p := range strings.Fields(string(out)) {
		if p == "net/http" {
			t.Fatal("impq links net/http; find the import with 'go list -deps -f \"{{.ImportPath}}: {{.Imports}}\" ./cmd/impq'")
		}
	}
}
