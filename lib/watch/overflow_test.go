package watch

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"
)

// When the kernel's event queue overflows, events were lost: the caller is
// asked to rescan, and the overflow, which the rescan answers, is not
// reported as an error.
func TestOverflowRescans(t *testing.T) {
	max, err := os.ReadFile("/proc/sys/fs/inotify/max_queued_events")
	if err != nil {
		t.Skip("no inotify limits to overflow:", err)
	}
	limit, err := strconv.Atoi(string(max[:len(max)-1]))
	if err != nil || limit > 1<<16 {
		t.Skipf("inotify queue of %s events is too long to overflow in a test", max)
	}
	dir := t.TempDir()
	r := newRecorder(dir)
	release := make(chan struct{})
	h := r.handler()
	blocked := make(chan struct{}, 1)
	h.File = func(string) {
		select {
		case blocked <- struct{}{}:
		default:
		}
		<-release
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- Run(ctx, time.Hour, h) }()
	defer func() { cancel(); <-done }()
	r.waitRescan(t)
	// The handler holds the watcher while more events arrive than the
	// kernel queues plus what the watcher buffers.
	write(t, filepath.Join(dir, "first"))
	<-blocked
	for i := range limit + 2048 {
		f, err := os.Create(filepath.Join(dir, strconv.Itoa(i)))
		if err != nil {
			t.Fatal(err)
		}
		f.Close()
	}
	close(release)
	r.waitRescan(t)
	select {
	case err := <-r.errs:
		t.Errorf("the overflow was reported as an error: %v", err)
	default:
	}
}
