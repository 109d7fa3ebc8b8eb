package queue

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/impyard/impyard/lib/notify"
	"github.com/impyard/impyard/lib/state"
	"github.com/impyard/impyard/lib/store"
	"github.com/impyard/impyard/lib/yard"
	"github.com/impyard/impyard/lib/yard/yardtest"
)

// cycle moves a task through running -> failed -> waiting -> running ...,
// every step a legal transition with its journal and audit records.
var cycle = []string{state.Running, state.Failed, state.Waiting}

func benchYard(b *testing.B) *yard.Yard {
	y := yardtest.New(b)
	return y
}

// floorWrite is one write of the floor, the bare cost the store cannot
// beat: temp file, write, fsync, rename, directory fsync of the same
// bytes, no lock, no read, no events. An error fails the benchmark, so a
// floor that failed is never reported as a fast one.
func floorWrite(dir, tmp, dst string, data []byte) error {
	f, err := os.OpenFile(tmp, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o640)
	if err != nil {
		return err
	}
	if _, err := f.Write(data); err != nil {
		f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	if err := os.Rename(tmp, dst); err != nil {
		return err
	}
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}

// powerCutFloor is the floor of a transition that survives a power cut,
// as a transition keeps its records: the marker's 32 bytes written over
// in place and synced, the floor write, then two lines appended each to
// its own log and synced, and the marker cleared unsynced. No lock, no
// read, no encoding: the four syncs a transition cannot skip and nothing
// else.
func powerCutFloor(dir, tmp, dst string, data, line []byte) error {
	mark := func(b byte, sync bool) error {
		f, err := os.OpenFile(filepath.Join(dir, "mark"), os.O_CREATE|os.O_WRONLY, 0o600)
		if err != nil {
			return err
		}
		defer f.Close()
		if _, err := f.WriteAt(bytes.Repeat([]byte{b}, 32), 0); err != nil {
			return err
		}
		if sync {
			return f.Sync()
		}
		return nil
	}
	if err := mark('t', true); err != nil {
		return err
	}
	if err := floorWrite(dir, tmp, dst, data); err != nil {
		return err
	}
	for _, log := range []string{"audit.jsonl", "journal.jsonl"} {
		f, err := os.OpenFile(filepath.Join(dir, log), os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o640)
		if err != nil {
			return err
		}
		_, err = f.Write(line)
		if err == nil {
			err = f.Sync()
		}
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return err
		}
	}
	return mark(' ', false)
}

// transitionRounds is how many rounds BenchmarkTransition splits its
// transitions into, each giving a ratio of its own: on a machine shared
// with other work one figure is not enough.
const transitionRounds = 5

// BenchmarkTransition reports task transitions per second through the
// whole library (lock, read, decode, state check, marker, write, rename,
// directory fsync, journal and audit append, each synced) against two
// floors measured in the same run, on the same file system, taking turns
// with it transition by transition so a disk that other work slows for a
// while slows all three alike: the floor (floorWrite, a bare durable
// write) and the power-cut floor (powerCutFloor, the four syncs a
// transition keeps and nothing else). The b.N transitions run in five
// rounds; each round's ratios are logged, and x-floor and
// x-power-cut-floor are the medians of the five.
//
// Each task takes three transitions, as real tasks do, so files keep a
// realistic size. The third, into failed, is an event a notification may
// be asked for; with a receiver configured it writes its outbox entry too
// (lib/notify), a second durable write. The benchmark's yard, like a yard
// without notifications, has none, so no entry is owed: floor-writes/op
// counts the durable writes a transition made on average (the outbox
// entries found at the end included).
func BenchmarkTransition(b *testing.B) {
	y := benchYard(b)
	b.StopTimer()
	ids := make([]string, b.N/len(cycle)+1)
	for i := range ids {
		id, _, err := Add(y, AddOptions{Imp: "yuko", Text: "benchmark", By: "b", Actor: "bench"})
		if err != nil {
			b.Fatal(err)
		}
		ids[i] = id
	}
	data, _ := os.ReadFile(y.Path("queue", "yuko", ids[0]+".json"))
	line := append(bytes.Repeat([]byte{'x'}, 240), '\n')
	fdir := b.TempDir()
	tmp, dst := filepath.Join(fdir, "floor.tmp"), filepath.Join(fdir, "floor.json")
	var el, fl, pl [transitionRounds]time.Duration
	b.StartTimer()
	for i := 0; i < b.N; i++ {
		r := i * transitionRounds / b.N
		to := cycle[i%len(cycle)]
		start := time.Now()
		if _, err := Move(y, ids[i/len(cycle)], Change{To: to, By: "b", Actor: "bench"}); err != nil {
			b.Fatal(err)
		}
		el[r] += time.Since(start)
		start = time.Now()
		if err := floorWrite(fdir, tmp, dst, data); err != nil {
			b.Fatal(err)
		}
		fl[r] += time.Since(start)
		start = time.Now()
		if err := powerCutFloor(fdir, tmp, dst, data, line); err != nil {
			b.Fatal(err)
		}
		pl[r] += time.Since(start)
	}
	b.StopTimer()
	owed, bad := notify.Pending(y)
	if len(bad) > 0 {
		b.Fatal(bad)
	}
	var xf, xp []float64
	var elAll, flAll, plAll time.Duration
	for r := range transitionRounds {
		if el[r] == 0 {
			continue // fewer transitions than rounds
		}
		xf = append(xf, fl[r].Seconds()/el[r].Seconds())
		xp = append(xp, pl[r].Seconds()/el[r].Seconds())
		elAll, flAll, plAll = elAll+el[r], flAll+fl[r], plAll+pl[r]
	}
	if len(xf) == transitionRounds {
		b.Logf("x-floor in %d rounds %s, median %.2f; x-power-cut-floor %s, median %.2f",
			transitionRounds, ratios(xf), median(xf), ratios(xp), median(xp))
	}
	b.ReportMetric(float64(b.N)/elAll.Seconds(), "transitions/s")
	b.ReportMetric(float64(b.N)/flAll.Seconds(), "floor/s")
	b.ReportMetric(float64(b.N)/plAll.Seconds(), "power-cut-floor/s")
	b.ReportMetric(median(xf), "x-floor")
	b.ReportMetric(median(xp), "x-power-cut-floor")
	b.ReportMetric(float64(b.N+len(owed))/float64(b.N), "floor-writes/op")
}

func ratios(xs []float64) string {
	s := make([]string, len(xs))
	for i, x := range xs {
		s[i] = fmt.Sprintf("%.2f", x)
	}
	return strings.Join(s, " ")
}

func median(xs []float64) float64 {
	s := append([]float64(nil), xs...)
	sort.Float64s(s)
	return s[len(s)/2]
}

// seedDone writes n finished tasks straight into a queue directory.
func seedDone(b *testing.B, y *yard.Yard, n int) {
	d, err := y.QueueDir("yuko")
	if err != nil {
		b.Fatal(err)
	}
	now := time.Now().UTC()
	for i := 0; i < n; i++ {
		t := Task{Schema: store.Schema(Kind, Major), ID: fmt.Sprintf("t-0000%012d", i), Imp: "yuko", State: state.Done,
			Kind: Research, Text: "old", Attempt: 1, Created: now, Updated: now, Unique: fmt.Sprintf("u%d", i%100),
			History: []state.Transition{{To: state.Waiting, At: now}, {From: state.Waiting, To: state.Running, At: now}, {From: state.Running, To: state.Done, At: now}}}
		buf, _ := store.Encode(t)
		if err := os.WriteFile(filepath.Join(d.Path(), t.ID+".json"), buf, 0o640); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkAddUniqueAt10k compares adding a task with a unique key (and
// moving it out of waiting) in a queue that already holds 10,000 finished
// tasks with doing the same in an empty queue: the ratio stays near 1
// because neither operation scans the directory. The two yards take turns,
// operation by operation, so warm-up and changes of load on the host weigh
// on both alike.
func BenchmarkAddUniqueAt10k(b *testing.B) {
	op := func(y *yard.Yard, i int) time.Duration {
		start := time.Now()
		id, _, err := Add(y, AddOptions{Imp: "yuko", Text: "x", Unique: fmt.Sprintf("u%d", i%100), By: "b", Actor: "bench"})
		if err != nil {
			b.Fatal(err)
		}
		if _, err := Move(y, id, Change{To: state.Cancelled, By: "b", Actor: "bench"}); err != nil {
			b.Fatal(err)
		}
		return time.Since(start)
	}
	b.StopTimer()
	empty, full := benchYard(b), benchYard(b)
	seedDone(b, full, 10000)
	b.StartTimer()
	var e, f time.Duration
	for i := 0; i < b.N; i++ {
		if i%2 == 0 {
			e += op(empty, i)
			f += op(full, i)
		} else {
			f += op(full, i)
			e += op(empty, i)
		}
	}
	b.ReportMetric(float64(b.N)/f.Seconds(), "ops/s-at-10k")
	b.ReportMetric(float64(b.N)/e.Seconds(), "ops/s-empty")
	b.ReportMetric(e.Seconds()/f.Seconds(), "x-empty")
}

// BenchmarkList10k reports the cost of listing a queue of 10,000 tasks,
// per task, which should stay constant as the queue grows.
func BenchmarkList10k(b *testing.B) {
	y := benchYard(b)
	seedDone(b, y, 10000)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		tasks, bad := List(y, Filter{State: state.Waiting})
		if len(bad) > 0 || len(tasks) != 0 {
			b.Fatal(bad)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Microseconds())/float64(b.N)/10000, "µs/task")
}
