package tests

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/impyard/impyard/lib/gate"
	"github.com/impyard/impyard/lib/queue"
	"github.com/impyard/impyard/lib/state"
	"github.com/impyard/impyard/lib/supervisor"
	"github.com/impyard/impyard/lib/yard"
)

// scaleN is how many finished tasks and resolved gates the scale yard
// holds: 100,000, or IMPYARD_BENCH_SCALE, which make bench-smoke sets
// small, since it checks that the benchmarks run, not their figures.
var scaleN = func() int {
	if n, err := strconv.Atoi(os.Getenv("IMPYARD_BENCH_SCALE")); err == nil && n > 0 {
		return n
	}
	return 100000
}()

// seedCopies writes n copies of the record file at src into its directory,
// each under an id of its own made by number: the same bytes a real
// record has, with only the id changed.
func seedCopies(b *testing.B, src, oldID, prefix string, n int) {
	b.Helper()
	data, err := os.ReadFile(src)
	if err != nil {
		b.Fatal(err)
	}
	dir := filepath.Dir(src)
	for i := range n {
		newID := fmt.Sprintf("%s-%016d", prefix, i)
		if err := os.WriteFile(filepath.Join(dir, newID+".json"), bytes.ReplaceAll(data, []byte(oldID), []byte(newID)), 0o640); err != nil {
			b.Fatal(err)
		}
	}
}

// peakRSSEnv makes the test binary run its arguments as a command and
// report the command's peak resident memory (see peakRSS).
const peakRSSEnv = "IMPYARD_TEST_PEAK_RSS"

// peakRSS runs args, passing its output through, and writes as the last
// line of standard error its peak resident memory in KiB and its CPU
// time, user and system, in microseconds. It runs in a
// process of its own because Go starts a command sharing the starter's
// memory until exec, and exec counts that memory's peak as the command's:
// measured from a benchmark holding more than the command, the figure is
// the benchmark's.
func peakRSS(args []string) int {
	cmd := exec.Command(args[0], args[1:]...)
	cmd.Stdout, cmd.Stderr = os.Stdout, os.Stderr
	if err := cmd.Run(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	ps := cmd.ProcessState
	fmt.Fprintf(os.Stderr, "\n%d %d %d\n", ps.SysUsage().(*syscall.Rusage).Maxrss, ps.UserTime().Microseconds(), ps.SystemTime().Microseconds())
	return 0
}

// lsRun runs a listing command (one of impyard's by name, any by absolute
// path) against root and returns its wall time,
// its CPU time (user and system: on a machine shared with other work, the
// steadier figure) and its peak resident memory.
func lsRun(b *testing.B, root string, args ...string) (wall, cpu time.Duration, mib float64) {
	b.Helper()
	name := args[0]
	if !filepath.IsAbs(name) {
		name = filepath.Join(bin, name)
	}
	cmd := exec.Command(os.Args[0], append([]string{name}, args[1:]...)...)
	cmd.Env = append(os.Environ(), "IMPYARD_ROOT="+root, peakRSSEnv+"=1")
	var stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = nil, &stderr
	start := time.Now()
	if err := cmd.Run(); err != nil {
		b.Fatalf("%v: %v %s", args, err, stderr.String())
	}
	wall = time.Since(start)
	out := bytes.TrimSpace(stderr.Bytes())
	var kib, user, sys int64
	if _, err := fmt.Sscan(string(out[bytes.LastIndexByte(out, '\n')+1:]), &kib, &user, &sys); err != nil {
		b.Fatalf("%v: no peak memory and CPU time reported: %v: %s", args, err, stderr.String())
	}
	return wall, time.Duration(user+sys) * time.Microsecond, float64(kib) / 1024
}

// BenchmarkScale100k: impq ls and impgate ls over a yard holding 100,000
// finished tasks and 100,000 resolved gates (wall seconds and peak MiB of
// the whole process, aims under 1 s and 100 MiB, and its CPU seconds),
// and a task transition in that yard against one in an empty yard, taking
// turns (x-empty, the full yard's cost over the empty one's, aim at most
// 1.2). Run with -benchtime 100x: b.N is the number of transitions in
// each yard. Also impsup's pass over each yard: a supervisor's first
// (pass-first-s), which reads every file, and its next (pass-s, and
// pass-empty-s in the empty yard), which passes over the files of
// finished work it read before.
func BenchmarkScale100k(b *testing.B) {
	b.StopTimer()
	full, empty := newYardB(b), newYardB(b)
	tid, _, err := queue.Add(full, queue.AddOptions{Imp: "yuko", Text: "scale", By: "b", Actor: "bench"})
	if err != nil {
		b.Fatal(err)
	}
	for _, to := range []string{state.Running, state.Done} {
		if _, err := queue.Move(full, tid, queue.Change{To: to, By: "b", Actor: "bench"}); err != nil {
			b.Fatal(err)
		}
	}
	g, err := gate.File(full, gate.FileOptions{Imp: "yuko", Intent: "message-user", Payload: []byte(`{"text":"hi"}`), By: "b", Actor: "bench"})
	if err != nil {
		b.Fatal(err)
	}
	if _, err := gate.Move(full, g.ID, gate.Change{To: state.Denied, By: "b", Actor: "bench"}); err != nil {
		b.Fatal(err)
	}
	seedCopies(b, full.Path("queue", "yuko", tid+".json"), tid, "t", scaleN)
	seedCopies(b, full.Path("gates", "resolved", g.ID+".json"), g.ID, "g", scaleN)

	qs, qc, qm := lsRun(b, full.Root, "impq", "ls", "--imp", "yuko")
	gs, gc, gm := lsRun(b, full.Root, "impgate", "ls", "--all")

	// impsup's pass, the first one of a supervisor (which reads every
	// file) and the next (which stats those it is done with), in each
	// yard.
	passes := func(y *yard.Yard) (first, next time.Duration) {
		s := &supervisor.Supervisor{Yard: y, Home: b.TempDir(), Logf: func(string, ...any) {}}
		for i, d := range []*time.Duration{&first, &next} {
			start := time.Now()
			if _, err := s.Pass(context.Background()); err != nil {
				b.Fatalf("pass %d: %v", i+1, err)
			}
			*d = time.Since(start)
		}
		return first, next
	}
	pf, pn := passes(full)
	_, pe := passes(empty)

	op := func(y *yard.Yard) time.Duration {
		start := time.Now()
		id, _, err := queue.Add(y, queue.AddOptions{Imp: "yuko", Text: "x", By: "b", Actor: "bench"})
		if err != nil {
			b.Fatal(err)
		}
		if _, err := queue.Move(y, id, queue.Change{To: state.Running, By: "b", Actor: "bench"}); err != nil {
			b.Fatal(err)
		}
		return time.Since(start)
	}
	var e, f time.Duration
	b.StartTimer()
	for i := 0; i < b.N; i++ {
		if i%2 == 0 {
			e += op(empty)
			f += op(full)
		} else {
			f += op(full)
			e += op(empty)
		}
	}
	b.StopTimer()
	b.ReportMetric(qs.Seconds(), "impq-ls-s")
	b.ReportMetric(qc.Seconds(), "impq-ls-cpu-s")
	b.ReportMetric(qm, "impq-ls-MiB")
	b.ReportMetric(gs.Seconds(), "impgate-ls-s")
	b.ReportMetric(gc.Seconds(), "impgate-ls-cpu-s")
	b.ReportMetric(gm, "impgate-ls-MiB")
	b.ReportMetric(f.Seconds()/e.Seconds(), "x-empty")
	b.ReportMetric(pf.Seconds(), "pass-first-s")
	b.ReportMetric(pn.Seconds(), "pass-s")
	b.ReportMetric(pe.Seconds(), "pass-empty-s")
}

// BenchmarkList100k runs impq ls --json and impgate ls --all --json as
// whole processes, each started afresh as from a shell, over a yard of
// 100,000 finished tasks and 100,000 resolved gates whose files impyard
// wrote (copies of a task and a gate it filed and moved, each under an id
// of its own), b.N times each (run with -benchtime 3x), taking turns
// with the floor of each: readfloor, a Go command that reads the
// directory's names, sorts them and copies every file to its output. It
// reports the median wall time (aim under 1 s), the largest peak
// resident memory (aim under 100 MiB) and the CPU time of each, and
// x-floor, the floor's median wall time over the listing's.
func BenchmarkList100k(b *testing.B) {
	b.StopTimer()
	y := newYardB(b)
	tid, _, err := queue.Add(y, queue.AddOptions{Imp: "yuko", Text: "scale", By: "b", Actor: "bench"})
	if err != nil {
		b.Fatal(err)
	}
	for _, to := range []string{state.Running, state.Done} {
		if _, err := queue.Move(y, tid, queue.Change{To: to, By: "b", Actor: "bench"}); err != nil {
			b.Fatal(err)
		}
	}
	g, err := gate.File(y, gate.FileOptions{Imp: "yuko", Intent: "message-user", Payload: []byte(`{"text":"hi"}`), By: "b", Actor: "bench"})
	if err != nil {
		b.Fatal(err)
	}
	if _, err := gate.Move(y, g.ID, gate.Change{To: state.Denied, By: "b", Actor: "bench"}); err != nil {
		b.Fatal(err)
	}
	seedCopies(b, y.Path("queue", "yuko", tid+".json"), tid, "t", scaleN)
	seedCopies(b, y.Path("gates", "resolved", g.ID+".json"), g.ID, "g", scaleN)
	floors := b.TempDir()
	if out, err := exec.Command("go", "build", "-o", floors+"/", "./testdata/readfloor").CombinedOutput(); err != nil {
		b.Fatalf("build readfloor: %v %s", err, out)
	}
	floor := filepath.Join(floors, "readfloor")
	type side struct {
		args      []string
		wall, cpu []time.Duration
		mib       float64
	}
	lists := []struct{ name, dir string }{{"impq", y.Path("queue", "yuko")}, {"impgate", y.Path("gates", "resolved")}}
	sides := map[string]*side{
		"impq":          {args: []string{"impq", "ls", "--imp", "yuko", "--json"}},
		"impgate":       {args: []string{"impgate", "ls", "--all", "--json"}},
		"impq-floor":    {args: []string{floor, lists[0].dir}},
		"impgate-floor": {args: []string{floor, lists[1].dir}},
	}
	b.StartTimer()
	for i := 0; i < b.N; i++ {
		for _, l := range lists {
			for _, name := range []string{l.name, l.name + "-floor"} {
				s := sides[name]
				wall, cpu, mib := lsRun(b, y.Root, s.args...)
				s.wall, s.cpu, s.mib = append(s.wall, wall), append(s.cpu, cpu), max(s.mib, mib)
			}
		}
	}
	b.StopTimer()
	med := func(ds []time.Duration) time.Duration {
		s := append([]time.Duration(nil), ds...)
		sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
		return s[len(s)/2]
	}
	for _, l := range lists {
		s, f := sides[l.name], sides[l.name+"-floor"]
		b.ReportMetric(med(s.wall).Seconds(), l.name+"-ls-s")
		b.ReportMetric(med(s.cpu).Seconds(), l.name+"-ls-cpu-s")
		b.ReportMetric(s.mib, l.name+"-ls-MiB")
		b.ReportMetric(med(f.wall).Seconds(), l.name+"-floor-s")
		b.ReportMetric(med(f.wall).Seconds()/med(s.wall).Seconds(), l.name+"-x-floor")
	}
}
