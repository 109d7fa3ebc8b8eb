package watch

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// recorder turns the handler's calls into channels the test waits on.
type recorder struct {
	files   chan string
	rescans chan struct{}
	errs    chan error
	mu      sync.Mutex
	dirs    []string
}

func newRecorder(dirs ...string) *recorder {
	return &recorder{files: make(chan string, 100), rescans: make(chan struct{}, 100), errs: make(chan error, 100), dirs: dirs}
}

func (r *recorder) setDirs(dirs ...string) {
	r.mu.Lock()
	r.dirs = dirs
	r.mu.Unlock()
}

func (r *recorder) handler() Handler {
	return Handler{
		Dirs: func() []string {
			r.mu.Lock()
			defer r.mu.Unlock()
			return append([]string(nil), r.dirs...)
		},
		File:   func(p string) { r.files <- p },
		Rescan: func() { r.rescans <- struct{}{} },
		Error:  func(err error) { r.errs <- err },
	}
}

// start runs the watcher until the test ends and waits for its first
// rescan, which comes after the watches are added.
func start(t *testing.T, period time.Duration, r *recorder) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- Run(ctx, period, r.handler()) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run returned %v after cancel, want nil", err)
		}
	})
	r.waitRescan(t)
}

func (r *recorder) waitRescan(t *testing.T) {
	t.Helper()
	select {
	case <-r.rescans:
	case <-time.After(30 * time.Second):
		t.Fatal("no rescan")
	}
}

// waitFile waits for File(want); earlier reports (a file written after
// it was created is reported twice) are passed over, but a dot file never
// may be reported.
func (r *recorder) waitFile(t *testing.T, want string) {
	t.Helper()
	deadline := time.After(30 * time.Second)
	for {
		select {
		case got := <-r.files:
			if strings.HasPrefix(filepath.Base(got), ".") {
				t.Fatalf("dot file reported: %s", got)
			}
			if got == want {
				return
			}
		case <-deadline:
			t.Fatalf("no File(%s)", want)
		}
	}
}

func write(t *testing.T, p string) {
	t.Helper()
	if err := os.WriteFile(p, []byte("x"), 0o640); err != nil {
		t.Fatal(err)
	}
}

func TestFilesAndDotFiles(t *testing.T) {
	dir := t.TempDir()
	r := newRecorder(dir)
	start(t, time.Hour, r)

	write(t, filepath.Join(dir, "a.json"))
	r.waitFile(t, filepath.Join(dir, "a.json"))
	write(t, filepath.Join(dir, ".a.json.tmp"))
	write(t, filepath.Join(dir, "b.json"))
	r.waitFile(t, filepath.Join(dir, "b.json"))
	// A file renamed into the directory is reported under its new name;
	// the temp name it came from is not.
	write(t, filepath.Join(dir, ".c.tmp"))
	if err := os.Rename(filepath.Join(dir, ".c.tmp"), filepath.Join(dir, "c.json")); err != nil {
		t.Fatal(err)
	}
	r.waitFile(t, filepath.Join(dir, "c.json"))
	// Removing a file reports nothing: the next report is d.json.
	os.Remove(filepath.Join(dir, "c.json"))
	write(t, filepath.Join(dir, "d.json"))
	select {
	case got := <-r.files:
		if got != filepath.Join(dir, "d.json") {
			t.Errorf("File(%s) after a remove, want File(d.json)", got)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("no File(d.json)")
	}
}

// A new sub-directory asks for a rescan and, once Dirs names it, is
// watched; a directory removed and made again is watched again.
func TestNewDirectories(t *testing.T) {
	dir := t.TempDir()
	sub := filepath.Join(dir, "yuko")
	r := newRecorder(dir, sub) // sub does not exist yet: not an error
	start(t, time.Hour, r)

	if err := os.Mkdir(sub, 0o750); err != nil {
		t.Fatal(err)
	}
	r.waitRescan(t)
	write(t, filepath.Join(sub, "t.json"))
	r.waitFile(t, filepath.Join(sub, "t.json"))

	if err := os.RemoveAll(sub); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(sub, 0o750); err != nil {
		t.Fatal(err)
	}
	r.waitRescan(t)
	write(t, filepath.Join(sub, "u.json"))
	r.waitFile(t, filepath.Join(sub, "u.json"))
	select {
	case err := <-r.errs:
		t.Errorf("error reported: %v", err)
	default:
	}
}

func TestPeriodicRescan(t *testing.T) {
	dir := t.TempDir()
	late := filepath.Join(dir, "late")
	r := newRecorder(dir)
	start(t, 5*time.Millisecond, r)
	r.waitRescan(t)
	r.waitRescan(t)
	// A directory Dirs starts naming later is picked up by the timer.
	if err := os.Mkdir(late, 0o750); err != nil {
		t.Fatal(err)
	}
	r.setDirs(dir, late)
	r.waitRescan(t)
	r.waitRescan(t)
	write(t, filepath.Join(late, "x.json"))
	r.waitFile(t, filepath.Join(late, "x.json"))
}

func TestUnwatchableDirectoryIsReported(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "plain")
	write(t, file)
	r := newRecorder(dir, filepath.Join(file, "sub"))
	start(t, time.Hour, r)
	select {
	case err := <-r.errs:
		if !strings.Contains(err.Error(), "not a directory") {
			t.Errorf("error %v, want ENOTDIR", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("no error for a path under a file")
	}
	// The rest is still watched.
	write(t, filepath.Join(dir, "a.json"))
	r.waitFile(t, filepath.Join(dir, "a.json"))
}

// A log appended to in a watched directory, held open as the gateway
// holds runs/decisions.jsonl, wakes nobody until it is closed.
func TestAppendsToAnOpenFileAreNotReported(t *testing.T) {
	dir := t.TempDir()
	r := newRecorder(dir)
	start(t, time.Hour, r)
	log := filepath.Join(dir, "decisions.jsonl")
	f, err := os.OpenFile(log, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o640)
	if err != nil {
		t.Fatal(err)
	}
	r.waitFile(t, log) // created
	for range 100 {
		f.WriteString("{}\n")
	}
	// A file reported after the appends shows the watcher has read past
	// them.
	write(t, filepath.Join(dir, "after.json"))
	for got := range r.files {
		if got == log {
			t.Fatal("an append to a file held open was reported")
		}
		if got == filepath.Join(dir, "after.json") {
			break
		}
	}
	f.Close()
	r.waitFile(t, log)
}
