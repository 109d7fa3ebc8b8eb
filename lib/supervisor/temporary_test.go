package supervisor

import (
	"errors"
	"testing"

	"github.com/impyard/impyard/lib/temporary"
	"github.com/impyard/impyard/lib/yard/yardtest"
)

// A second supervisor on a yard is told to try again, not refused.
func TestLockHeldIsTemporary(t *testing.T) {
	y := yardtest.New(t)
	unlock, err := Lock(y)
	if err != nil {
		t.Fatal(err)
	}
	_, err = Lock(y)
	if !errors.Is(err, ErrRunning) || !temporary.Is(err) {
		t.Errorf("second Lock: %v; want ErrRunning, temporary", err)
	}
	unlock()
	again, err := Lock(y)
	if err != nil {
		t.Fatalf("Lock after unlock: %v", err)
	}
	again()
}
