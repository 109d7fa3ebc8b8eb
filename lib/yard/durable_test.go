package yard_test

import (
	"path/filepath"
	"testing"

	"github.com/impyard/impyard/internal/tracetest"
	"github.com/impyard/impyard/lib/store"
	"github.com/impyard/impyard/lib/yard"
)

// A yard root Prepare makes is synced into its parent, so the files init
// writes in it survive a power cut.
func TestPrepareSyncsTheRoot(t *testing.T) {
	parent := t.TempDir()
	rec := tracetest.Record(t)
	y, made, err := yard.Prepare(filepath.Join(parent, "yard"))
	if err != nil || !made {
		t.Fatalf("%v %v", made, err)
	}
	ops := rec.Ops()
	if len(ops) != 2 || ops[0].Kind != store.OpMkdir || ops[0].Path != y.Root || ops[1].Kind != store.OpDirSync || ops[1].Path != parent {
		t.Errorf("the root is not made and synced into %s:\n%s", parent, rec)
	}
}
