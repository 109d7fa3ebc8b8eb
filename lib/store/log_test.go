package store

import (
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

func TestLogAppendsWholeLines(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "decisions.jsonl")
	var mu sync.Mutex
	var reports []error
	l := NewLog(p, func(err error) { mu.Lock(); reports = append(reports, err); mu.Unlock() })
	if err := l.Append([]byte("{\"n\":1}\n"), true); err != nil {
		t.Fatal(err)
	}
	// Another writer leaves a torn line: the log's next record starts on
	// a line of its own.
	f, _ := os.OpenFile(p, os.O_WRONLY|os.O_APPEND, 0)
	f.WriteString(`{"torn":`)
	f.Close()
	if err := l.Append([]byte("{\"n\":2}\n"), true); err != nil {
		t.Fatal(err)
	}
	// Another writer's whole line: no blank line is added.
	AppendLine(p, []byte("{\"other\":1}\n"))
	if err := l.Append([]byte("{\"n\":3}\n"), true); err != nil {
		t.Fatal(err)
	}
	b, _ := os.ReadFile(p)
	if want := "{\"n\":1}\n{\"torn\":\n{\"n\":2}\n{\"other\":1}\n{\"n\":3}\n"; string(b) != want {
		t.Errorf("log holds %q, want %q", b, want)
	}
	if fi, _ := os.Stat(p); fi.Mode().Perm() != FilePerm {
		t.Errorf("mode %v", fi.Mode().Perm())
	}
	mu.Lock()
	if len(reports) != 3 || reports[0] != nil || reports[2] != nil {
		t.Errorf("reports %v, want three successes", reports)
	}
	mu.Unlock()

	// A record over the limit is refused at once and nothing is written.
	if err := l.Append(make([]byte, MaxLine+1), true); err == nil || !strings.Contains(err.Error(), "over the 1048576 limit") {
		t.Errorf("oversized record: %v", err)
	}
	if err := l.Append(append([]byte(`"`+strings.Repeat("a", MaxLine-3)+`"`), '\n'), true); err != nil {
		t.Errorf("record of MaxLine bytes: %v", err)
	}
	if got, _ := os.ReadFile(p); len(got) != len(b)+MaxLine {
		t.Errorf("log grew by %d bytes, want %d", len(got)-len(b), MaxLine)
	}
}

// Records appended without waiting are all written by the time Sync
// returns, and their outcome goes to report.
func TestLogSyncAndReport(t *testing.T) {
	p := filepath.Join(t.TempDir(), "a.jsonl")
	l := NewLog(p, nil) // no report: outcomes are dropped, nothing panics
	for i := range 100 {
		if err := l.Append([]byte(`{"i":`+strings.Repeat("1", i%5+1)+"}\n"), false); err != nil {
			t.Fatal(err)
		}
	}
	if err := l.Sync(); err != nil {
		t.Fatal(err)
	}
	good, bad := readLines(t, p)
	if len(good) != 100 || len(bad) != 0 {
		t.Errorf("%d good, %v bad; want 100", len(good), bad)
	}
	// Sync with nothing queued returns at once.
	if err := l.Sync(); err != nil {
		t.Error(err)
	}
}

func TestLogRefusesAndRecovers(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "a.jsonl")
	reported := make(chan error, 10)
	l := NewLog(p, func(err error) { reported <- err })
	l.Append([]byte("{}\n"), true)
	<-reported

	// A hard link planted at the path is refused and reported.
	os.Remove(p)
	other := filepath.Join(dir, "other")
	os.WriteFile(other, nil, 0o640)
	os.Link(other, p)
	err := l.Append([]byte("{\"x\":1}\n"), true)
	if err == nil || !strings.Contains(err.Error(), "not a regular file with one link") {
		t.Errorf("append to a hard link: %v", err)
	}
	if rep := <-reported; rep == nil || rep.Error() != err.Error() {
		t.Errorf("reported %v, want %v", rep, err)
	}
	if b, _ := os.ReadFile(other); len(b) != 0 {
		t.Errorf("wrote %q through the hard link", b)
	}
	// The path made right again: the log writes there.
	os.Remove(p)
	if err := l.Append([]byte("{\"y\":1}\n"), true); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(p); string(b) != "{\"y\":1}\n" {
		t.Errorf("log holds %q", b)
	}
	// A log replaced by another file (not moved away) is followed too.
	os.WriteFile(p+".new", []byte("{\"z\":0}\n"), 0o640)
	os.Rename(p+".new", p)
	l.Append([]byte("{\"z\":1}\n"), true)
	if b, _ := os.ReadFile(p); string(b) != "{\"z\":0}\n{\"z\":1}\n" {
		t.Errorf("after replace the log holds %q", b)
	}
}

// When another process holds the directory's lock, the log waits for it
// like any writer, up to LockTimeout.
func TestLogWaitsForTheDirectoryLock(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "a.jsonl")
	l := NewLog(p, nil)
	if err := l.Append([]byte("{}\n"), true); err != nil {
		t.Fatal(err)
	}
	old := LockTimeout
	LockTimeout = 50 * time.Millisecond
	defer func() { LockTimeout = old }()
	unlock, ok, err := TryLock(filepath.Join(dir, lockName))
	if err != nil || !ok {
		t.Fatal(ok, err)
	}
	err = l.Append([]byte("{\"late\":1}\n"), true)
	if !errors.Is(err, ErrBusy) {
		t.Errorf("append under a held lock: %v, want ErrBusy", err)
	}
	unlock()
	LockTimeout = 5 * time.Second
	if err := l.Append([]byte("{\"after\":1}\n"), true); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(p); string(b) != "{}\n{\"after\":1}\n" {
		t.Errorf("log holds %q", b)
	}
}

// A record appended without waiting is written by the log's own writer,
// with no Sync to push it, and its failure goes to report, not to the
// caller.
func TestLogWritesWithoutWaiting(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "a.jsonl")
	reported := make(chan error, 10)
	l := NewLog(p, func(err error) { reported <- err })
	if err := l.Append([]byte("{\"n\":1}\n"), false); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-reported:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("a record appended without waiting was never written")
	}
	if b, _ := os.ReadFile(p); string(b) != "{\"n\":1}\n" {
		t.Errorf("log holds %q after its write was reported", b)
	}
	// Planted hard link: the caller that did not wait hears nothing.
	os.Remove(p)
	other := filepath.Join(dir, "other")
	os.WriteFile(other, nil, 0o640)
	os.Link(other, p)
	if err := l.Append([]byte("{\"n\":2}\n"), false); err != nil {
		t.Errorf("Append without waiting returned %v", err)
	}
	if err := <-reported; err == nil {
		t.Error("the failed write was reported as a success")
	}
}

// Sync with nothing queued writes nothing: no file, no report.
func TestLogSyncWithNothingQueued(t *testing.T) {
	p := filepath.Join(t.TempDir(), "a.jsonl")
	var n int
	var mu sync.Mutex
	l := NewLog(p, func(error) { mu.Lock(); n++; mu.Unlock() })
	if err := l.Sync(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(p); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("Sync of an empty log made the file: %v", err)
	}
	mu.Lock()
	defer mu.Unlock()
	if n != 0 {
		t.Errorf("%d reports for no writes", n)
	}
}

// A log opened on a file of one torn byte still closes that line off
// before its first record.
func TestLogOpensOnATornByte(t *testing.T) {
	p := filepath.Join(t.TempDir(), "a.jsonl")
	os.WriteFile(p, []byte("{"), 0o640)
	l := NewLog(p, nil)
	if err := l.Append([]byte("{\"n\":1}\n"), true); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(p); string(b) != "{\n{\"n\":1}\n" {
		t.Errorf("log holds %q", b)
	}
}

// The log closes each file it stops using: rotating it many times does
// not leave a descriptor open per rotation.
func TestLogClosesReplacedFiles(t *testing.T) {
	fds := func() int {
		entries, err := os.ReadDir("/proc/self/fd")
		if err != nil {
			t.Skip("no /proc/self/fd:", err)
		}
		return len(entries)
	}
	p := filepath.Join(t.TempDir(), "a.jsonl")
	l := NewLog(p, nil)
	l.Append([]byte("{}\n"), true)
	before := fds()
	for i := range 50 {
		os.Rename(p, p+"."+strconv.Itoa(i))
		if err := l.Append([]byte("{}\n"), true); err != nil {
			t.Fatal(err)
		}
	}
	if after := fds(); after > before+5 {
		t.Errorf("%d descriptors open after 50 rotations, %d before", after, before)
	}
}

// watchOpens counts, through inotify, the opens of each file in dir from
// now until the returned function is called. The kernel folds an event
// into an identical one not yet read, so a count says whether a file was
// opened, not always how often.
func watchOpens(t *testing.T, dir string) func() map[string]int {
	t.Helper()
	fd, err := unix.InotifyInit1(unix.IN_NONBLOCK | unix.IN_CLOEXEC)
	if err != nil {
		t.Skipf("no inotify: %v", err)
	}
	t.Cleanup(func() { unix.Close(fd) })
	if _, err := unix.InotifyAddWatch(fd, dir, unix.IN_OPEN); err != nil {
		t.Fatal(err)
	}
	return func() map[string]int {
		n := map[string]int{}
		buf := make([]byte, 64<<10)
		for {
			k, err := unix.Read(fd, buf)
			if errors.Is(err, unix.EAGAIN) {
				return n
			}
			if err != nil {
				t.Fatal(err)
			}
			for off := 0; off+unix.SizeofInotifyEvent <= k; {
				ev := (*unix.InotifyEvent)(unsafe.Pointer(&buf[off]))
				name := buf[off+unix.SizeofInotifyEvent : off+unix.SizeofInotifyEvent+int(ev.Len)]
				if s := strings.TrimRight(string(name), "\x00"); s != "" {
					n[s]++
				}
				off += unix.SizeofInotifyEvent + int(ev.Len)
			}
		}
	}
}

// The log keeps its file and the directory's lock file open between
// writes: once open, many writes open neither again (one lstat per write
// checks the path still names them).
func TestLogKeepsItsFilesOpen(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "a.jsonl")
	l := NewLog(p, nil)
	if err := l.Append([]byte("{\"n\":0}\n"), true); err != nil {
		t.Fatal(err)
	}
	opens := watchOpens(t, dir)
	for i := range 5 {
		if err := l.Append([]byte("{\"n\":"+strconv.Itoa(i+1)+"}\n"), true); err != nil {
			t.Fatal(err)
		}
	}
	if n := opens(); n["a.jsonl"] != 0 || n[lockName] != 0 {
		t.Errorf("5 writes opened the log %d times and the lock file %d times, want neither", n["a.jsonl"], n[lockName])
	}
	good, bad := readLines(t, p)
	if len(good) != 6 || len(bad) != 0 || good[5] != `{"n":5}` {
		t.Errorf("log holds %q, bad %v", good, bad)
	}
	// Moved away, the log is opened again where the path points.
	os.Rename(p, p+".1")
	opens = watchOpens(t, dir)
	if err := l.Append([]byte("{\"n\":6}\n"), true); err != nil {
		t.Fatal(err)
	}
	if n := opens(); n["a.jsonl"] == 0 {
		t.Error("after a rotation the log was not opened again")
	}
	if b, _ := os.ReadFile(p); string(b) != "{\"n\":6}\n" {
		t.Errorf("new log holds %q", b)
	}
}

// Callers that do not wait are not held up until more than maxPending
// bytes are queued: with the writer stuck behind another process's lock,
// exactly maxPending queued still returns at once, one byte more waits
// for the write.
func TestLogBackpressureStartsOverMaxPending(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "a.jsonl")
	l := NewLog(p, nil)
	lockPath := filepath.Join(dir, lockName)
	unlock, err := Lock(lockPath)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { unlock() }()
	if err := l.Append([]byte("{\"n\":0}\n"), false); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for !blockedOn(t, inode(t, lockPath)) {
		if time.Now().After(deadline) {
			t.Fatal("the writer never waited on the lock")
		}
		time.Sleep(time.Millisecond)
	}
	// The writer holds the first record; queue exactly maxPending more.
	big := []byte(`"` + strings.Repeat("a", MaxLine-3) + "\"\n")
	queued := make(chan error, 1)
	go func() {
		for range maxPending / len(big) {
			if err := l.Append(big, false); err != nil {
				queued <- err
				return
			}
		}
		queued <- nil
	}()
	select {
	case err := <-queued:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(5 * time.Second):
		unlock()
		<-queued
		t.Fatal("Append without waiting blocked with exactly maxPending bytes queued")
	}
	over := make(chan error, 1)
	go func() { over <- l.Append([]byte("{}\n"), false) }()
	select {
	case err := <-over:
		t.Fatalf("Append with more than maxPending queued returned (%v) before its write", err)
	case <-time.After(50 * time.Millisecond):
	}
	unlock()
	unlock = func() {}
	if err := <-over; err != nil {
		t.Fatal(err)
	}
	good, bad := readLines(t, p)
	if len(good) != 2+maxPending/len(big) || len(bad) != 0 || good[0] != `{"n":0}` || good[len(good)-1] != "{}" {
		t.Errorf("log holds %d lines, bad %v", len(good), bad)
	}
}

// The writer goroutine runs only while there is something to write: once
// everything is written it ends.
func TestLogWriterEnds(t *testing.T) {
	l := NewLog(filepath.Join(t.TempDir(), "a.jsonl"), nil)
	for i := range 3 {
		l.Append([]byte("{}\n"), i == 2)
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		l.mu.Lock()
		writing := l.writing
		l.mu.Unlock()
		if !writing {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the writer goroutine still runs with nothing to write")
		}
		time.Sleep(time.Millisecond)
	}
	// A later record starts a writer again.
	if err := l.Append([]byte("{}\n"), true); err != nil {
		t.Fatal(err)
	}
	if good, _ := readLines(t, l.path); len(good) != 4 {
		t.Errorf("log holds %d lines, want 4", len(good))
	}
}

// Records nobody waits for ride with the next record somebody does: one
// write for all of them, made by the caller that waits.
func TestLogCarriesUnwaitedRecords(t *testing.T) {
	old := lag
	lag = time.Hour
	defer func() { lag = old }()
	p := filepath.Join(t.TempDir(), "a.jsonl")
	var mu sync.Mutex
	var writes int
	l := NewLog(p, func(err error) {
		if err != nil {
			t.Error(err)
		}
		mu.Lock()
		writes++
		mu.Unlock()
	})
	for i := range 3 {
		if err := l.Append([]byte("{\"n\":"+strconv.Itoa(i)+"}\n"), false); err != nil {
			t.Fatal(err)
		}
	}
	time.Sleep(50 * time.Millisecond) // time enough for a writer to have run
	if good, _ := readLines(t, p); len(good) != 0 {
		t.Fatalf("records nobody waits for were written at once: %q", good)
	}
	if err := l.Append([]byte("{\"n\":3}\n"), true); err != nil {
		t.Fatal(err)
	}
	good, bad := readLines(t, p)
	if len(good) != 4 || len(bad) != 0 || good[0] != `{"n":0}` || good[3] != `{"n":3}` {
		t.Errorf("log holds %q, bad %v", good, bad)
	}
	mu.Lock()
	defer mu.Unlock()
	if writes != 1 {
		t.Errorf("%d writes for four records, want one", writes)
	}
}

// A lock file replaced after the log opened it is followed: the log
// waits for whoever holds the new one instead of locking the old inode
// no one else uses any more.
func TestLogFollowsAReplacedLockFile(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "a.jsonl")
	l := NewLog(p, nil)
	if err := l.Append([]byte("{}\n"), true); err != nil {
		t.Fatal(err)
	}
	lockPath := filepath.Join(dir, lockName)
	if err := os.WriteFile(lockPath+".new", nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(lockPath+".new", lockPath); err != nil {
		t.Fatal(err)
	}
	unlock, ok, err := TryLock(lockPath)
	if err != nil || !ok {
		t.Fatal(ok, err)
	}
	old := LockTimeout
	LockTimeout = 50 * time.Millisecond
	defer func() { LockTimeout = old }()
	if err := l.Append([]byte("{\"held\":1}\n"), true); !errors.Is(err, ErrBusy) {
		t.Errorf("append while the new lock file is held: %v, want ErrBusy", err)
	}
	unlock()
	if err := l.Append([]byte("{\"n\":2}\n"), true); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(p); string(b) != "{}\n{\"n\":2}\n" {
		t.Errorf("log holds %q", b)
	}
}

// TestLogAnswersWhoCameDuringAWrite: a caller that writes its own record
// hands those who came meanwhile to a writer before it goes: a Sync
// arriving during the write, with nothing of its own to write, returns
// without any later record to carry it.
func TestLogAnswersWhoCameDuringAWrite(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "a.jsonl")
	l := NewLog(p, nil)
	unlock, ok, err := TryLock(filepath.Join(dir, lockName))
	if err != nil || !ok {
		t.Fatal(ok, err)
	}
	first := make(chan error, 1)
	go func() { first <- l.Append([]byte("{\"n\":1}\n"), true) }()
	waitLog(t, l, "writing", func() bool { return l.writing })
	second := make(chan error, 1)
	go func() { second <- l.Sync() }()
	waitLog(t, l, "waiting", func() bool { return len(l.waiters) == 1 })
	unlock()
	for i, ch := range []chan error{first, second} {
		select {
		case err := <-ch:
			if err != nil {
				t.Fatalf("append %d: %v", i+1, err)
			}
		case <-time.After(2 * time.Second):
			t.Fatalf("append %d, made during another's write, was never answered", i+1)
		}
	}
	if b, _ := os.ReadFile(p); string(b) != "{\"n\":1}\n" {
		t.Errorf("log holds %q", b)
	}
}
