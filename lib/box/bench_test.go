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
// running, over b.N boxes of the busybox rootfs, each in a fresh netns
// made before the clock starts and deleted after it stops. In the same run
// it times the baselines on up to 20 of the iterations: `ctr run --rm
// --rootfs` and bare `runc run` of /bin/true, both whole lifecycles
// (create, start, exit, delete) with containerd's and runc's default specs,
// so no seccomp. Run it with a count, e.g. -benchtime 50x.
func BenchmarkStart(b *testing.B) {
	r := runner(b)
	ctx := context.Background()
	log := filepath.Join(b.TempDir(), "box.log")
	bundle := runcBundle(b)
	var starts, ctrs, runcs []time.Duration
	var deletes, exits time.Duration
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		id := fmt.Sprintf("bench-%d-%d", os.Getpid(), i)
		ns, err := netns.New(id)
		if err != nil {
			b.Fatal(err)
		}
		s := Spec{ID: id, Rootfs: harness.Rootfs, Args: []string{"/bin/true"}, Log: log, NetNS: ns}
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
		// The baselines take turns with the boxes, so a change of load on
		// the host weighs on both sides of the ratios alike.
		if i < 20 {
			ctrs = append(ctrs, timed(b, exec.Command("ctr", "--address", harness.Sock, "--namespace", testNS,
				"run", "--rm", "--rootfs", harness.Rootfs, id+"-ctr", "/bin/true")))
			runcs = append(runcs, timed(b, exec.Command("runc", "run", "--bundle", bundle, id+"-runc")))
		}
	}
	med := median(starts)
	b.ReportMetric(ms(med), "ms-start-median")
	b.ReportMetric(ms(percentile(starts, 99)), "ms-start-p99")
	b.ReportMetric(ms(exits/time.Duration(b.N)), "ms-start-to-exit")
	b.ReportMetric(ms(deletes/time.Duration(b.N)), "ms-delete")
	b.ReportMetric(ms(median(ctrs)), "ms-ctr-run-rm")
	b.ReportMetric(ms(median(runcs)), "ms-runc-run")
	b.ReportMetric(float64(med)/float64(median(ctrs)), "start/ctr")
	b.ReportMetric(float64(med)/float64(median(runcs)), "start/runc")
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
