package tests

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/impyard/impyard/internal/approvaltest"
	"github.com/impyard/impyard/lib/event"
	"github.com/impyard/impyard/lib/gate"
	"github.com/impyard/impyard/lib/gateway"
	"github.com/impyard/impyard/lib/id"
	"github.com/impyard/impyard/lib/ledger"
	"github.com/impyard/impyard/lib/mailbox"
	"github.com/impyard/impyard/lib/proposal"
	"github.com/impyard/impyard/lib/queue"
	imprun "github.com/impyard/impyard/lib/run"
	"github.com/impyard/impyard/lib/state"
	"github.com/impyard/impyard/lib/store"
	"github.com/impyard/impyard/lib/yard/yardtest"
)

// yardTime is the one form of a time in the yard: what jq 1.6's
// fromdateiso8601 reads.
var yardTime = regexp.MustCompile(`^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ$`)

// looksLikeTime is any string that starts as a date and time does.
var looksLikeTime = regexp.MustCompile(`^\d{4}-\d\d-\d\d[T ]\d\d:\d\d`)

// timesYard is a yard after a realistic sequence: tasks added (one by
// impq), moved and failed; a gate filed, approved with a signature,
// executed by impexec (a notification); another filed by impgate and
// left pending; a run started and ended with its ready file; a note in
// the journal; a message; ledger lines; a decision record and a proposal
// record as the gateway writes them.
type timesYard struct {
	root, home string
	env        []string
	taskID     string
}

func newTimesYard(t *testing.T) *timesYard {
	t.Helper()
	dir := t.TempDir()
	ty := &timesYard{root: filepath.Join(dir, "yard"), home: filepath.Join(dir, "home")}
	y := yardtest.At(t, ty.root)
	files := map[string]string{
		// A receiver, so the events are owed notifications and the
		// outbox has entries for the pages' examples to read.
		"org.toml": `[executors.message-user]
kind = "message-user"

[notify]
on = ["gate-filed", "task-failed"]
command = ["/bin/true"]
`,
		"imps/yuko/imp.toml": `image = "docker.io/library/busybox:latest"
`,
		"imps/ops/imp.toml": `image = "docker.io/library/busybox:latest"
`,
	}
	for name, text := range files {
		p := filepath.Join(ty.root, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	ty.env = append(os.Environ(), "IMPYARD_ROOT="+ty.root, "IMPYARD_HOME="+ty.home, "USER=alice", "NO_COLOR=1",
		"PATH="+bin+string(os.PathListSeparator)+os.Getenv("PATH"))

	mustRun := func(script string) string {
		t.Helper()
		out, errOut, err := ty.sh(script, 0)
		if err != nil {
			t.Fatalf("%s: %v\n%s%s", script, err, out, errOut)
		}
		return out
	}
	ty.taskID = strings.TrimSpace(mustRun(`impq add --imp yuko "draft the weekly digest"`))
	failed, _, err := queue.Add(y, queue.AddOptions{Imp: "yuko", Text: "cannot start", By: "alice", Actor: "test",
		NotBefore: time.Now().Add(90 * time.Millisecond)})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := queue.Move(y, failed, queue.Change{To: state.Failed, By: "impsup", Actor: "impsup", Why: "no usable imp configuration"}); err != nil {
		t.Fatal(err)
	}
	if _, err := queue.Move(y, ty.taskID, queue.Change{To: state.Running, By: "impsup", Actor: "impsup", Why: "started"}); err != nil {
		t.Fatal(err)
	}

	g, err := gate.File(y, gate.FileOptions{Imp: "yuko", Intent: "message-user", Task: ty.taskID,
		Payload: []byte(`{"text":"the digest is ready"}`), Rationale: "tell the owner", By: "yuko", Actor: "impgw"})
	if err != nil {
		t.Fatal(err)
	}
	approvaltest.Approve(t, y, ty.home, g.ID)
	mustRun("impexec once " + g.ID)
	mustRun(`impgate file --imp ops --intent message-user --payload-file - <<'EOF'
{"text":"disk nearly full"}
EOF`)

	r, err := imprun.Create(y, &imprun.Run{ID: id.New(id.Run), Imp: "yuko", Task: ty.taskID, Created: store.Now()}, "impsup", "impsup", "task "+ty.taskID)
	if err != nil {
		t.Fatal(err)
	}
	if err := imprun.WriteReady(y, r.ID, "127.0.0.1:7300"); err != nil {
		t.Fatal(err)
	}
	for _, to := range []string{imprun.Running, imprun.Exited} {
		if _, err := imprun.Move(y, r.ID, imprun.Change{To: to, By: "impsup", Actor: "impsup"}); err != nil {
			t.Fatal(err)
		}
	}

	if err := event.Record(y, event.Event{Event: "note", Imp: "yuko", Actor: "box", Why: "halfway"}); err != nil {
		t.Fatal(err)
	}
	if _, err := mailbox.Send(y, "yuko", "alice", "skip sports"); err != nil {
		t.Fatal(err)
	}
	if err := ledger.Debit(y, ledger.Entry{Imp: "yuko", Kind: ledger.Action, Intent: "message-user", Gate: g.ID, Cost: 0.001}); err != nil {
		t.Fatal(err)
	}

	audit, err := y.DecisionsPath()
	if err != nil {
		t.Fatal(err)
	}
	for _, rec := range []*gateway.Record{
		{ID: "9bda976d-61f1-44dc-be82-0127c71f80ae", Time: time.Now(), Verdict: gateway.VerdictDeny, Rule: "default",
			Reason: "no rule allows it", Request: gateway.RequestInfo{Imp: "yuko", Protocol: "https", Method: "GET",
				Host: "example.com", Port: 443, Path: "/"}, Status: 403},
		{ID: "0c1ff5f2-8b7e-4c55-9a51-0b2d1c6a9e11", Time: time.Now(), Verdict: gateway.VerdictAllow, Rule: "model-api",
			Reason: `rule "model-api" allows it`, Request: gateway.RequestInfo{Imp: "yuko", Protocol: "https", Method: "POST",
				Host: "chatgpt.com", Port: 443, Path: "/backend-api/codex/responses"}, Status: 200, UpstreamMS: 12.5},
	} {
		line, err := rec.MarshalJSON()
		if err != nil {
			t.Fatal(err)
		}
		if err := store.AppendLine(audit, append(line, '\n')); err != nil {
			t.Fatal(err)
		}
	}
	pr := &proposal.Record{Time: time.Now(), Imp: "yuko", Intent: "message-user", Verdict: proposal.Refused,
		Refusal: proposal.TrustDeny, Reason: "refused by a trust entry"}
	line, err := pr.MarshalJSON()
	if err != nil {
		t.Fatal(err)
	}
	if err := store.AppendLine(audit, append(line, '\n')); err != nil {
		t.Fatal(err)
	}
	return ty
}

// sh runs script in the yard with the built binaries first on PATH. A
// positive follow is how long a command that follows (impq watch) runs
// before it is stopped; it must still be running then.
func (ty *timesYard) sh(script string, follow time.Duration) (stdout, stderr string, err error) {
	cmd := exec.Command("sh", "-c", script)
	cmd.Dir, cmd.Env = ty.root, ty.env
	var o, e bytes.Buffer
	cmd.Stdout, cmd.Stderr = &o, &e
	if follow <= 0 {
		err = cmd.Run()
		return o.String(), e.String(), err
	}
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		return "", "", err
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err = <-done:
		if err == nil {
			err = fmt.Errorf("ended within %v; it should follow", follow)
		}
	case <-time.After(follow):
		syscall.Kill(-cmd.Process.Pid, syscall.SIGTERM)
		<-done
	}
	return o.String(), e.String(), err
}

// TestTimesJQReads: every time in the yard's files and in every --json
// output is RFC 3339, UTC, whole seconds, Z, and jq's fromdateiso8601
// reads it; the numeric *_ms companions are integers in the same second.
func TestTimesJQReads(t *testing.T) {
	ty := newTimesYard(t)
	var times []string
	check := func(where string, v any) {
		t.Helper()
		checkMillis(t, where, v)
		walkJSON(v, "", func(path string, s any) {
			switch x := s.(type) {
			case string:
				if looksLikeTime.MatchString(x) {
					if !yardTime.MatchString(x) {
						t.Errorf("%s: %s = %q, not RFC 3339 UTC in whole seconds", where, path, x)
					}
					times = append(times, x)
				}
			case json.Number:
				if (strings.HasSuffix(path, ".ts_ms") || strings.HasSuffix(path, ".at_ms")) && strings.ContainsAny(x.String(), ".eE") {
					t.Errorf("%s: %s = %s, not whole milliseconds", where, path, x)
				}
			}
		})
	}
	seen := map[string]bool{}
	for _, top := range []string{ty.root, ty.home} {
		filepath.Walk(top, func(p string, fi os.FileInfo, err error) error {
			if err != nil || !fi.Mode().IsRegular() {
				return err
			}
			b, _ := os.ReadFile(p)
			rel, _ := filepath.Rel(filepath.Dir(ty.root), p)
			switch {
			case strings.HasSuffix(p, ".jsonl"):
				seen[filepath.Base(p)] = true
				for i, line := range bytes.Split(bytes.TrimSpace(b), []byte("\n")) {
					check(fmt.Sprintf("%s:%d", rel, i+1), decodeJSON(t, rel, line))
				}
			case json.Valid(b) && bytes.HasPrefix(bytes.TrimSpace(b), []byte("{")):
				seen[filepath.Base(p)] = true
				check(rel, decodeJSON(t, rel, b))
			case strings.HasPrefix(rel, "home/executed/"):
				check(rel, strings.TrimSpace(string(b)))
			}
			return nil
		})
	}
	for _, want := range []string{"events.jsonl", "decisions.jsonl", "notifications.jsonl", "yuko.jsonl", "run.json", "gateway.json", ".impyard-yard"} {
		if !seen[want] {
			t.Errorf("the sequence wrote no %s to check", want)
		}
	}
	for _, c := range []string{"impq ls --json", "impq show --json " + ty.taskID, "impgate ls --json --all",
		"impgate ls --json | jq -r .id | xargs -n1 impgate show --json", "impgw log --json", "impsup status --json", "impq spend --json",
		"impgate ls --json --all | jq -r .id | xargs -n1 impgate log --json", "impgate key ls --json",
		`echo '{"schema":"impyard.policy/1","rules":[]}' > ../deny-all.json && impgw replay --policy ../deny-all.json --json`} {
		out, errOut, err := ty.sh(c, 0)
		if err != nil {
			t.Errorf("%s: %v\n%s", c, err, errOut)
			continue
		}
		dec := json.NewDecoder(strings.NewReader(out))
		dec.UseNumber()
		for n := 0; ; n++ {
			var v any
			if err := dec.Decode(&v); err != nil {
				if err.Error() != "EOF" {
					t.Errorf("%s: %v", c, err)
				}
				if n == 0 {
					t.Errorf("%s printed nothing", c)
				}
				break
			}
			check(c, v)
		}
	}
	if len(times) < 20 {
		t.Errorf("only %d times found: the walk missed the yard", len(times))
	}
	if _, err := exec.LookPath("jq"); err != nil {
		t.Skip("jq is not installed")
	}
	in, _ := json.Marshal(times)
	cmd := exec.Command("jq", "-c", "map(fromdateiso8601)")
	cmd.Stdin = bytes.NewReader(in)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("jq fromdateiso8601: %v\n%s", err, out)
	}
	var secs []int64
	if err := json.Unmarshal(out, &secs); err != nil || len(secs) != len(times) {
		t.Fatalf("jq gave %s for %d times (%v)", out, len(times), err)
	}
	for i, s := range secs {
		if want, _ := time.Parse(time.RFC3339, times[i]); want.Unix() != s {
			t.Errorf("jq read %s as %d, want %d", times[i], s, want.Unix())
		}
	}
}

// TestManExamplesRun: every example of impyard(7), impq(1), impgate(1)
// and impgw(8) that uses jq runs, exit 0, against a yard with something
// in it. impq watch follows, so it must still be running, quietly, when
// it is stopped.
func TestManExamplesRun(t *testing.T) {
	if _, err := exec.LookPath("jq"); err != nil {
		t.Skip("jq is not installed")
	}
	ty := newTimesYard(t)
	n := 0
	for _, page := range []string{"impyard.7", "impq.1", "impgate.1", "impgw.8"} {
		for _, ex := range manExamples(t, filepath.Join("..", "man", page)) {
			if !strings.Contains(ex, "jq") {
				continue
			}
			n++
			follow := time.Duration(0)
			if strings.Contains(ex, "impq watch") || strings.Contains(ex, " -f") {
				follow = 1500 * time.Millisecond
			}
			out, errOut, err := ty.sh(ex, follow)
			if err != nil || (follow > 0 && errOut != "") {
				t.Errorf("%s: %s\n%v\nstdout:\n%sstderr:\n%s", page, ex, err, out, errOut)
			}
		}
	}
	if n < 9 {
		t.Errorf("ran %d jq examples; the pages have more", n)
	}
}

// manExamples reads the commands of a page's EXAMPLES section: each .Dl
// line (without a "$ " prompt) and each literal display, as sh reads them.
func manExamples(t *testing.T, page string) []string {
	t.Helper()
	b, err := os.ReadFile(page)
	if err != nil {
		t.Fatal(err)
	}
	var out, block []string
	in, literal := false, false
	for _, line := range strings.Split(string(b), "\n") {
		switch {
		case strings.HasPrefix(line, ".Sh "):
			in = line == ".Sh EXAMPLES"
		case !in:
		case strings.HasPrefix(line, ".Bd -literal"):
			literal, block = true, nil
		case strings.HasPrefix(line, ".Ed"):
			literal = false
			out = append(out, strings.Join(block, "\n"))
		case literal:
			block = append(block, unroff(line))
		case strings.HasPrefix(line, ".Dl "):
			out = append(out, strings.TrimPrefix(unroff(strings.TrimPrefix(line, ".Dl ")), "$ "))
		}
	}
	return out
}

// unroff undoes the escapes the pages use in commands.
func unroff(s string) string {
	return strings.NewReplacer(`\(dq`, `"`, `\e`, `\`, `\&`, ``, `\-`, `-`).Replace(s)
}

func decodeJSON(t *testing.T, where string, b []byte) any {
	t.Helper()
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		t.Errorf("%s: %v", where, err)
	}
	return v
}

// walkJSON calls f with every scalar below v and its path.
func walkJSON(v any, path string, f func(path string, v any)) {
	switch x := v.(type) {
	case map[string]any:
		keys := make([]string, 0, len(x))
		for k := range x {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			walkJSON(x[k], path+"."+k, f)
		}
	case []any:
		for i, e := range x {
			walkJSON(e, fmt.Sprintf("%s[%d]", path, i), f)
		}
	default:
		f(path, v)
	}
}

// withMillis are the schemas whose lines carry ts_ms beside ts.
var withMillis = map[string]bool{"impyard.event/1": true, "impyard.decision/1": true,
	"impyard.outcome/1": true, "impyard.proposal/1": true}

// checkMillis: a line that must have ts_ms has it, and a ts_ms names an
// instant in the second its ts names.
func checkMillis(t *testing.T, where string, v any) {
	t.Helper()
	m, ok := v.(map[string]any)
	if !ok {
		return
	}
	ms, has := m["ts_ms"].(json.Number)
	if schema, _ := m["schema"].(string); withMillis[schema] && !has {
		t.Errorf("%s: a %s line without ts_ms", where, schema)
	}
	if !has {
		return
	}
	ts, _ := m["ts"].(string)
	at, err := time.Parse(time.RFC3339, ts)
	n, nerr := ms.Int64()
	if err != nil || nerr != nil || n/1000 != at.Unix() {
		t.Errorf("%s: ts %q and ts_ms %s name different seconds", where, ts, ms)
	}
}
