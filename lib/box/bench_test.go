package box

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"testing"
	"time"

	"github.com/impyard/impyard/lib/netns"
)

// BenchmarkStart measures Start, from nothing to the box's process
// running, and the whole lifecycle (Start, Wait, Delete), under each
// runtime installed (a sub-benchmark each), over b.N boxes of the busybox
// rootfs running /bin/true, each in a fresh netns made before the clock
// starts and deleted after it stops. In the same run it times
// containerd's and the runtime's own figures on up to 20 of the
// iterations, each against its like and with the same runtime binary:
// `ctr run -d --rootfs` (create and start, returning once the process
// runs) against Start; `ctr run --rm --rootfs` and the runtime's bare
// `run` (create, start, exit, delete) against the lifecycle. Their
// default specs have no seccomp. At the end it prints each runtime's
// start against runc's. Run it with a count, e.g. -benchtime 50x.
func BenchmarkStart(b *testing.B) {
	starts := map[string]time.Duration{}
	for _, rt := range Runtimes {
		b.Run(rt, func(b *testing.B) {
			if _, err := LookRuntime(rt); err != nil {
				b.Skipf("runtime %s: %v", rt, err)
			}
			starts[rt] = benchStart(b, rt)
		})
	}
	if base := starts[RunC]; base > 0 {
		for _, rt := range Runtimes[1:] {
			if d, ok := starts[rt]; ok {
				fmt.Printf("BenchmarkStart: %s box start %.1f ms median, %.2fx runc's %.1f ms\n", rt, ms(d), float64(d)/float64(base), ms(base))
			}
		}
	}
}

func benchStart(b *testing.B, rt string) time.Duration {
	r := runner(b)
	ctx := context.Background()
	log := filepath.Join(b.TempDir(), "box.log")
	info, err := r.Runtime(rt)
	if err != nil {
		b.Fatal(err)
	}
	bin, err := info.Binary()
	if err != nil {
		b.Fatal(err)
	}
	bundle := runcBundle(b)
	var starts, lives, ctrStarts, ctrLives, runcs []time.Duration
	var deletes, exits time.Duration
	ctr := func(args ...string) *exec.Cmd {
		return exec.Command("ctr", append([]string{"--address", harness.Sock, "--namespace", testNS}, args...)...)
	}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		id := fmt.Sprintf("bench-%s-%d-%d", rt, os.Getpid(), i)
		ns, err := netns.New(id)
		if err != nil {
			b.Fatal(err)
		}
		s := Spec{ID: id, Rootfs: harness.Rootfs, Args: []string{"/bin/true"}, Log: log, NetNS: ns, Runtime: rt}
		b.StartTimer()
		t0 := time.Now()
		box, err := r.Start(ctx, s)
		starts = append(starts, time.Since(t0))
		b.StopTimer()
		if err != nil {
			b.Fatal(err)
		}
		if exit, err := box.Wait(ctx); err != nil || exit.Code != 0 {
			b.Fatalf("exit %+v, %v", exit, err)
		}
		exits += time.Since(t0)
		t1 := time.Now()
		if err := r.Delete(ctx, id); err != nil {
			b.Fatal(err)
		}
		deletes += time.Since(t1)
		lives = append(lives, time.Since(t0))
		// The baselines take turns with the boxes, so a change of load on
		// the host weighs on both sides of the ratios alike.
		if i < 20 {
			ctrStarts = append(ctrStarts, timed(b, ctr("run", "-d", "--runc-binary", bin, "--rootfs", harness.Rootfs, id+"-ctrd", "/bin/true")))
			// Delete rather than ctr tasks rm -f, which fails on a runsc
			// sandbox that has exited.
			if err := r.Delete(ctx, id+"-ctrd"); err != nil {
				b.Fatal(err)
			}
			ctrLives = append(ctrLives, timed(b, ctr("run", "--rm", "--runc-binary", bin, "--rootfs", harness.Rootfs, id+"-ctr", "/bin/true")))
			runcs = append(runcs, timed(b, exec.Command(bin, "run", "--bundle", bundle, id+"-run")))
		}
	}
	start, life := median(starts), median(lives)
	b.ReportMetric(ms(start), "ms-start-median")
	b.ReportMetric(ms(percentile(starts, 99)), "ms-start-p99")
	b.ReportMetric(ms(exits/time.Duration(b.N)), "ms-start-to-exit")
	b.ReportMetric(ms(deletes/time.Duration(b.N)), "ms-delete")
	b.ReportMetric(ms(life), "ms-lifecycle-median")
	b.ReportMetric(ms(median(ctrStarts)), "ms-ctr-run-d")
	b.ReportMetric(ms(median(ctrLives)), "ms-ctr-run-rm")
	b.ReportMetric(ms(median(runcs)), "ms-runtime-run")
	b.ReportMetric(float64(start)/float64(median(ctrStarts)), "start/ctr-run-d")
	b.ReportMetric(float64(life)/float64(median(ctrLives)), "lifecycle/ctr-run-rm")
	b.ReportMetric(float64(life)/float64(median(runcs)), "lifecycle/runtime-run")
	return start
}

// timed runs cmd and returns its wall time.
func timed(b *testing.B, cmd *exec.Cmd) time.Duration {
	t0 := time.Now()
	if out, err := cmd.CombinedOutput(); err != nil {
		b.Fatalf("%s: %v\n%s", cmd, err, out)
	}
	return time.Since(t0)
}

// runcBundle is an OCI bundle over the test rootfs that runs /bin/true,
// from runc's own default spec.
func runcBundle(b *testing.B) string {
	dir := b.TempDir()
	if out, err := exec.Command("runc", "spec", "--bundle", dir).CombinedOutput(); err != nil {
		b.Fatalf("runc spec: %v\n%s", err, out)
	}
	path := filepath.Join(dir, "config.json")
	raw, err := os.ReadFile(path)
	if err != nil {
		b.Fatal(err)
	}
	var spec map[string]any
	if err := json.Unmarshal(raw, &spec); err != nil {
		b.Fatal(err)
	}
	spec["root"] = map[string]any{"path": harness.Rootfs, "readonly": true}
	proc := spec["process"].(map[string]any)
	proc["terminal"] = false
	proc["args"] = []string{"/bin/true"}
	raw, _ = json.Marshal(spec)
	if err := os.WriteFile(path, raw, 0o644); err != nil {
		b.Fatal(err)
	}
	return dir
}

func median(ds []time.Duration) time.Duration { return percentile(ds, 50) }

func percentile(ds []time.Duration, p int) time.Duration {
	s := append([]time.Duration(nil), ds...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	return s[(len(s)-1)*p/100]
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
