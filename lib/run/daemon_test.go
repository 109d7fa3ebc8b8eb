package run

import (
	"testing"

	"github.com/impyard/impyard/lib/yard/yardtest"
)

// TestDaemonLock: DaemonUp sees a daemon present and creates nothing
// when none is; executors share the lock.
func TestDaemonLock(t *testing.T) {
	y := yardtest.New(t)
	before := yardtest.Tree(t, y.Root)
	if up, err := DaemonUp(y, "impexec"); up || err != nil {
		t.Fatalf("no daemon: %v %v", up, err)
	}
	yardtest.Unchanged(t, y.Root, before, "DaemonUp")
	r1, err := Present(y, "impexec")
	if err != nil {
		t.Fatal(err)
	}
	r2, err := Present(y, "impexec")
	if err != nil {
		t.Fatal("a second executor could not share the lock:", err)
	}
	if up, err := DaemonUp(y, "impexec"); !up || err != nil {
		t.Fatalf("two executors: %v %v", up, err)
	}
	r1()
	if up, _ := DaemonUp(y, "impexec"); !up {
		t.Fatal("one executor left, not seen")
	}
	r2()
	if up, _ := DaemonUp(y, "impexec"); up {
		t.Fatal("none left, still seen")
	}
	if up, _ := DaemonUp(y, "impsup"); up {
		t.Fatal("impsup seen in impexec's lock")
	}
}
