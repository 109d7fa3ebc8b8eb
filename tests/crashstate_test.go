package tests

// The crash-state harness (impyard(7), Crash safety): each test below
// snapshots a yard and its IMPYARD_HOME, runs one command of the
// crash-enabled build with IMPYARD_STORE_TRACE set, and hands the trace
// to internal/crashstate, which lists the trees a power cut after any of
// the command's operations may leave. Each tree is written in place, the
// next command runs on it, and the invariants are read from the files.
// make crash sets wideEnv for the wide enumeration.

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io/fs"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/impyard/impyard/internal/crashstate"
	"github.com/impyard/impyard/lib/event"
	"github.com/impyard/impyard/lib/gate"
	"github.com/impyard/impyard/lib/queue"
	runrec "github.com/impyard/impyard/lib/run"
	"github.com/impyard/impyard/lib/state"
	"github.com/impyard/impyard/lib/store"
	"github.com/impyard/impyard/lib/token"
	"github.com/impyard/impyard/lib/yard"
	"github.com/impyard/impyard/lib/yard/yardtest"
)

// wideEnv widens the crash-state enumeration (make crash): every prefix
// of each trace, and every combination of up to this many operations not
// yet durable.
const wideEnv = "IMPYARD_CRASH_WIDE"

// crashRig is a yard and its IMPYARD_HOME side by side under one base
// directory, the tree a crash state replaces whole.
type crashRig struct {
	base, root, home, trace string
	y                       *yard.Yard
}

const crashOrg = `
[executors.message-user]
kind = "message-user"
[executors.memory-promote]
kind = "memory"
`

func newCrashRig(t *testing.T) *crashRig {
	t.Helper()
	dir := t.TempDir()
	r := &crashRig{base: filepath.Join(dir, "base"), trace: filepath.Join(dir, "trace.jsonl")}
	r.root, r.home = filepath.Join(r.base, "yard"), filepath.Join(r.base, "home")
	if err := os.MkdirAll(r.home, 0o700); err != nil {
		t.Fatal(err)
	}
	r.y = yardtest.At(t, r.root)
	for _, imp := range []string{"yuko", "newimp"} {
		os.MkdirAll(r.y.Path("imps", imp), 0o750)
		if err := os.WriteFile(r.y.Path("imps", imp, "imp.toml"), []byte("image = \"docker.io/library/busybox:latest\"\n"), 0o640); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(r.y.Path("org.toml"), []byte(crashOrg), 0o640); err != nil {
		t.Fatal(err)
	}
	return r
}

// run runs a binary from dir on the rig's tree; with traced, its store
// operations go to the trace.
func (r *crashRig) run(dir string, traced bool, name string, args ...string) (string, error) {
	cmd := exec.Command(filepath.Join(dir, name), args...)
	cmd.Env = append(os.Environ(), "IMPYARD_ROOT="+r.root, "IMPYARD_HOME="+r.home, "USER=tester")
	if traced {
		cmd.Env = append(cmd.Env, store.TraceEnv+"="+r.trace)
	}
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err := cmd.Run()
	if err != nil {
		return out.String(), fmt.Errorf("%s %s: %w: %s", name, strings.Join(args, " "), err, errOut.String())
	}
	return out.String(), nil
}

// record snapshots the tree, runs the command traced, marks its
// acknowledgement (it exited 0) and returns the history and its stdout.
func (r *crashRig) record(t *testing.T, name string, args ...string) (*crashstate.History, string) {
	t.Helper()
	h, err := crashstate.Load(r.base)
	if err != nil {
		t.Fatal(err)
	}
	out, err := r.run(crashBin, true, name, args...)
	if err != nil {
		t.Fatal(err)
	}
	if err := crashstate.Mark(r.trace, "ack"); err != nil {
		t.Fatal(err)
	}
	r.replay(t, h)
	return h, strings.TrimSpace(out)
}

// replay hands the trace the rig's commands wrote to h.
func (r *crashRig) replay(t *testing.T, h *crashstate.History) {
	t.Helper()
	recs, err := crashstate.ReadTrace(r.trace)
	if err != nil {
		t.Fatal(err)
	}
	if err := h.Replay(recs); err != nil {
		t.Fatal(err)
	}
}

// crashPlan is the enumeration: small by default, wide with wideEnv.
func crashPlan() crashstate.Plan {
	if os.Getenv(wideEnv) != "" {
		return crashstate.Plan{EveryPrefix: true, Subsets: 8, Wide: true}
	}
	return crashstate.Plan{}
}

// checkStates writes each state of h in place and runs check on it,
// which runs what comes next and reads the invariants from the files,
// and reports each invariant broken with the number of states that
// broke it and the first of them.
func checkStates(t *testing.T, r *crashRig, h *crashstate.History, check func(s *crashstate.State) []string) {
	t.Helper()
	states := h.States(crashPlan())
	type failure struct {
		n     int
		first string
	}
	failed := map[string]*failure{}
	for _, s := range states {
		if err := s.Write(); err != nil {
			t.Fatal(err)
		}
		seen := map[string]bool{}
		for _, p := range check(s) {
			if seen[p] {
				continue
			}
			seen[p] = true
			if failed[p] == nil {
				failed[p] = &failure{first: s.String()}
			}
			failed[p].n++
		}
	}
	t.Logf("%d operations and marks, %d distinct states", h.Len(), len(states))
	var keys []string
	for p := range failed {
		keys = append(keys, p)
	}
	sort.Strings(keys)
	for _, p := range keys {
		t.Errorf("%s: in %d of %d states, first: %s", p, failed[p].n, len(states), failed[p].first)
	}
}

// torn lists the yard's JSON files that do not parse whole: a write is
// atomic, so no state may hold one.
func (r *crashRig) torn() []string {
	var bad []string
	filepath.WalkDir(r.root, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() && d.Name() == ".tmp" {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(p, ".json") {
			return nil
		}
		b, err := store.ReadFile(p)
		if err != nil || !json.Valid(b) {
			rel, _ := filepath.Rel(r.base, p)
			bad = append(bad, "torn or unreadable: "+rel)
		}
		return nil
	})
	return bad
}

// records checks that every transition of every task and gate has exactly
// one whole record in its imp's journal and in the audit log.
func (r *crashRig) records() []string {
	var bad []string
	tasks, tbad := queue.List(r.y, queue.Filter{})
	gates, gbad := gate.List(r.y, gate.Filter{All: true})
	for _, e := range append(tbad, gbad...) {
		bad = append(bad, "unreadable: "+e.Error())
	}
	type entity struct {
		id, imp string
		n       int
	}
	var all []entity
	for _, tk := range tasks {
		all = append(all, entity{tk.ID, tk.Imp, len(tk.History)})
	}
	for _, g := range gates {
		all = append(all, entity{g.ID, g.Imp, len(g.History)})
	}
	runs, err := runrec.List(r.y)
	if err != nil {
		bad = append(bad, "unreadable: "+err.Error())
	}
	for _, id := range runs {
		if rr, err := runrec.Read(r.y, id); err == nil {
			all = append(all, entity{rr.ID, rr.Imp, len(rr.History)})
		}
	}
	count := func(p string) map[string]map[int]int {
		c := map[string]map[int]int{}
		store.ReadJSONL(p, func(line []byte) error {
			var e event.Event
			if json.Unmarshal(line, &e) == nil && e.ID != "" {
				if c[e.ID] == nil {
					c[e.ID] = map[int]int{}
				}
				c[e.ID][e.Seq]++
			}
			return nil
		})
		return c
	}
	audit := count(r.y.Path("runs", "decisions.jsonl"))
	journals := map[string]map[string]map[int]int{}
	for _, e := range all {
		if journals[e.imp] == nil {
			journals[e.imp] = count(r.y.Path("journal", e.imp, "events.jsonl"))
		}
		for log, c := range map[string]map[string]map[int]int{"audit log": audit, "journal": journals[e.imp]} {
			for seq := 1; seq <= e.n; seq++ {
				if c[e.id][seq] != 1 {
					bad = append(bad, fmt.Sprintf("a transition has %d records in the %s, not 1", c[e.id][seq], log))
				}
			}
			if len(c[e.id]) > e.n {
				bad = append(bad, "the "+log+" has records of transitions the state lacks")
			}
		}
	}
	return bad
}

func firstLine(s string) string {
	s, _, _ = strings.Cut(strings.TrimSpace(s), "\n")
	return s
}

// task returns task id as the queue reads it, nil when it is not there
// whole.
func (r *crashRig) task(id string) *queue.Task {
	tasks, _ := queue.List(r.y, queue.Filter{})
	for _, tk := range tasks {
		if tk.ID == id {
			return tk
		}
	}
	return nil
}

// TestCrashStatesAdd: impq add, to an imp with no queue directory yet and
// to one with tasks, and impq add --unique. In every state a power cut
// can leave: no torn file; an acknowledged task is there; after the next
// add (for --unique, the same one again, which finds the acknowledged
// task and no other, then another), every transition has exactly one
// record in the journal and the audit log.
func TestCrashStatesAdd(t *testing.T) {
	for _, tc := range []struct {
		name   string
		imp    string
		unique bool
	}{
		{"new imp", "newimp", false},
		{"existing imp", "yuko", false},
		{"unique", "yuko", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := newCrashRig(t)
			if _, err := r.run(bin, false, "impq", "add", "--imp", "yuko", "an earlier task"); err != nil {
				t.Fatal(err)
			}
			args := []string{"add", "--imp", tc.imp, "the task"}
			if tc.unique {
				args = []string{"add", "--imp", tc.imp, "--unique", "k1", "the task"}
			}
			h, id := r.record(t, "impq", args...)
			checkStates(t, r, h, func(s *crashstate.State) []string {
				bad := r.torn()
				acked := s.Marked("ack")
				if acked && r.task(id) == nil {
					bad = append(bad, "the acknowledged task is missing")
				}
				again := []string{"add", "--imp", tc.imp, "the next task"}
				if tc.unique {
					again = args
				}
				out, err := r.run(bin, false, "impq", again...)
				if err != nil {
					return append(bad, "the next add fails: "+firstLine(err.Error()))
				}
				if tc.unique {
					if acked && strings.TrimSpace(out) != id {
						bad = append(bad, "the add again does not find the acknowledged task")
					}
					n := 0
					tasks, _ := queue.List(r.y, queue.Filter{})
					for _, tk := range tasks {
						if tk.Unique == "k1" {
							n++
						}
					}
					if n != 1 {
						bad = append(bad, fmt.Sprintf("%d tasks hold the unique key", n))
					}
					// An add that finds its key writes nothing; the next
					// change to the queue writes what a crash left out.
					if _, err := r.run(bin, false, "impq", "add", "--imp", tc.imp, "the next task"); err != nil {
						return append(bad, "the next add fails: "+firstLine(err.Error()))
					}
				}
				return append(bad, r.records()...)
			})
		})
	}
}

// fileGate files a gate for yuko with intent and payload.
func (r *crashRig) fileGate(t *testing.T, intent, payload string) string {
	t.Helper()
	g, err := gate.File(r.y, gate.FileOptions{Imp: "yuko", Intent: intent, Payload: []byte(payload), By: "yuko", Actor: "test"})
	if err != nil {
		t.Fatal(err)
	}
	return g.ID
}

// used reports whether IMPYARD_HOME marks gate id's approval used, which
// impexec makes durable before it sends anything.
func (r *crashRig) used(id string) bool {
	_, err := os.Lstat(filepath.Join(r.home, "executed", id))
	return err == nil
}

func (r *crashRig) gateState(id string) string {
	g, err := gate.Get(r.y, id)
	if err != nil {
		return "unreadable"
	}
	return g.State
}

// TestCrashStatesApprove: impgate approve, the owner's key and the gate
// store's transition mark made by the same command. In every state: no torn file; an acknowledged approval is
// there; approving again succeeds; the approval then executes (so the
// key that signed it is there too); one record per transition.
func TestCrashStatesApprove(t *testing.T) {
	r := newCrashRig(t)
	id := r.fileGate(t, "message-user", `{"text":"hello"}`)
	// The gate store's mark is made by its first transition, and the
	// approval is to make it: the mark sits in gates/, the gate in a
	// directory below, so only the mark's own sync keeps its entry.
	if err := os.Remove(r.y.Path("gates", ".recording")); err != nil {
		t.Fatal(err)
	}
	h, _ := r.record(t, "impgate", "approve", id)
	checkStates(t, r, h, func(s *crashstate.State) []string {
		bad := r.torn()
		if s.Marked("ack") && r.gateState(id) != state.Approved {
			bad = append(bad, "the acknowledged approval is missing")
		}
		if _, err := r.run(bin, false, "impgate", "approve", id); err != nil {
			return append(bad, "approving again fails: "+firstLine(err.Error()))
		}
		if _, err := r.run(bin, false, "impexec", "once", id); err != nil || r.gateState(id) != state.Executed {
			bad = append(bad, "the approved gate does not execute: "+r.gateState(id))
		}
		return append(bad, r.records()...)
	})
}

// TestCrashStatesExecute: impexec once on an approved gate of a local
// executor, message-user and memory. In every state: no torn file; an
// effect only with the mark that the approval was used; an
// acknowledged execution is there, its effect too; running impexec once
// again ends the gate executed with its effect exactly once, and one
// record per transition.
func TestCrashStatesExecute(t *testing.T) {
	for _, tc := range []struct {
		intent, payload string
		effects         func(r *crashRig, id string) int
	}{
		{"message-user", `{"text":"hello"}`, func(r *crashRig, id string) int {
			n := 0
			store.ReadJSONL(r.y.Path("notifications.jsonl"), func(line []byte) error {
				if bytes.Contains(line, []byte(`"gate":"`+id+`"`)) {
					n++
				}
				return nil
			})
			return n
		}},
		{"memory-promote", `{"text":"Digests go out on Mondays.","reason":"asked twice"}`, func(r *crashRig, id string) int {
			b, _ := os.ReadFile(r.y.Path("imps", "yuko", "memory.md"))
			return bytes.Count(b, []byte(" gate "+id+" "))
		}},
	} {
		t.Run(tc.intent, func(t *testing.T) {
			r := newCrashRig(t)
			id := r.fileGate(t, tc.intent, tc.payload)
			if _, err := r.run(bin, false, "impgate", "approve", id); err != nil {
				t.Fatal(err)
			}
			h, _ := r.record(t, "impexec", "once", id)
			checkStates(t, r, h, func(s *crashstate.State) []string {
				bad := r.torn()
				if tc.effects(r, id) > 0 && !r.used(id) {
					bad = append(bad, "an effect is there without the mark that the approval was used")
				}
				if s.Marked("ack") {
					if r.gateState(id) != state.Executed {
						bad = append(bad, "the acknowledged execution is missing")
					}
					if tc.effects(r, id) != 1 {
						bad = append(bad, "the acknowledged execution's effect is missing")
					}
				}
				r.run(bin, false, "impexec", "once", id)
				if st := r.gateState(id); st != state.Executed {
					bad = append(bad, "after impexec once again the gate is "+st)
				}
				if n := tc.effects(r, id); n != 1 {
					bad = append(bad, fmt.Sprintf("the effect is there %d times after impexec once again", n))
				}
				return append(bad, r.records()...)
			})
		})
	}
}

// TestCrashStatesGateway: one request through impgw serve to a loopback
// upstream, which marks the trace when the request reaches it. In every
// state a power cut after that mark can leave, the request's decision
// record is in the audit log, whole: no log, no traffic.
func TestCrashStatesGateway(t *testing.T) {
	r := newCrashRig(t)
	upstream := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		if err := crashstate.Mark(r.trace, "forwarded"); err != nil {
			t.Error(err)
		}
		fmt.Fprintln(w, "ok")
	}))
	defer upstream.Close()
	os.MkdirAll(r.y.Path("policies"), 0o750)
	if err := os.WriteFile(r.y.PolicyPath(), []byte(`{"schema":"impyard.policy/1","rules":[
	 {"name":"probe","match":{"protocol":"http","host":"127.0.0.1","pathPrefix":"/crash-probe","network":"127.0.0.0/8"},"verdict":"allow"}]}`), 0o640); err != nil {
		t.Fatal(err)
	}
	if _, err := r.run(bin, false, "impgw", "ca", "init"); err != nil {
		t.Fatal(err)
	}
	tok, err := r.run(bin, false, "impgw", "token", "issue", "--imp", "yuko")
	if err != nil {
		t.Fatal(err)
	}
	h, err := crashstate.Load(r.base)
	if err != nil {
		t.Fatal(err)
	}
	listen, stop := r.serve(t, crashBin, "127.0.0.1:0", true)
	proxy, _ := url.Parse("http://yuko:" + strings.TrimSpace(tok) + "@" + listen)
	client := &http.Client{Transport: &http.Transport{Proxy: http.ProxyURL(proxy)}}
	resp, err := client.Get(upstream.URL + "/crash-probe")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("the probe through the gateway: %s", resp.Status)
	}
	if err := crashstate.Mark(r.trace, "ack"); err != nil {
		t.Fatal(err)
	}
	stop()
	r.replay(t, h)
	checkStates(t, r, h, func(s *crashstate.State) []string {
		bad := r.torn()
		if !s.Marked("forwarded") {
			return bad
		}
		n := 0
		store.ReadJSONL(r.y.Path("runs", "decisions.jsonl"), func(line []byte) error {
			if bytes.Contains(line, []byte("/crash-probe")) {
				n++
			}
			return nil
		})
		if n != 1 {
			bad = append(bad, fmt.Sprintf("a forwarded request has %d whole decision records, not 1", n))
		}
		return bad
	})
}

// serve starts impgw serve from dir on the rig at listen, traced with
// traced, and returns where it listens and the function that stops it
// and waits.
func (r *crashRig) serve(t *testing.T, dir, listen string, traced bool) (string, func()) {
	t.Helper()
	cmd := exec.Command(filepath.Join(dir, "impgw"), "serve", "--listen", listen)
	cmd.Env = append(os.Environ(), "IMPYARD_ROOT="+r.root, "IMPYARD_HOME="+r.home, "USER=tester")
	if traced {
		cmd.Env = append(cmd.Env, store.TraceEnv+"="+r.trace)
	}
	pr, pw, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = pw
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	pw.Close()
	addr := make(chan string, 1)
	var logged strings.Builder
	drained := make(chan struct{})
	go func() {
		defer close(drained)
		sc := bufio.NewScanner(pr)
		for sc.Scan() {
			logged.WriteString(sc.Text() + "\n")
			if _, rest, ok := strings.Cut(sc.Text(), " serving on "); ok {
				a, _, _ := strings.Cut(rest, " ")
				select {
				case addr <- a:
				default:
				}
			}
		}
	}()
	stop := func() {
		cmd.Process.Signal(os.Interrupt)
		cmd.Wait()
		<-drained
	}
	select {
	case a := <-addr:
		return a, stop
	case <-drained:
		cmd.Wait()
		t.Fatalf("impgw serve ended:\n%s", logged.String())
	}
	return "", nil
}

// TestCrashStatesExecuteHTTP: impexec once on an approved gate of a
// non-idempotent http executor, which sends through impgw serve to a
// loopback upstream that marks the trace. In every state: no torn file;
// a request sent only with the mark that the approval was used; an
// acknowledged execution is there; after impexec once again the gate
// is executed or failed as outcome unknown, the upstream has received
// the request at most once in all (never again after a send a crash may
// have hidden), and each transition has one record.
func TestCrashStatesExecuteHTTP(t *testing.T) {
	r := newCrashRig(t)
	var sent atomic.Int32
	upstream := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		if sent.Add(1) == 1 {
			if err := crashstate.Mark(r.trace, "sent"); err != nil {
				t.Error(err)
			}
		}
		fmt.Fprintln(w, `{"id":"m-1"}`)
	}))
	defer upstream.Close()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	listen := l.Addr().String()
	l.Close()
	org := crashOrg + fmt.Sprintf(`
[gateway]
listen = %q
wait = "10s"
[executors.email-send]
kind = "http"
url = %q
fields = { to = "addresses", subject = "text" }
idempotent = false
`, listen, upstream.URL+"/emails")
	if err := os.WriteFile(r.y.Path("org.toml"), []byte(org), 0o640); err != nil {
		t.Fatal(err)
	}
	os.MkdirAll(r.y.Path("policies"), 0o750)
	if err := os.WriteFile(r.y.PolicyPath(), []byte(`{"schema":"impyard.policy/1","rules":[
	 {"name":"email-send","match":{"protocol":"http","host":"127.0.0.1","method":"POST","pathPrefix":"/emails","subject":"org","network":"127.0.0.0/8"},"verdict":"allow"}]}`), 0o640); err != nil {
		t.Fatal(err)
	}
	if _, err := r.run(bin, false, "impgw", "ca", "init"); err != nil {
		t.Fatal(err)
	}
	id := r.fileGate(t, "email-send", `{"to":["a@example.com"],"subject":"hi"}`)
	if _, err := r.run(bin, false, "impgate", "approve", id); err != nil {
		t.Fatal(err)
	}
	// The gateway is traced too: its appends to the audit log come
	// between impexec's.
	h, err := crashstate.Load(r.base)
	if err != nil {
		t.Fatal(err)
	}
	_, stop := r.serve(t, crashBin, listen, true)
	if _, err := r.run(crashBin, true, "impexec", "once", id); err != nil {
		t.Fatal(err)
	}
	if err := crashstate.Mark(r.trace, "ack"); err != nil {
		t.Fatal(err)
	}
	stop()
	if sent.Load() != 1 {
		t.Fatalf("the traced execution sent %d requests", sent.Load())
	}
	r.replay(t, h)
	checkStates(t, r, h, func(s *crashstate.State) []string {
		bad := r.torn()
		// The gateway comes back after the cut, on the state as it
		// was left, and is gone before the next state is written: a
		// gateway left running would write into the yard as it is
		// replaced.
		_, stop := r.serve(t, bin, listen, false)
		defer stop()
		if s.Marked("ack") && r.gateState(id) != state.Executed {
			bad = append(bad, "the acknowledged execution is missing")
		}
		before := 0
		if s.Marked("sent") {
			before = 1
			if !r.used(id) {
				bad = append(bad, "a request was sent without the mark that the approval was used")
			}
		}
		sent.Store(1) // no further mark
		r.run(bin, false, "impexec", "once", id)
		again := int(sent.Load()) - 1
		if before+again > 1 {
			bad = append(bad, fmt.Sprintf("the upstream received the request %d times", before+again))
		}
		g, err := gate.Get(r.y, id)
		switch {
		case err != nil:
			bad = append(bad, "the gate is unreadable after impexec once again")
		case g.State == state.Failed && !strings.Contains(g.History[len(g.History)-1].Why, "outcome unknown") && before == 1:
			bad = append(bad, "a gate whose request was sent failed without outcome unknown")
		case g.State != state.Executed && g.State != state.Failed:
			bad = append(bad, "after impexec once again the gate is "+g.State)
		}
		return append(bad, r.records()...)
	})
}

// TestCrashStatesRevoke: impgw token revoke. In every state after it was
// acknowledged, the token no longer says who is asking: a revocation a
// power cut undid would let a box that kept it back in.
func TestCrashStatesRevoke(t *testing.T) {
	r := newCrashRig(t)
	out, err := r.run(bin, false, "impgw", "token", "issue", "--imp", "yuko")
	if err != nil {
		t.Fatal(err)
	}
	tok := strings.TrimSpace(out)
	if _, err := token.Lookup(r.home, tok); err != nil {
		t.Fatalf("the token issued does not look up: %v", err)
	}
	h, _ := r.record(t, "impgw", "token", "revoke", tok)
	checkStates(t, r, h, func(s *crashstate.State) []string {
		bad := r.torn()
		if _, err := token.Lookup(r.home, tok); s.Marked("ack") && err == nil {
			bad = append(bad, "the revoked token still looks up")
		}
		return bad
	})
}
