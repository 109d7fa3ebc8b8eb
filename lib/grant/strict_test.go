package grant

import (
	"errors"
	"os"
	"testing"

	"github.com/impyard/impyard/lib/yard"
	"github.com/impyard/impyard/lib/yard/yardtest"
)

// TestApplyRefusesUnsafePolicy: an approved grant is not applied to a
// policy a writer of the yard could have written: rewriting it would make
// the writer's rules the owner's file. The file is left as it is.
func TestApplyRefusesUnsafePolicy(t *testing.T) {
	y := yardtest.New(t)
	os.MkdirAll(y.Path("policies"), 0o750)
	if err := os.WriteFile(y.PolicyPath(), []byte(policy), 0o640); err != nil {
		t.Fatal(err)
	}
	yardtest.Foreign(t, y.PolicyPath())
	rule, err := Rule("yuko", "", []byte(`{"name":"docs","match":{"host":"docs.python.org","method":"GET"},"verdict":"allow"}`))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Apply(y, Grant{Imp: "yuko"}, rule); !errors.Is(err, yard.ErrUnsafe) {
		t.Fatalf("Apply: %v; want ErrUnsafe", err)
	}
	yardtest.StillForeign(t, y.PolicyPath(), policy)
	if _, err := os.Stat(y.PolicyPath() + ".1"); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("a backup was written: %v", err)
	}
}
