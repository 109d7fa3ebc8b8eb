package tests

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/impyard/impyard/internal/boxtest"
	"github.com/impyard/impyard/lib/gate"
	"github.com/impyard/impyard/lib/queue"
	runrec "github.com/impyard/impyard/lib/run"
	"github.com/impyard/impyard/lib/state"
	"github.com/impyard/impyard/lib/store"
	"github.com/impyard/impyard/lib/yard"
)

// boxes is the harness of this package's box tests: the rootfs holds the
// demo imp and the probe lib/box's tests judge the sandbox with.
var boxes = &boxtest.Env{Repo: "..", Packages: []string{"./examples/demo-imp", "./lib/box/testdata/probe"}}

// boxYard is a spine whose org.toml also points the supervisor at the
// test containerd, with a page server on loopback for imps to fetch.
type boxYard struct {
	*spine
	pages string // http://127.0.0.1:PORT
	ns    string
	// serving, when set before the first box runs, is called with the
	// path of each page requested, before it is answered.
	serving func(path string)
}

func newBoxYard(t testing.TB) *boxYard {
	t.Helper()
	boxes.Need(t)
	s := newSpine(t, true, bin)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	b := &boxYard{spine: s}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if b.serving != nil {
			b.serving(r.URL.Path)
		}
		fmt.Fprintf(w, "page %s", r.URL.Path)
	})}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	ns := fmt.Sprintf("e2e-%d", time.Now().UnixNano()%1e9)
	org, _ := os.ReadFile(s.y.Path("org.toml"))
	org = append(org, fmt.Sprintf("\n[containerd]\naddress = %q\nnamespace = %q\n[supervisor]\nconcurrency = 4\n", boxes.Sock, ns)...)
	os.WriteFile(s.y.Path("org.toml"), org, 0o640)
	// Imps may fetch /allowed/ pages from the loopback server; nothing else.
	pol, _ := os.ReadFile(s.y.PolicyPath())
	pol = []byte(strings.Replace(string(pol), `"rules":[`, `"rules":[
	 {"name":"pages","match":{"host":"127.0.0.1","method":"GET","pathPrefix":"/allowed/","network":"127.0.0.0/8","subject":"*"},"verdict":"allow"},`, 1))
	os.WriteFile(s.y.PolicyPath(), pol, 0o640)
	b.pages, b.ns = "http://"+ln.Addr().String(), ns
	t.Cleanup(func() { removeBoxes(ns) })
	return b
}

// removeBoxes removes every box left in the test containerd's namespace
// ns, killing those still running.
func removeBoxes(ns string) {
	out, _ := exec.Command("ctr", "--address", boxes.Sock, "-n", ns, "containers", "ls", "-q").Output()
	for _, id := range strings.Fields(string(out)) {
		// rm -f kills a task still running and waits for it to go.
		exec.Command("ctr", "--address", boxes.Sock, "-n", ns, "tasks", "rm", "-f", id).Run()
		exec.Command("ctr", "--address", boxes.Sock, "-n", ns, "containers", "rm", id).Run()
	}
}

// imp writes imps/<name>/imp.toml: the test rootfs, and the demo imp with
// a minute's ceiling unless keys says otherwise (key -> TOML value).
func (b *boxYard) imp(t testing.TB, name string, keys map[string]string) {
	t.Helper()
	dir := b.y.Path("imps", name)
	os.MkdirAll(dir, 0o750)
	all := map[string]string{"rootfs": fmt.Sprintf("%q", boxes.Rootfs), "command": `["/usr/local/bin/demo-imp"]`, "ceiling": `"60s"`}
	for k, v := range keys {
		all[k] = v
	}
	conf := ""
	for k, v := range all {
		conf += k + " = " + v + "\n"
	}
	if err := os.WriteFile(filepath.Join(dir, "imp.toml"), []byte(conf), 0o640); err != nil {
		t.Fatal(err)
	}
}

func (b *boxYard) add(t testing.TB, imp, text string, extra ...string) string {
	t.Helper()
	out, err := b.run(t, "impq", append(append([]string{"add", "--imp", imp}, extra...), text)...)
	if err != nil {
		t.Fatalf("impq add: %v %s", err, out)
	}
	return strings.TrimSpace(out)
}

func (b *boxYard) once(t testing.TB) string {
	t.Helper()
	out, err := b.run(t, "impsup", "once")
	if err != nil {
		t.Fatalf("impsup once: %v\n%s", err, out)
	}
	return out
}

func (b *boxYard) task(t *testing.T, id string) *queue.Task {
	t.Helper()
	task, err := queue.Get(b.y, id)
	if err != nil {
		t.Fatal(err)
	}
	return task
}

func (b *boxYard) boxLog(t *testing.T, task *queue.Task) string {
	t.Helper()
	if len(task.Runs) == 0 {
		t.Fatalf("task %s has no run", task.ID)
	}
	log, _ := os.ReadFile(runrec.Path(b.y, task.Runs[len(task.Runs)-1], "box.log"))
	return string(log)
}

// TestBoxSpine is the whole spine with a real box: the demo imp fetches an
// allowed page through the gateway, is denied another, notes it in its
// journal and proposes an email; the task waits in needs-review; approval
// sends it; the task ends done.
func TestBoxSpine(t *testing.T) {
	b := newBoxYard(t)
	b.daemon(t, bin, "impexec", "run", "--rescan", "2s")
	b.imp(t, "demo", nil)
	taskID := b.add(t, "demo", "read "+b.pages+"/allowed/news and "+b.pages+"/secret/plans then tell team@ourco.com and boss@elsewhere.com")
	out := b.once(t)
	task := b.task(t, taskID)
	log := b.boxLog(t, task)
	if task.State != state.NeedsReview {
		t.Fatalf("task is %s (%s), want needs-review\nimpsup: %s\nbox.log:\n%s", task.State, task.Reason, out, log)
	}
	for _, want := range []string{"/allowed/news -> 200 OK", "/secret/plans -> 403 Forbidden", "proposed email-send: 202", `"status":"pending"`, "journal note: 200", `mailbox: 200 {"messages":[]}`} {
		if !strings.Contains(log, want) {
			t.Errorf("box.log lacks %q:\n%s", want, log)
		}
	}
	// Every request of the box was judged as the demo imp.
	var allowed, denied int
	store.ReadJSONL(b.y.Path("runs", "decisions.jsonl"), func(line []byte) error {
		var d struct {
			Schema  string `json:"schema"`
			Verdict string `json:"verdict"`
			Request struct {
				Imp  *string `json:"imp"`
				Path string  `json:"path"`
			} `json:"request"`
		}
		if json.Unmarshal(line, &d) != nil || d.Schema != "impyard.decision/1" {
			return nil
		}
		if d.Request.Imp == nil || *d.Request.Imp != "demo" {
			t.Errorf("a decision without the box's imp: %s", line)
			return nil
		}
		switch {
		case d.Verdict == "allow" && d.Request.Path == "/allowed/news":
			allowed++
		case d.Verdict == "deny" && d.Request.Path == "/secret/plans":
			denied++
		}
		return nil
	})
	if allowed != 1 || denied != 1 {
		t.Errorf("records: %d allowed, %d denied; want one each", allowed, denied)
	}
	gates, _ := gate.List(b.y, gate.Filter{Imp: "demo"})
	if len(gates) != 1 || gates[0].Task != taskID || gates[0].Run != task.Runs[0] {
		t.Fatalf("gates %+v", gates)
	}
	if out, err := b.run(t, "impgate", "approve", gates[0].ID); err != nil {
		t.Fatalf("approve: %v %s", err, out)
	}
	b.waitState(t, gates[0].ID, state.Executed)
	b.once(t)
	if task := b.task(t, taskID); task.State != state.Done {
		t.Errorf("after the gate executed the task is %s (%s)", task.State, task.Reason)
	}
	r, err := runrec.Read(b.y, task.Runs[0])
	if err != nil || r.State != runrec.Exited || r.Exit == nil || r.Exit.Code != 0 || r.Started == nil || r.Ended == nil {
		t.Errorf("run.json: %+v %v", r, err)
	}
}

// TestBoxRefusals: a task queued with --force for an imp without
// configuration fails with the reason; a box past its ceiling is killed and its task fails saying so;
// containerd down leaves tasks waiting.
func TestBoxRefusals(t *testing.T) {
	b := newBoxYard(t)
	b.imp(t, "sleeper", map[string]string{"ceiling": `"2s"`, "command": `["/bin/sh", "-c", "trap '' TERM; sleep 60"]`})
	b.imp(t, "quitter", map[string]string{"command": `["/bin/false"]`})
	b.imp(t, "filler", map[string]string{"workspace": `"8M"`,
		"command": `["/bin/sh", "-c", "echo kept > /work/note; dd if=/dev/zero of=/work/big bs=1M count=64; echo dd=$?"]`})
	// impq add refuses an imp without configuration; --force queues it,
	// and the supervisor still fails it with the reason.
	noConf := b.add(t, "ghost", "nobody configured me", "--force")
	slow := b.add(t, "sleeper", "sleep")
	quit := b.add(t, "quitter", "give up at once")
	fill := b.add(t, "filler", "fill the workspace")
	if out, err := b.run(t, "impsup", "doctor"); err != nil || !strings.Contains(out, "ok    containerd") || !strings.Contains(out, "ok    gateway") {
		t.Errorf("doctor: %v\n%s", err, out)
	}
	start := time.Now()
	b.once(t)
	if task := b.task(t, quit); task.State != state.Failed || !strings.Contains(task.Reason, "exit") {
		t.Errorf("a box that exits 1 at once: %s %q", task.State, task.Reason)
	}
	task := b.task(t, fill)
	log := b.boxLog(t, task)
	if !strings.Contains(log, "No space left on device") || !strings.Contains(log, "dd=1") {
		t.Errorf("the workspace was not bounded:\n%s", log)
	}
	kept, err := os.ReadFile(runrec.Path(b.y, task.Runs[0], "workspace", "note"))
	if err != nil || string(kept) != "kept\n" {
		t.Errorf("the workspace was not kept: %q %v", kept, err)
	}
	if fi, err := os.Stat(runrec.Path(b.y, task.Runs[0], "workspace", "big")); err != nil || fi.Size() > 8<<20 {
		t.Errorf("workspace copy: %v %v", fi, err)
	}
	if task := b.task(t, noConf); task.State != state.Failed || !strings.Contains(task.Reason, "has no configuration") {
		t.Errorf("unconfigured imp: %s %q", task.State, task.Reason)
	}
	task = b.task(t, slow)
	took := time.Since(start)
	if task.State != state.Failed || !strings.HasPrefix(task.Reason, "ceiling:") || took < 2*time.Second || took > 30*time.Second {
		t.Errorf("ceiling: %s %q after %v; want failed at the 2s ceiling", task.State, task.Reason, took)
	}
	if r, err := runrec.Read(b.y, task.Runs[0]); err != nil || !r.Exit.Ceiling || r.Exit.Signal != "SIGKILL" {
		t.Errorf("run of the ceiling task: %+v %v; want the ceiling and a SIGKILL (it ignores SIGTERM)", r, err)
	}
	org, _ := os.ReadFile(b.y.Path("org.toml"))
	os.WriteFile(b.y.Path("org.toml"), []byte(strings.Replace(string(org), boxes.Sock, "/nonexistent/containerd.sock", 1)), 0o640)
	if out, err := b.run(t, "impsup", "doctor"); err == nil || !strings.Contains(out, "FAIL  containerd") {
		t.Errorf("doctor with containerd away: %v\n%s", err, out)
	}
	waiting := b.add(t, "sleeper", "wait for containerd")
	out, err := b.run(t, "impsup", "once")
	if err == nil || !strings.Contains(out, "/nonexistent/containerd.sock") || !strings.Contains(out, "tasks stay waiting") {
		t.Errorf("containerd down: %v\n%s", err, out)
	}
	if task := b.task(t, waiting); task.State != state.Waiting {
		t.Errorf("with containerd down the task is %s", task.State)
	}
}

// TestSupervisorKilled SIGKILLs impsup mid-run 20 times: every task still
// ends exactly once, none is lost, none runs twice at once, some box runs
// through a kill and is adopted by the next supervisor, and a task may
// fail only the way a kill makes it fail, with a box that never ran.
func TestSupervisorKilled(t *testing.T) {
	b := newBoxYard(t)
	b.imp(t, "worker", map[string]string{"command": `["/bin/sh", "-c", "echo start $IMPYARD_TASK; sleep 0.7; echo end $IMPYARD_TASK"]`, "concurrency": "2"})
	var ids []string
	for i := 0; i < 10; i++ {
		ids = append(ids, b.add(t, "worker", fmt.Sprintf("job %d", i)))
	}
	const want = 20
	var kills []time.Time
	deadline := time.Now().Add(3 * time.Minute)
	for len(kills) < want && time.Now().Before(deadline) {
		cmd := exec.Command(filepath.Join(bin, "impsup"), "run", "--rescan", "500ms")
		cmd.Env = append(os.Environ(), b.env...)
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		// A moment that moves through the supervisor's work from kill to
		// kill: starting boxes, watching them, settling their tasks.
		// Every fourth kill waits for a box in the middle of its work
		// instead, so that some box outlives its supervisor however
		// slowly boxes start on a loaded machine.
		if len(kills)%4 == 1 {
			waitMidRun(t, b.y)
		} else {
			time.Sleep(time.Duration(200+len(kills)*37%400) * time.Millisecond)
		}
		cmd.Process.Signal(syscall.SIGKILL)
		at := time.Now()
		if err := cmd.Wait(); !signalled(err) {
			t.Fatalf("impsup %d ended before the kill: %v\n%s", len(kills)+1, err, stderr.String())
		}
		kills = append(kills, at)
	}
	if len(kills) != want {
		t.Fatalf("%d kills before the deadline, want %d", len(kills), want)
	}
	// killedDuring reports whether a kill landed between from and to,
	// times of the yard, which are whole seconds: any instant of from's
	// second to any of to's.
	killedDuring := func(from, to time.Time) bool {
		for _, k := range kills {
			if !k.Before(from) && k.Before(to.Add(time.Second)) {
				return true
			}
		}
		return false
	}
	// A last supervisor that is left to finish.
	for i := 0; i < 20; i++ {
		b.once(t)
		tasks, _ := queue.List(b.y, queue.Filter{Imp: "worker"})
		open := 0
		for _, task := range tasks {
			if task.State == state.Waiting || task.State == state.Running {
				open++
			}
		}
		if open == 0 {
			break
		}
	}
	done, spanned := 0, 0
	for _, id := range ids {
		task := b.task(t, id)
		if len(task.Runs) == 0 {
			t.Errorf("task %s never ran", id)
			continue
		}
		ends := 0
		for _, h := range task.History {
			if h.To == state.Done || h.To == state.Failed {
				ends++
			}
		}
		if ends != 1 {
			t.Errorf("task %s ended %d times: %+v", id, ends, task.History)
		}
		// At most one run did the work.
		started := 0
		for _, r := range task.Runs {
			log, _ := os.ReadFile(runrec.Path(b.y, r, "box.log"))
			started += strings.Count(string(log), "start "+id)
			if rec, err := runrec.Read(b.y, r); err == nil && rec.Started != nil && rec.Ended != nil && killedDuring(*rec.Started, *rec.Ended) {
				spanned++
			}
		}
		if started > 1 {
			t.Errorf("task %s ran %d times", id, started)
		}
		last, err := runrec.Read(b.y, task.Runs[len(task.Runs)-1])
		if err != nil {
			t.Errorf("task %s: %v", id, err)
			continue
		}
		switch {
		case task.State == state.Done:
			done++
			if started != 1 {
				t.Errorf("task %s is done but its box ran %d times", id, started)
			}
		// A kill between making a box and starting it, or between
		// recording a run and making its box: the next supervisor fails
		// the task, and its box never ran.
		case task.State == state.Failed && (strings.Contains(task.Reason, "never started: the supervisor stopped") || strings.Contains(task.Reason, "is gone: the supervisor restarted")):
			if started != 0 || !killedDuring(last.Created, task.Updated) {
				t.Errorf("task %s failed (%q) but its box ran %d times, or no kill came after its run was made", id, task.Reason, started)
			}
		default:
			t.Errorf("task %s ended %s: %q", id, task.State, task.Reason)
		}
	}
	// How many finish depends on where the kills land (box creation is
	// slow on a loaded machine); every task that did not is checked above
	// to have failed the way a kill makes it fail.
	if done == 0 {
		t.Errorf("no task of %d finished through the kills", len(ids))
	}
	if spanned == 0 {
		t.Errorf("no kill landed while a box ran")
	}
	checkRunsSettled(t, b.y, "worker")
	t.Logf("%d kills; %d of %d tasks done; %d runs outlived a supervisor", len(kills), done, len(ids), spanned)
}

// isClosed reports whether c is closed.
func isClosed(c chan struct{}) bool {
	select {
	case <-c:
		return true
	default:
		return false
	}
}

// waitMidRun waits until some run's box has logged the start of its
// task and not yet its end, until no task is left to run, or for at most
// twenty seconds (then the kill lands wherever it lands, and the test
// says whether one spanned a box).
func waitMidRun(t *testing.T, y *yard.Yard) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) {
		tasks, _ := queue.List(y, queue.Filter{})
		open := false
		for _, task := range tasks {
			open = open || task.State == state.Waiting || task.State == state.Running
		}
		if !open {
			return
		}
		runs, _ := runrec.List(y)
		for _, r := range runs {
			log, _ := os.ReadFile(runrec.Path(y, r, "box.log"))
			if bytes.Contains(log, []byte("start ")) && !bytes.Contains(log, []byte("end ")) {
				return
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestBoxIdentity: two imps' boxes run at once, and every decision record
// carries the imp whose box sent the request.
func TestBoxIdentity(t *testing.T) {
	b := newBoxYard(t)
	for _, imp := range []string{"alpha", "beta"} {
		// The task text arrives as $0.
		b.imp(t, imp, map[string]string{"command": `["/bin/sh", "-c", "exec /usr/local/bin/demo-imp \"$0\""]`})
		b.add(t, imp, "read "+b.pages+"/allowed/"+imp+"/1 and "+b.pages+"/allowed/"+imp+"/2")
	}
	// Each box's first page is answered only once both have asked for
	// theirs: the two surely run at the same time, however slowly the
	// second one starts.
	var mu sync.Mutex
	asked := map[string]bool{}
	met := make(chan struct{})
	b.serving = func(path string) {
		if path != "/allowed/alpha/1" && path != "/allowed/beta/1" {
			return
		}
		mu.Lock()
		asked[path] = true
		if len(asked) == 2 && !isClosed(met) {
			close(met)
		}
		mu.Unlock()
		select {
		case <-met:
		case <-time.After(25 * time.Second):
		}
	}
	b.once(t)
	seen := map[string]int{}
	var alphaRun, betaRun *runrec.Run
	for _, imp := range []string{"alpha", "beta"} {
		ts, _ := queue.List(b.y, queue.Filter{Imp: imp})
		if len(ts) != 1 || ts[0].State != state.Done {
			t.Fatalf("%s: %+v", imp, ts)
		}
		r, _ := runrec.Read(b.y, ts[0].Runs[0])
		if imp == "alpha" {
			alphaRun = r
		} else {
			betaRun = r
		}
	}
	// Times of the yard are whole seconds: runs in the same second may
	// have overlapped.
	overlap := !alphaRun.Started.After(*betaRun.Ended) && !betaRun.Started.After(*alphaRun.Ended)
	store.ReadJSONL(b.y.Path("runs", "decisions.jsonl"), func(line []byte) error {
		var d struct {
			Request struct {
				Imp  *string `json:"imp"`
				Path string  `json:"path"`
			} `json:"request"`
		}
		if json.Unmarshal(line, &d) != nil || d.Request.Imp == nil {
			return nil
		}
		for _, imp := range []string{"alpha", "beta"} {
			if strings.HasPrefix(d.Request.Path, "/allowed/"+imp+"/") {
				if *d.Request.Imp != imp {
					t.Errorf("a request for %s recorded as %s", d.Request.Path, *d.Request.Imp)
				}
				seen[imp]++
			}
		}
		return nil
	})
	if seen["alpha"] != 2 || seen["beta"] != 2 {
		t.Errorf("records per imp: %v", seen)
	}
	if !isClosed(met) {
		t.Errorf("the two boxes did not run at once: pages asked for %v", asked)
	}
	if !overlap {
		t.Errorf("the run records do not overlap (%v-%v, %v-%v), though both boxes waited for a page at once", alphaRun.Started, alphaRun.Ended, betaRun.Started, betaRun.Ended)
	}
}

// TestBoxRuntimes runs the demo imp under each runtime installed, through
// the gateway, one box each at once: imp.toml's runtime, else org.toml's
// [supervisor] runtime, picks it and run.json records it with its version.
// A runtime missing from the host fails the task naming it.
func TestBoxRuntimes(t *testing.T) {
	b := newBoxYard(t)
	org, _ := os.ReadFile(b.y.Path("org.toml"))
	os.WriteFile(b.y.Path("org.toml"), []byte(strings.Replace(string(org), "[supervisor]\n", "[supervisor]\nruntime = \"crun\"\n", 1)), 0o640)
	want := map[string]string{}
	for _, rt := range []string{"runc", "crun", "runsc"} {
		if _, err := exec.LookPath(rt); err != nil {
			t.Logf("runtime %s is not installed on this host: not run", rt)
			continue
		}
		keys := map[string]string{}
		if rt != "crun" { // crun is the org's default
			keys["runtime"] = fmt.Sprintf("%q", rt)
		}
		imp := "on-" + rt
		b.imp(t, imp, keys)
		want[b.add(t, imp, "read "+b.pages+"/allowed/"+rt)] = rt
	}
	b.once(t)
	for taskID, rt := range want {
		task := b.task(t, taskID)
		if task.State != state.Done {
			t.Errorf("%s: task %s is %s (%s)\n%s", rt, taskID, task.State, task.Reason, b.boxLog(t, task))
			continue
		}
		if log := b.boxLog(t, task); !strings.Contains(log, "/allowed/"+rt+" -> 200 OK") {
			t.Errorf("%s: box.log lacks the page:\n%s", rt, log)
		}
		r, err := runrec.Read(b.y, task.Runs[0])
		if err != nil || r.Runtime != rt || r.RuntimeVersion == "" {
			t.Errorf("%s: run.json %+v, %v; want runtime %s and its version", rt, r, err, rt)
		}
	}

	// doctor starts a probe box under each runtime, and names the imps on it.
	out, err := b.run(t, "impsup", "doctor")
	if err != nil {
		t.Errorf("doctor: %v\n%s", err, out)
	}
	for _, rt := range want {
		re := regexp.MustCompile(`(?m)^ok    ` + rt + ` +\S+ at \S+.*used by [^;]*on-` + rt + `\b[^;]*; a probe box started in \d+ ms$`)
		if !re.MatchString(out) {
			t.Errorf("doctor has no probe box line for %s:\n%s", rt, out)
		}
	}

	b.imp(t, "gvisor", map[string]string{"runtime": `"runsc"`})
	taskID := b.add(t, "gvisor", "read "+b.pages+"/allowed/x")
	env := b.env
	b.env = append(b.env, "PATH="+t.TempDir())
	b.once(t)
	b.env = env
	if task := b.task(t, taskID); task.State != state.Failed || !strings.Contains(task.Reason, "runsc: runtime not installed") {
		t.Errorf("runsc missing: task is %s (%s), want failed naming runsc", task.State, task.Reason)
	}
}
