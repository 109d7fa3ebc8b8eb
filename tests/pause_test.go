package tests

import (
	"bufio"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/impyard/impyard/lib/gate"
	"github.com/impyard/impyard/lib/pause"
	"github.com/impyard/impyard/lib/queue"
	runrec "github.com/impyard/impyard/lib/run"
	"github.com/impyard/impyard/lib/state"
	"github.com/impyard/impyard/lib/store"
)

// pausedSpine is a spine whose imp yuko may GET /allowed/ pages of a
// loopback server that counts what reaches it.
type pausedSpine struct {
	*spine
	pages string
	hits  atomic.Int64
}

func newPausedSpine(t *testing.T) *pausedSpine {
	t.Helper()
	p := &pausedSpine{spine: newSpine(t, true, bin)}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		p.hits.Add(1)
		fmt.Fprintf(w, "page %s", r.URL.Path)
	})}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	p.pages = "http://" + ln.Addr().String()
	pol, _ := os.ReadFile(p.y.PolicyPath())
	pol = []byte(strings.Replace(string(pol), `"rules":[`, `"rules":[
	 {"name":"pages","match":{"host":"127.0.0.1","method":"GET","pathPrefix":"/allowed/","network":"127.0.0.0/8","subject":"*"},"verdict":"allow"},`, 1))
	if err := os.WriteFile(p.y.PolicyPath(), pol, 0o640); err != nil {
		t.Fatal(err)
	}
	return p
}

// get fetches path of the page server through the gateway as yuko.
func (p *pausedSpine) get(t *testing.T, tok, path string) (int, string) {
	t.Helper()
	proxy, _ := url.Parse("http://yuko:" + tok + "@" + p.listen)
	pool := x509.NewCertPool()
	caPEM, _ := os.ReadFile(filepath.Join(p.home, "ca", "ca.crt"))
	pool.AppendCertsFromPEM(caPEM)
	client := &http.Client{Transport: &http.Transport{Proxy: http.ProxyURL(proxy), TLSClientConfig: &tls.Config{RootCAs: pool}}}
	resp, err := client.Get(p.pages + path)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// connect sends a CONNECT to the page server's address through the
// gateway as yuko and returns the answer's status line.
func (p *pausedSpine) connect(t *testing.T, tok string) string {
	t.Helper()
	c, err := net.Dial("tcp", p.listen)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	host := strings.TrimPrefix(p.pages, "http://")
	auth := base64.StdEncoding.EncodeToString([]byte("yuko:" + tok))
	fmt.Fprintf(c, "CONNECT %s HTTP/1.1\r\nHost: %s\r\nProxy-Authorization: Basic %s\r\n\r\n", host, host, auth)
	line, err := bufio.NewReader(c).ReadString('\n')
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(line)
}

// exitCode runs a binary and returns its exit status and its output.
func (s *spine) exitCode(t *testing.T, name string, args ...string) (int, string) {
	t.Helper()
	out, err := s.run(t, name, args...)
	var ee *exec.ExitError
	switch {
	case err == nil:
		return 0, out
	case errors.As(err, &ee):
		return ee.ExitCode(), out
	}
	t.Fatalf("%s: %v", name, err)
	return 0, ""
}

// pauseRecords are the decision records of yuko's requests refused for a
// pause.
func pauseRecords(t *testing.T, p *pausedSpine) int {
	t.Helper()
	n := 0
	_, err := store.ReadJSONL(p.y.Path("runs", "decisions.jsonl"), func(line []byte) error {
		var d struct {
			Verdict string `json:"verdict"`
			Status  int    `json:"status"`
			Reason  string `json:"reason"`
			Request struct {
				Imp string `json:"imp"`
			} `json:"request"`
		}
		if json.Unmarshal(line, &d) == nil && d.Verdict == "deny" && d.Status == http.StatusForbidden && d.Request.Imp == "yuko" && strings.Contains(d.Reason, "the yard is paused (pause 1 by alice") {
			n++
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// TestPauseGateway: while the yard is paused the gateway forwards nothing
// of an imp's (403 naming the pause, with a decision record) and files no
// proposal, not even one an auto trust entry would approve; status and
// impgate ls show the pause first; the pause is journaled with who and
// why; impgw acknowledges it, so impsup pause returns at once; after
// resume both flow again.
func TestPauseGateway(t *testing.T) {
	p := newPausedSpine(t)
	tok := p.token(t, "yuko")
	if code, body := p.get(t, tok, "/allowed/a"); code != http.StatusOK {
		t.Fatalf("before the pause: %d %s", code, body)
	}

	code, out := p.exitCode(t, "impsup", "pause", "--reason", "owner away")
	if code != 0 || !strings.Contains(out, "taken by impgw") {
		t.Fatalf("impsup pause: exit %d\n%s", code, out)
	}
	hits := p.hits.Load()
	code, body := p.get(t, tok, "/allowed/b")
	if code != http.StatusForbidden || !strings.Contains(body, "the yard is paused") || !strings.Contains(body, "owner away") {
		t.Errorf("paused request: %d %s", code, body)
	}
	if n := p.hits.Load(); n != hits {
		t.Errorf("the page server saw %d requests while the yard was paused", n-hits)
	}
	if status := p.connect(t, tok); !strings.HasPrefix(status, "HTTP/1.1 403") {
		t.Errorf("paused CONNECT: %q", status)
	}
	if n := pauseRecords(t, p); n != 2 {
		t.Errorf("%d decision records of the refused request and CONNECT; want 2", n)
	}
	sent := len(p.mail.bodies)
	pc, po, _ := p.propose(t, tok, `{"intent":"email-send","payload":{"to":["team@ourco.com"],"subject":"s","body":"b"}}`)
	if pc != http.StatusForbidden || !strings.Contains(fmt.Sprint(po["error"]), "the yard is paused") {
		t.Errorf("paused proposal (auto trust): %d %v", pc, po)
	}
	if gates, _ := gate.List(p.y, gate.Filter{All: true}); len(gates) != 0 {
		t.Errorf("gates filed while paused: %d", len(gates))
	}
	if len(p.mail.bodies) != sent {
		t.Errorf("mail sent while paused")
	}

	if _, out := p.exitCode(t, "impsup", "status"); !strings.HasPrefix(strings.SplitN(out, "\n", 2)[1], "PAUSED yard") {
		t.Errorf("impsup status does not show the pause first:\n%s", out)
	}
	if _, out := p.exitCode(t, "impgate", "ls"); !strings.HasPrefix(out, "PAUSED yard") || !strings.Contains(out, "owner away") {
		t.Errorf("impgate ls does not show the pause first:\n%s", out)
	}
	journal, _ := os.ReadFile(p.y.Path("journal", "yuko", "events.jsonl"))
	if !strings.Contains(string(journal), `"event":"pause"`) || !strings.Contains(string(journal), `"by":"alice"`) || !strings.Contains(string(journal), `"why":"owner away"`) {
		t.Errorf("the journal does not record the pause with who and why:\n%s", journal)
	}

	if code, out := p.exitCode(t, "impsup", "resume"); code != 0 || !strings.Contains(out, "taken by impgw") {
		t.Fatalf("impsup resume: exit %d\n%s", code, out)
	}
	if code, body := p.get(t, tok, "/allowed/c"); code != http.StatusOK {
		t.Errorf("after resume: %d %s", code, body)
	}
	if pc, po, _ := p.propose(t, tok, `{"intent":"email-send","payload":{"to":["team@ourco.com"],"subject":"s","body":"b"}}`); pc != http.StatusAccepted && pc != http.StatusOK {
		t.Errorf("proposal after resume: %d %v", pc, po)
	}
}

// TestPauseNoDaemon: with no impsup or impgw running, impsup pause
// succeeds and says nothing had to take it.
func TestPauseNoDaemon(t *testing.T) {
	y := newYard(t)
	out, errOut, err := run(t, bin, y.Root, nil, "impsup", "pause", "yuko", "--reason", "quiet please")
	if err != nil || !strings.Contains(out, "nothing had to take it") {
		t.Fatalf("impsup pause: %v\n%s%s", err, out, errOut)
	}
	var ps pause.State
	b, err := os.ReadFile(y.Path("pause", "pause.json"))
	if err == nil {
		err = store.Decode("pause.json", b, pause.Kind, pause.Major, &ps)
	}
	if err != nil || ps.Imps["yuko"] == nil || ps.Imps["yuko"].Reason != "quiet please" || ps.Imps["yuko"].By != "tester" || ps.Yard != nil {
		t.Errorf("pause file: %v %s", err, b)
	}
}

// TestPauseUnacknowledged: a running impsup (its lock held) that does not
// acknowledge in time makes impsup pause exit 111 naming it; the pause
// stays written.
func TestPauseUnacknowledged(t *testing.T) {
	y := newYard(t)
	if _, err := runrec.MkRoot(y); err != nil {
		t.Fatal(err)
	}
	unlock, ok, err := store.TryLock(runrec.DaemonLock(y, "impsup"))
	if err != nil || !ok {
		t.Fatalf("lock: %v %v", ok, err)
	}
	defer unlock()
	_, errOut, err := run(t, bin, y.Root, nil, "impsup", "pause", "--timeout", "200ms")
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 111 || !strings.Contains(errOut, "[impsup] did not acknowledge") {
		t.Fatalf("impsup pause with a silent impsup: %v\n%s", err, errOut)
	}
	if b, err := os.ReadFile(y.Path("pause", "pause.json")); err != nil || !strings.Contains(string(b), `"yard"`) {
		t.Errorf("the pause was not kept: %v %s", err, b)
	}
}

// TestPauseBox: a paused yard dispatches nothing and its schedule's due
// times are recorded as skipped; after resume, dispatch goes on and the
// skipped times are not made up; impsup pause --stop stops a running box
// (acknowledged by the running impsup and impgw) and its task goes to
// review with the reason, where it stays until resume.
func TestPauseBox(t *testing.T) {
	b := newBoxYard(t)
	b.imp(t, "sleeper", map[string]string{"command": `["/bin/sh", "-c", "echo STARTED; while :; do sleep 1; done"]`})
	b.imp(t, "digest", map[string]string{"schedule": `"@every 1h"`})
	// The schedule last fired three and a half hours ago: three times are
	// due.
	mark := fmt.Sprintf(`{"schema":"impyard.mark/1","at":%q}`, time.Now().Add(-210*time.Minute).UTC().Format(time.RFC3339))
	os.MkdirAll(b.y.Path("queue", "digest"), 0o750)
	if err := os.WriteFile(b.y.Path("queue", "digest", ".schedule"), []byte(mark), 0o640); err != nil {
		t.Fatal(err)
	}
	if out, err := b.run(t, "impsup", "pause", "--reason", "audit"); err != nil {
		t.Fatalf("impsup pause: %v\n%s", err, out)
	}
	task := b.add(t, "sleeper", "sleep")
	b.once(t)
	if got := b.task(t, task); got.State != state.Waiting || len(got.Runs) != 0 {
		t.Fatalf("a paused yard dispatched task %s: %s, runs %v", task, got.State, got.Runs)
	}
	if ts, _ := queue.List(b.y, queue.Filter{Imp: "digest"}); len(ts) != 0 {
		t.Fatalf("a paused schedule fired %d tasks", len(ts))
	}
	journal, _ := os.ReadFile(b.y.Path("journal", "digest", "events.jsonl"))
	if n := strings.Count(string(journal), `"event":"schedule-skipped"`); n != 1 || !strings.Contains(string(journal), "the yard is paused") {
		t.Fatalf("%d schedule-skipped events, want 1 naming the pause:\n%s", n, journal)
	}

	if out, err := b.run(t, "impsup", "resume"); err != nil {
		t.Fatalf("impsup resume: %v\n%s", err, out)
	}
	b.daemon(t, bin, "impsup", "run")
	waitFor(t, "the sleeper's box to start", func() bool {
		got := b.task(t, task)
		if len(got.Runs) == 0 {
			return false
		}
		log, _ := os.ReadFile(runrec.Path(b.y, got.Runs[0], "box.log"))
		return strings.Contains(string(log), "STARTED")
	})
	if ts, _ := queue.List(b.y, queue.Filter{Imp: "digest"}); len(ts) != 0 {
		t.Errorf("the skipped schedule times were made up after resume: %d tasks", len(ts))
	}

	out, err := b.run(t, "impsup", "pause", "sleeper", "--stop", "--reason", "runaway loop", "--timeout", "20s")
	if err != nil || !strings.Contains(out, "taken by impsup, impgw") {
		t.Fatalf("impsup pause --stop: %v\n%s", err, out)
	}
	waitFor(t, "the stopped task to go to review", func() bool { return b.task(t, task).State != state.Running })
	if got := b.task(t, task); got.State != state.NeedsReview || !strings.Contains(got.Reason, "runaway loop") {
		t.Errorf("stopped task: %s %q", got.State, got.Reason)
	}
	// After resume the task, cut short, fails so that impq retry can run
	// it again.
	if out, err := b.run(t, "impsup", "resume"); err != nil {
		t.Fatalf("impsup resume: %v\n%s", err, out)
	}
	waitFor(t, "the stopped task to settle after resume", func() bool { return b.task(t, task).State != state.NeedsReview })
	if got := b.task(t, task); got.State != state.Failed || !strings.Contains(got.Reason, "impq retry") {
		t.Errorf("stopped task after resume: %s %q", got.State, got.Reason)
	}
}

// TestPauseHoldsApproved: a gate approved before or during a pause of its
// imp is held by impexec, approved, nothing sent, with the pause named
// and exit 111; after resume it is executed.
func TestPauseHoldsApproved(t *testing.T) {
	s := newSpine(t, true, bin)
	tok := s.token(t, "yuko", "--run", "r-0000000000000001")
	code, out, _ := s.propose(t, tok, `{"intent":"email-send","payload":{"to":["boss@elsewhere.com"],"subject":"held","body":"hi"}}`)
	if code != http.StatusAccepted {
		t.Fatalf("proposal: %d %v", code, out)
	}
	gid := out["gate_id"].(string)
	if c, o := s.exitCode(t, "impsup", "pause", "yuko", "--reason", "checking the mailer"); c != 0 {
		t.Fatalf("impsup pause: %d %s", c, o)
	}
	if out, err := s.run(t, "impgate", "approve", gid); err != nil {
		t.Fatalf("approve: %v %s", err, out)
	}
	c, o := s.exitCode(t, "impexec", "once", gid)
	g, _ := gate.Get(s.y, gid)
	if c != 111 || !strings.Contains(o, "imp yuko is paused") || !strings.Contains(o, "checking the mailer") || g == nil || g.State != state.Approved {
		t.Fatalf("impexec once while paused: exit %d %s; gate %v", c, o, g)
	}
	if _, o := s.exitCode(t, "impsup", "status"); !strings.Contains(o, gid+" waits: held: imp yuko is paused") {
		t.Errorf("impsup status does not show why the approved gate waits:\n%s", o)
	}
	s.mail.mu.Lock()
	sent := len(s.mail.bodies)
	s.mail.mu.Unlock()
	if sent != 0 {
		t.Fatalf("the mail API saw %d requests while the imp was paused", sent)
	}
	if c, o := s.exitCode(t, "impsup", "resume", "yuko"); c != 0 {
		t.Fatalf("impsup resume: %d %s", c, o)
	}
	if c, o := s.exitCode(t, "impexec", "once", gid); c != 0 {
		t.Fatalf("impexec once after resume: exit %d %s", c, o)
	}
	if g, _ := gate.Get(s.y, gid); g == nil || g.State != state.Executed {
		t.Errorf("gate after resume: %v", g)
	}
}
