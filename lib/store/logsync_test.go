package store

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// syncRecorder is a Log's sync that keeps what the file held each time
// it was synced, and can hold a sync until released.
type syncRecorder struct {
	mu     sync.Mutex
	synced []string      // the file's content at each sync
	hold   chan struct{} // when set, the next sync waits for it to close
	held   chan struct{} // closed when a held sync has begun
	fail   error         // the next sync's error, once
}

func (r *syncRecorder) sync(f *os.File) error {
	b, err := os.ReadFile(f.Name())
	if err != nil {
		return err
	}
	r.mu.Lock()
	hold, held, fail := r.hold, r.held, r.fail
	r.hold, r.fail = nil, nil
	r.synced = append(r.synced, string(b))
	r.mu.Unlock()
	if hold != nil {
		close(held)
		<-hold
	}
	if fail != nil {
		return fail
	}
	return unix.Fdatasync(int(f.Fd()))
}

func (r *syncRecorder) syncs() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.synced...)
}

// waitLog waits until cond, read under the log's lock, holds: the log's
// own state is the event waited on.
func waitLog(t *testing.T, l *Log, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(time.Millisecond) {
		l.mu.Lock()
		ok := cond()
		l.mu.Unlock()
		if ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("never %s", what)
		}
	}
}

// A caller that waits for its record returns only after a sync of the
// file that holds it; callers that come while a sync is under way share
// the next one (group commit), and none returns before it.
func TestLogSyncsBeforeAnswering(t *testing.T) {
	p := filepath.Join(t.TempDir(), "a.jsonl")
	rec := &syncRecorder{hold: make(chan struct{}), held: make(chan struct{})}
	release := rec.hold
	l := NewLogWith(p, nil, LogOptions{Sync: rec.sync})
	first := make(chan error, 1)
	go func() { first <- l.Append([]byte("{\"n\":0}\n"), true) }()
	select {
	case <-rec.held:
	case err := <-first:
		t.Fatalf("Append returned (%v) without a sync", err)
	}
	const n = 7
	done := make(chan error, n)
	for i := 1; i <= n; i++ {
		go func() { done <- l.Append([]byte("{\"n\":"+string(rune('0'+i))+"}\n"), true) }()
	}
	waitLog(t, l, "queued seven waiters", func() bool { return len(l.waiters) == n })
	select {
	case err := <-first:
		t.Fatalf("Append returned (%v) while its sync was held", err)
	default:
	}
	close(release)
	if err := <-first; err != nil {
		t.Fatal(err)
	}
	for range n {
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	}
	got := rec.syncs()
	if len(got) != 2 {
		t.Fatalf("%d syncs for two batches: %q", len(got), got)
	}
	if got[0] != "{\"n\":0}\n" {
		t.Errorf("first sync covered %q, want the first record alone", got[0])
	}
	for i := 0; i <= n; i++ {
		if line := "{\"n\":" + string(rune('0'+i)) + "}\n"; !strings.Contains(got[1], line) {
			t.Errorf("the last sync did not cover %q: %q", line, got[1])
		}
	}
	if b, _ := os.ReadFile(p); string(b) != got[1] {
		t.Errorf("log holds %q, last synced %q", b, got[1])
	}
}

// Records nobody waits for are synced too, with the flusher's write.
func TestLogSyncsUnwaitedRecords(t *testing.T) {
	p := filepath.Join(t.TempDir(), "a.jsonl")
	rec := &syncRecorder{}
	reported := make(chan error, 1)
	l := NewLogWith(p, func(err error) { reported <- err }, LogOptions{Sync: rec.sync})
	if err := l.Append([]byte("{}\n"), false); err != nil {
		t.Fatal(err)
	}
	if err := <-reported; err != nil {
		t.Fatal(err)
	}
	if got := rec.syncs(); len(got) != 1 || got[0] != "{}\n" {
		t.Errorf("syncs %q, want one of the record", got)
	}
}

// A batch whose sync fails is cut back off the file: no record of it is
// left to say what its callers were told did not happen. The next batch
// writes where it stood.
func TestLogCutsBackAFailedSync(t *testing.T) {
	p := filepath.Join(t.TempDir(), "a.jsonl")
	rec := &syncRecorder{}
	l := NewLogWith(p, nil, LogOptions{Sync: rec.sync})
	if err := l.Append([]byte("{\"n\":1}\n"), true); err != nil {
		t.Fatal(err)
	}
	rec.mu.Lock()
	rec.fail = syscall.EIO
	rec.mu.Unlock()
	l.Append([]byte("{\"allow\":2}\n"), false)
	err := l.Append([]byte("{\"allow\":3}\n"), true)
	if !errors.Is(err, syscall.EIO) || !strings.Contains(err.Error(), p) {
		t.Fatalf("append with a failing sync: %v, want EIO naming %s", err, p)
	}
	if b, _ := os.ReadFile(p); string(b) != "{\"n\":1}\n" {
		t.Errorf("after a failed sync the log holds %q", b)
	}
	if err := l.Append([]byte("{\"deny\":3}\n"), true); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(p); string(b) != "{\"n\":1}\n{\"deny\":3}\n" {
		t.Errorf("log holds %q", b)
	}
}

// Unsynced leaves batches to the page cache (what the benchmark compares
// against): the sync is never called.
func TestLogUnsynced(t *testing.T) {
	p := filepath.Join(t.TempDir(), "a.jsonl")
	rec := &syncRecorder{}
	l := NewLogWith(p, nil, LogOptions{Sync: rec.sync, Unsynced: true})
	if err := l.Append([]byte("{}\n"), true); err != nil {
		t.Fatal(err)
	}
	if got := rec.syncs(); len(got) != 0 {
		t.Errorf("an unsynced log synced %d times", len(got))
	}
}

// mountTmpfs mounts a tmpfs of size bytes on a new directory, for a real
// ENOSPC; it skips the test where mounting is not allowed.
func mountTmpfs(t *testing.T, size int) string {
	t.Helper()
	dir := t.TempDir()
	if err := unix.Mount("tmpfs", dir, "tmpfs", 0, "size="+strconv.Itoa(size)); err != nil {
		t.Skipf("cannot mount a tmpfs for a full disk (needs root): %v", err)
	}
	t.Cleanup(func() { unix.Unmount(dir, unix.MNT_DETACH) })
	return dir
}

// fill writes a file in dir until the file system is full.
func fill(t *testing.T, dir string) {
	t.Helper()
	f, err := os.Create(filepath.Join(dir, "filler"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	page := bytes.Repeat([]byte{'x'}, 512)
	for {
		if _, err := f.Write(page); err != nil {
			if !errors.Is(err, syscall.ENOSPC) {
				t.Fatal(err)
			}
			return
		}
	}
}

// A batch the disk has room for only part of is cut back to where the
// file ended before it, on a real full file system: no torn record, and
// no whole record of the failed batch, is left behind.
func TestLogCutsBackAShortWrite(t *testing.T) {
	dir := mountTmpfs(t, 64<<10)
	p := filepath.Join(dir, "a.jsonl")
	l := NewLog(p, nil)
	first := "{\"n\":1}\n"
	if err := l.Append([]byte(first), true); err != nil {
		t.Fatal(err)
	}
	fill(t, dir)
	// The log's one page has room for about 4 KiB more: a batch of three
	// records of 1.5 KiB each is written in part.
	rec := func(i int) []byte {
		return []byte("{\"allow\":" + strconv.Itoa(i) + ",\"pad\":\"" + strings.Repeat("p", 1500) + "\"}\n")
	}
	l.Append(rec(1), false)
	l.Append(rec(2), false)
	err := l.Append(rec(3), true)
	if !errors.Is(err, syscall.ENOSPC) || !strings.Contains(err.Error(), p) {
		t.Fatalf("append to a full disk: %v, want ENOSPC naming %s", err, p)
	}
	if b, _ := os.ReadFile(p); string(b) != first {
		t.Errorf("after a short write the log holds %d bytes (%.40q...), want only the first record", len(b), b)
	}
	// Room again: the log goes on from its last whole record.
	os.Remove(filepath.Join(dir, "filler"))
	if err := l.Append([]byte("{\"n\":2}\n"), true); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(p); string(b) != first+"{\"n\":2}\n" {
		t.Errorf("log holds %d bytes (%.60q...)", len(b), b)
	}
}
