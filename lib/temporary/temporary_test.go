package temporary

import (
	"context"
	"errors"
	"fmt"
	"os"
	"syscall"
	"testing"
)

func TestIs(t *testing.T) {
	busy := New("lock busy")
	for _, tc := range []struct {
		name string
		err  error
		want bool
	}{
		{"nil", nil, false},
		{"sentinel", busy, true},
		{"wrapped", fmt.Errorf("queue yuko: %w", &os.PathError{Op: "lock", Path: "queue/yuko/.lock", Err: busy}), true},
		{"joined", errors.Join(errors.New("refused"), fmt.Errorf("start: %w", busy)), true},
		{"plain", errors.New("refused"), false},
		// The standard library's Temporary() methods do not count.
		{"errno EAGAIN", fmt.Errorf("read: %w", syscall.EAGAIN), false},
		{"deadline", context.DeadlineExceeded, false},
	} {
		if got := Is(tc.err); got != tc.want {
			t.Errorf("%s: Is(%v) = %v, want %v", tc.name, tc.err, got, tc.want)
		}
	}
	if !errors.Is(fmt.Errorf("x: %w", busy), busy) || errors.Is(busy, New("lock busy")) {
		t.Error("a sentinel must compare equal only to itself")
	}
}
