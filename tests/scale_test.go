package tests

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/impyard/impyard/lib/gate"
	"github.com/impyard/impyard/lib/queue"
	"github.com/impyard/impyard/lib/state"
	"github.com/impyard/impyard/lib/yard"
)

// scaleN is how many finished tasks and resolved gates the scale yard
// holds.
const scaleN = 100000

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

// lsRun runs a listing command against root and returns its wall time,
// its CPU time (user and system: on a machine shared with other work, the
// steadier figure) and its peak resident memory.
func lsRun(b *testing.B, root string, args ...string) (wall, cpu time.Duration, mib float64) {
	b.Helper()
	cmd := exec.Command(filepath.Join(bin, args[0]), args[1:]...)
	cmd.Env = append(os.Environ(), "IMPYARD_ROOT="+root)
	var stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = nil, &stderr
	start := time.Now()
	if err := cmd.Run(); err != nil {
		b.Fatalf("%v: %v %s", args, err, stderr.String())
	}
	wall = time.Since(start)
	ru, _ := cmd.ProcessState.SysUsage().(*syscall.Rusage)
	return wall, cmd.ProcessState.UserTime() + cmd.ProcessState.SystemTime(), float64(ru.Maxrss) / 1024 // KiB to MiB
}

// BenchmarkScale100k: impq ls and impgate ls over a yard holding 100,000
// finished tasks and 100,000 resolved gates (wall seconds and peak MiB of
// the whole process, aims under 1 s and 100 MiB, and its CPU seconds),
// and a task transition in that yard against one in an empty yard, taking
// turns (x-empty, the full yard's cost over the empty one's, aim at most
// 1.2). Run with -benchtime 100x: b.N is the number of transitions in
// each yard.
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
}
