package blob

import (
	"os"
	"strings"
	"testing"

	"github.com/impyard/impyard/lib/yard"
)

func TestBlobPutGetMismatch(t *testing.T) {
	y := &yard.Yard{Root: t.TempDir()}
	sum, err := Put(y, []byte("diff --git a b\n"))
	if err != nil {
		t.Fatal(err)
	}
	if again, err := Put(y, []byte("diff --git a b\n")); err != nil || again != sum {
		t.Fatalf("second put: %s %v", again, err)
	}
	got, err := Get(y, Prefix+sum)
	if err != nil || string(got) != "diff --git a b\n" {
		t.Fatalf("get: %q %v", got, err)
	}
	if _, err := Get(y, "sha256:../../etc"); err == nil {
		t.Fatal("a bad reference was accepted")
	}
	os.WriteFile(y.Path(Dir, sum), []byte("tampered"), 0o640)
	_, err = Get(y, sum)
	if err == nil || !strings.Contains(err.Error(), y.Path(Dir, sum)) || !strings.Contains(err.Error(), "not to its name") {
		t.Fatalf("a tampered blob: %v", err)
	}
}
