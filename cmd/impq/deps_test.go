package main

import (
	"os/exec"
	"strings"
	"testing"
)

// TestNoNetwork fails when impq links a package its adds pay for at every
// start without using: net/http, its code and init about a sixth of an
// add's CPU; net, which brings runtime/cgo and with it the C loader,
// libc's threads and a hundred more page faults a process; os/user, the
// same cgo by another road. impq speaks to no server and looks no one up.
func TestNoNetwork(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", ".").CombinedOutput()
	if err != nil {
		t.Fatalf("go list -deps: %v\n%s", err, out)
	}
	for _, p := range strings.Fields(string(out)) {
		switch p {
		case "net/http", "net", "runtime/cgo", "os/user":
			t.Errorf("impq links %s; find the import with 'go list -deps -f \"{{.ImportPath}}: {{.Imports}}\" ./cmd/impq'", p)
		}
	}
}
