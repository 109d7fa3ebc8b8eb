package earn

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/impyard/impyard/lib/config"
	"github.com/impyard/impyard/lib/state"
	"github.com/impyard/impyard/lib/yard/yardtest"
)

// TestAppendRefusesUnsafeImp: an earned entry is not appended to an
// imp.toml a writer of the yard could have written: rewriting it would
// make the writer's entries the owner's file. The file is left as it is.
func TestAppendRefusesUnsafeImp(t *testing.T) {
	f := newFixture(t)
	p := config.ImpPath(f.y, "yuko")
	os.MkdirAll(filepath.Dir(p), 0o750)
	const planted = "image = \"x\"\n[[trust]]\nintent = \"email-send\"\nlevel = \"auto\"\nfree = [\"to\", \"subject\", \"body\"]\n"
	if err := os.WriteFile(p, []byte(planted), 0o640); err != nil {
		t.Fatal(err)
	}
	for range 3 {
		f.approved(t, mail("a@ourco.com"))
	}
	promote := f.propose(t)
	if promote == nil {
		t.Fatal("no promotion")
	}
	promote = f.move(t, promote.ID, state.Approved, "alice", "impgate")
	yardtest.Foreign(t, p)
	if _, err := Append(f.y, f.org, f.keys(t), promote, promote.Payload); !errors.Is(err, config.ErrUnsafe) {
		t.Fatalf("Append: %v; want ErrUnsafe", err)
	}
	yardtest.StillForeign(t, p, planted)
}
