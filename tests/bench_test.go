package tests

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/impyard/impyard/internal/approvaltest"
	"github.com/impyard/impyard/lib/approval"
	"github.com/impyard/impyard/lib/box"
	"github.com/impyard/impyard/lib/event"
	"github.com/impyard/impyard/lib/gate"
	"github.com/impyard/impyard/lib/netns"
	"github.com/impyard/impyard/lib/queue"
	runrec "github.com/impyard/impyard/lib/run"
	"github.com/impyard/impyard/lib/state"
	"github.com/impyard/impyard/lib/store"
	"github.com/impyard/impyard/lib/yard"
)

// BenchmarkAddVsNq runs impq add as a whole process and nq (Debian's
// file-and-flock queue) enqueuing a job, taking turns, b.N of each, and
// reports both rates and their ratio (x-nq): on a machine shared with
// other work, a busy moment slows both alike. nq runs each job in a
// process it leaves behind; the benchmark waits for it (nq -w, untimed)
// before the next impq add, which it would otherwise slow.
//
// Go floors take the same turns, so the figures say what is impq's own:
// an empty Go command (go-empty, the runtime's start and exit); one that
// does only the file system work of a durable add, a fsynced file renamed
// into place, its directory fsynced and two appends (go-floor); and the
// same keeping what impq add keeps for a power cut, a marker synced
// before the file and both appends synced (go-power-cut-floor, five syncs
// to go-floor's two). x-floor is impq's rate as a multiple of go-floor's
// (aim 0.85), x-power-cut-floor of go-power-cut-floor's; floor-x-nq is
// go-floor's as a multiple of nq's, the most x-nq a Go add that keeps
// both fsyncs can reach. The ratios are the medians of five rounds, each
// round's logged.
func BenchmarkAddVsNq(b *testing.B) {
	nq, err := exec.LookPath("nq")
	if err != nil {
		b.Skip("nq is not installed (apt-get install nq)")
	}
	root := newYardB(b).Root
	nqdir := b.TempDir()
	floors := b.TempDir()
	floorDir := filepath.Join(floors, "yard")
	if err := os.MkdirAll(filepath.Join(floorDir, ".tmp"), 0o750); err != nil {
		b.Fatal(err)
	}
	for _, p := range []string{"goempty", "addfloor"} {
		if out, err := exec.Command("go", "build", "-o", floors+"/", "./testdata/"+p).CombinedOutput(); err != nil {
			b.Fatalf("build %s: %v %s", p, err, out)
		}
	}
	// timed runs a command to its end and returns how long it took.
	timed := func(cmd *exec.Cmd) time.Duration {
		start := time.Now()
		if out, err := cmd.CombinedOutput(); err != nil {
			b.Fatalf("%s: %v %s", cmd, err, out)
		}
		return time.Since(start)
	}
	const rounds = 5
	var impq, nqTime, empty, floor, pcut [rounds]time.Duration
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		r := i * rounds / b.N
		cmd := exec.Command(filepath.Join(bin, "impq"), "add", "--imp", "yuko", "benchmark task")
		cmd.Env = append(os.Environ(), "IMPYARD_ROOT="+root)
		impq[r] += timed(cmd)
		cmd = exec.Command(nq, "-q", "true")
		cmd.Env = append(os.Environ(), "NQDIR="+nqdir)
		nqTime[r] += timed(cmd)
		wait := exec.Command(nq, "-w")
		wait.Env = cmd.Env
		if out, err := wait.CombinedOutput(); err != nil {
			b.Fatalf("nq -w: %v %s", err, out)
		}
		empty[r] += timed(exec.Command(filepath.Join(floors, "goempty")))
		floor[r] += timed(exec.Command(filepath.Join(floors, "addfloor"), floorDir))
		pcut[r] += timed(exec.Command(filepath.Join(floors, "addfloor"), "-power-cut", floorDir))
	}
	b.StopTimer()
	// ratio is the median over the rounds of num's time over den's, and
	// its rounds' figures.
	ratio := func(num, den [rounds]time.Duration) (float64, string) {
		var xs []float64
		for r := range rounds {
			if den[r] > 0 {
				xs = append(xs, num[r].Seconds()/den[r].Seconds())
			}
		}
		sort.Float64s(xs)
		return xs[len(xs)/2], fmt.Sprintf("%.2f", xs)
	}
	sum := func(ds [rounds]time.Duration) (t time.Duration) {
		for _, d := range ds {
			t += d
		}
		return t
	}
	xnq, xnqs := ratio(nqTime, impq)
	xfloor, xfloors := ratio(floor, impq)
	xpcut, xpcuts := ratio(pcut, impq)
	fnq, _ := ratio(nqTime, floor)
	if b.N >= rounds {
		b.Logf("five rounds, sorted: x-floor %s, x-power-cut-floor %s, x-nq %s", xfloors, xpcuts, xnqs)
	}
	b.ReportMetric(float64(b.N)/sum(impq).Seconds(), "impq-adds/s")
	b.ReportMetric(float64(b.N)/sum(nqTime).Seconds(), "nq-enqueues/s")
	b.ReportMetric(xnq, "x-nq")
	b.ReportMetric(float64(b.N)/sum(empty).Seconds(), "go-empty/s")
	b.ReportMetric(float64(b.N)/sum(floor).Seconds(), "go-floor/s")
	b.ReportMetric(float64(b.N)/sum(pcut).Seconds(), "go-power-cut-floor/s")
	b.ReportMetric(xfloor, "x-floor")
	b.ReportMetric(xpcut, "x-power-cut-floor")
	b.ReportMetric(fnq, "floor-x-nq")
}

// BenchmarkWatchLatency measures how long a transition made by this
// process takes to appear as a line on a running impq watch, over b.N
// transitions (run with -benchtime 50x), and reports the median and p99.
func BenchmarkWatchLatency(b *testing.B) {
	y := newYardB(b)
	taskIDs := make([]string, b.N)
	for i := range taskIDs {
		id, _, err := queue.Add(y, queue.AddOptions{Imp: "yuko", Text: "watched", By: "b", Actor: "bench"})
		if err != nil {
			b.Fatal(err)
		}
		taskIDs[i] = id
	}
	cmd, out, stderr := startWatch(b, y.Root)
	defer func() { cmd.Process.Kill(); cmd.Wait() }()
	lines := bufio.NewScanner(out)
	// waitFor reads lines until one holds s; the watcher ending first fails
	// the benchmark rather than record a latency that never happened.
	waitFor := func(s string) {
		for lines.Scan() {
			if strings.Contains(lines.Text(), s) {
				return
			}
		}
		cmd.Process.Kill()
		cmd.Wait()
		b.Fatalf("impq watch ended before showing %s: %v %v\n%s", s, lines.Err(), cmd.ProcessState, stderr.String())
	}
	// The watcher reports nothing from before its first scan, so probe
	// until it answers.
	live, probed := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(probed)
		for {
			select {
			case <-live:
				return
			case <-time.After(50 * time.Millisecond):
				queue.Add(y, queue.AddOptions{Imp: "yuko", Text: "probe", By: "probe", Actor: "bench"})
			}
		}
	}()
	waitFor(`"by":"probe"`)
	close(live)
	<-probed
	lat := make([]time.Duration, 0, b.N)
	b.ResetTimer()
	for _, id := range taskIDs {
		start := time.Now()
		if _, err := queue.Move(y, id, queue.Change{To: state.Running, By: "b", Actor: "bench"}); err != nil {
			b.Fatal(err)
		}
		waitFor(id)
		lat = append(lat, time.Since(start))
	}
	b.StopTimer()
	p50, p99 := percentiles(lat)
	b.ReportMetric(p50, "p50-ms")
	b.ReportMetric(p99, "p99-ms")
}

// approve approves a gate in this process, as a benchmark must to time it,
// signing with a key loaded once so the timing holds no key reads.
func approve(b *testing.B, y *yard.Yard, key *approval.Key, gid string) {
	if _, err := gate.Move(y, gid, gate.Change{To: state.Approved, By: "b", Actor: "bench", Signer: key}); err != nil {
		b.Fatal(err)
	}
}

func percentiles(lat []time.Duration) (p50, p99 float64) {
	sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
	return float64(lat[len(lat)/2].Microseconds()) / 1000, float64(lat[len(lat)*99/100].Microseconds()) / 1000
}

// BenchmarkApproveToExecuted measures, over b.N gates (run with
// -benchtime 500x), the time from an approval to the gate being executed
// by a running impexec, which learns of it through inotify. The executor
// is message-user, so the figure is the reaction and the bookkeeping, not
// a network call.
func BenchmarkApproveToExecuted(b *testing.B) {
	y := newYardB(b)
	home := b.TempDir()
	os.WriteFile(y.Path("org.toml"), []byte("[executors.message-user]\nkind = \"message-user\"\n"), 0o640)
	cmd := exec.Command(filepath.Join(bin, "impexec"), "run", "--rescan", "1h")
	cmd.Env = append(os.Environ(), "IMPYARD_ROOT="+y.Root, "IMPYARD_HOME="+home)
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	defer func() { cmd.Process.Kill(); cmd.Wait() }()
	ids := make([]string, b.N+1)
	for i := range ids {
		g, err := gate.File(y, gate.FileOptions{Imp: "yuko", Intent: "message-user", Payload: []byte(`{"text":"hi"}`), By: "b", Actor: "bench"})
		if err != nil {
			b.Fatal(err)
		}
		ids[i] = g.ID
	}
	// impexec is ready once it has executed a first gate: its watch is
	// added before its first scan.
	lat := make([]time.Duration, 0, b.N)
	key := approvaltest.Key(b, home)
	for i, gid := range ids {
		if i == 1 {
			lat = lat[:0]
			b.ResetTimer()
		}
		start := time.Now()
		approve(b, y, key, gid)
		for {
			g, err := gate.Get(y, gid)
			if err == nil && g.State == state.Executed {
				break
			}
			if time.Since(start) > 10*time.Second {
				b.Fatalf("gate %s not executed: %v", gid, g.State)
			}
			time.Sleep(200 * time.Microsecond)
		}
		lat = append(lat, time.Since(start))
	}
	b.StopTimer()
	p50, p99 := percentiles(lat)
	b.ReportMetric(p50, "p50-ms")
	b.ReportMetric(p99, "p99-ms")
}

// BenchmarkEnvelopeToPending measures, over b.N envelopes (run with
// -benchtime 500x), how long a box waits for POST /v1/actions through a
// running impgw to file a gate and answer pending. The run's cap on gates
// is raised to b.N: every envelope is a gate of one run.
func BenchmarkEnvelopeToPending(b *testing.B) {
	s := newSpine(b, true, bin)
	org, err := os.ReadFile(s.y.Path("org.toml"))
	if err != nil {
		b.Fatal(err)
	}
	org = fmt.Appendf(org, "\n[budget.yuko]\ngates_per_run = %d\ngate_bytes_per_run = %d\n", b.N+1, (b.N+1)<<12)
	if err := os.WriteFile(s.y.Path("org.toml"), org, 0o640); err != nil {
		b.Fatal(err)
	}
	tok := s.token(b, "yuko")
	lat := make([]time.Duration, 0, b.N)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		code, body, took := s.propose(b, tok, `{"intent":"email-send","payload":{"to":["x@elsewhere.com"],"subject":"`+strconv.Itoa(i)+`"}}`)
		if code != 202 {
			b.Fatalf("answer %d: %v", code, body)
		}
		lat = append(lat, took)
	}
	b.StopTimer()
	p50, p99 := percentiles(lat)
	b.ReportMetric(p50, "p50-ms")
	b.ReportMetric(p99, "p99-ms")
}

// BenchmarkDispatch measures, under runc and crun (a sub-benchmark each,
// the imp's runtime key set to it; one not installed is skipped, naming
// it) and over b.N tasks (run with -benchtime 20x), under a live impsup
// and impgw, the time from impq add to the task's box process running
// (dispatch: the run's running event) and to the task done (lifecycle).
// Taking turns with each task, in the same run, it starts a box alone
// with lib/box on the same containerd, rootfs, runtime and command, each
// in a fresh network namespace made before the clock starts: the box
// start a dispatch cannot beat. It reports medians and p99, and
// dispatch-over-start-ms, the dispatch's median less the start's (aim at
// most 25 ms): what impq add, impsup noticing the task, the run's
// records, its token and its gateway listener add to a box start. The
// step-*-p50-ms figures split the dispatch by the records it leaves (see
// steps below).
func BenchmarkDispatch(b *testing.B) {
	for _, rt := range []string{box.RunC, box.CRun} {
		b.Run(rt, func(b *testing.B) {
			info, err := box.LookRuntime(rt)
			if err != nil {
				b.Skipf("runtime %s: %v", rt, err)
			}
			benchDispatch(b, info)
		})
	}
}

func benchDispatch(b *testing.B, rt box.Runtime) {
	y := newBoxYard(b)
	y.daemon(b, bin, "impsup", "run", "--rescan", "1s")
	dir := y.y.Path("imps", "bench")
	os.MkdirAll(dir, 0o750)
	os.WriteFile(filepath.Join(dir, "imp.toml"), []byte(fmt.Sprintf("rootfs = %q\ncommand = [\"/bin/true\"]\nruntime = %q\n", boxes.Rootfs, rt.Name)), 0o640)
	ctx := context.Background()
	runner, err := box.New(ctx, boxes.Sock, y.ns+"-start")
	if err != nil {
		b.Fatal(err)
	}
	defer runner.Close()
	b.Cleanup(func() { removeBoxes(y.ns + "-start") })
	log := filepath.Join(b.TempDir(), "box.log")
	dispatch := make([]time.Duration, 0, b.N)
	life := make([]time.Duration, 0, b.N)
	starts := make([]time.Duration, 0, b.N)
	// The dispatch's steps, by its records: impq add to the task's record;
	// to the run's first record, impsup noticing the task and making the
	// run's netns; to the task running, the token and the gateway's
	// listener in the netns; to the box running, the box's start.
	var steps [4][]time.Duration
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		start := time.Now()
		out, err := y.run(b, "impq", "add", "--imp", "bench", "go")
		if err != nil {
			b.Fatalf("impq add: %v %s", err, out)
		}
		id := strings.TrimSpace(out)
		var task *queue.Task
		for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(2 * time.Millisecond) {
			if task, err = queue.Get(y.y, id); err == nil && (task.State == state.Done || task.State == state.Failed) {
				break
			}
		}
		if task == nil || task.State != state.Done || len(task.Runs) == 0 {
			b.Fatalf("task %s did not end done: %+v", id, task)
		}
		r, err := runrec.Read(y.y, task.Runs[0])
		if err != nil || r.Started == nil {
			b.Fatalf("run of task %s never started: %+v %v", id, r, err)
		}
		// Run and task times are whole seconds; their event lines' ts_ms
		// have the millisecond.
		added, starting := eventAt(b, y.y, "bench", id, state.Waiting), eventAt(b, y.y, "bench", r.ID, runrec.Starting)
		taskRunning, boxRunning := eventAt(b, y.y, "bench", id, state.Running), eventAt(b, y.y, "bench", r.ID, state.Running)
		dispatch = append(dispatch, boxRunning.Sub(start))
		life = append(life, eventAt(b, y.y, "bench", id, task.State).Sub(start))
		steps[0] = append(steps[0], added.Sub(start))
		steps[1] = append(steps[1], starting.Sub(added))
		steps[2] = append(steps[2], taskRunning.Sub(starting))
		steps[3] = append(steps[3], boxRunning.Sub(taskRunning))

		b.StopTimer()
		bid := fmt.Sprintf("start-%s-%d-%d", rt.Name, os.Getpid(), i)
		ns, err := netns.New(bid)
		if err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
		t0 := time.Now()
		bx, err := runner.Start(ctx, box.Spec{ID: bid, Rootfs: boxes.Rootfs, Args: []string{"/bin/true"}, Log: log, NetNS: ns, Runtime: rt.Name})
		starts = append(starts, time.Since(t0))
		if err != nil {
			b.Fatalf("box start alone: %v", err)
		}
		if exit, err := bx.Wait(ctx); err != nil || exit.Code != 0 {
			b.Fatalf("box started alone: exit %+v, %v", exit, err)
		}
		if err := runner.Delete(ctx, bid); err != nil {
			b.Fatal(err)
		}
		netns.Remove(ns)
	}
	b.StopTimer()
	d50, d99 := percentiles(dispatch)
	l50, l99 := percentiles(life)
	s50, s99 := percentiles(starts)
	b.ReportMetric(d50, "dispatch-p50-ms")
	b.ReportMetric(d99, "dispatch-p99-ms")
	b.ReportMetric(l50, "lifecycle-p50-ms")
	b.ReportMetric(l99, "lifecycle-p99-ms")
	b.ReportMetric(s50, "start-p50-ms")
	b.ReportMetric(s99, "start-p99-ms")
	b.ReportMetric(d50-s50, "dispatch-over-start-ms")
	b.ReportMetric(d50/s50, "dispatch/start")
	for i, name := range []string{"add", "notice", "ready", "box"} {
		p50, _ := percentiles(steps[i])
		b.ReportMetric(p50, "step-"+name+"-p50-ms")
	}
}

// eventAt is when id moved to state by the imp's journal, to the
// millisecond (ts_ms).
func eventAt(b testing.TB, y *yard.Yard, imp, id, to string) time.Time {
	b.Helper()
	// A transition's state is written before its event line: the task
	// may read done a moment before its record is there.
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(2 * time.Millisecond) {
		var at time.Time
		store.ReadJSONL(y.Path("journal", imp, "events.jsonl"), func(line []byte) error {
			var e event.Event
			if json.Unmarshal(line, &e) == nil && e.ID == id && e.To == to {
				at = store.FromMillis(e.TSMS)
			}
			return nil
		})
		if !at.IsZero() {
			return at
		}
		if time.Now().After(deadline) {
			b.Fatalf("no event of %s to %s in the journal", id, to)
		}
	}
}
