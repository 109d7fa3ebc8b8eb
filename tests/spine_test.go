package tests

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/impyard/impyard/lib/event"
	"github.com/impyard/impyard/lib/gate"
	"github.com/impyard/impyard/lib/state"
	"github.com/impyard/impyard/lib/store"
	"github.com/impyard/impyard/lib/yard"
)

// mailAPI stands in for an email API on loopback: it logs every request
// and answers like a mail service.
type mailAPI struct {
	srv    *httptest.Server
	mu     sync.Mutex
	seen   map[string]int // idempotency key -> times received
	auth   []string
	bodies []string
	keys   []string // the Idempotency-Key of each request, as bodies
}

func newMailAPI(t testing.TB) *mailAPI {
	m := &mailAPI{seen: map[string]int{}}
	m.srv = httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		key := r.Header.Get("Idempotency-Key")
		m.mu.Lock()
		m.seen[key]++
		m.auth = append(m.auth, r.Header.Get("Authorization"))
		m.bodies = append(m.bodies, string(b))
		m.keys = append(m.keys, key)
		m.mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprintf(w, `{"id":"msg-%s"}`, key)
	}))
	t.Cleanup(m.srv.Close)
	return m
}

func (m *mailAPI) certPEM() []byte {
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: m.srv.Certificate().Raw})
}

// spine is a yard with a running impgw and impexec.
type spine struct {
	y      *yard.Yard
	home   string
	listen string
	mail   *mailAPI
	env    []string
	bin    string
}

const secret = "re_live_5ecret_never_in_a_box"

func newSpine(t testing.TB, idempotent bool, binDir string) *spine {
	t.Helper()
	s := &spine{y: newYard(t), home: t.TempDir(), mail: newMailAPI(t), listen: "127.0.0.1:0", bin: binDir}
	s.env = []string{"IMPYARD_ROOT=" + s.y.Root, "IMPYARD_HOME=" + s.home, "USER=alice"}
	os.MkdirAll(filepath.Join(s.home, "secrets"), 0o700)
	os.WriteFile(filepath.Join(s.home, "secrets", "resend"), []byte(secret+"\n"), 0o600)
	upCA := filepath.Join(t.TempDir(), "upstream.pem")
	os.WriteFile(upCA, s.mail.certPEM(), 0o644)
	mailURL := s.mail.srv.URL + "/emails"
	os.MkdirAll(s.y.Path("policies"), 0o750)
	os.WriteFile(s.y.PolicyPath(), []byte(`{"schema":"impyard.policy/1","upstreamCA":"`+upCA+`","rules":[
	 {"name":"email-send","match":{"protocol":"https","host":"127.0.0.1","method":"POST","pathPrefix":"/emails","subject":"org","network":"127.0.0.0/8"},
	  "verdict":"allow","inject":{"header":"authorization","secret":"resend","format":"Bearer %s"}}]}`), 0o640)
	os.WriteFile(s.y.Path("org.toml"), []byte(fmt.Sprintf(`
[gateway]
listen = %q
wait = "10s"
[[trust]]
intent = "email-send"
imp = "yuko"
match = { to = "*@ourco.com" }
free = ["subject", "body"]
level = "auto"
[executors.email-send]
kind = "http"
url = %q
fields = { to = "addresses", cc = "addresses", bcc = "addresses", subject = "text", body = "text" }
idempotent = %v
cost = 0.01
[executors.egress-grant]
kind = "egress-grant"
`, s.listen, mailURL, idempotent)), 0o640)
	if out, err := s.run(t, "impgw", "ca", "init"); err != nil {
		t.Fatalf("ca init: %v %s", err, out)
	}
	s.listen = s.serveGateway(t)
	org, _ := os.ReadFile(s.y.Path("org.toml"))
	os.WriteFile(s.y.Path("org.toml"), []byte(strings.Replace(string(org), `listen = "127.0.0.1:0"`, fmt.Sprintf("listen = %q", s.listen), 1)), 0o640)
	return s
}

func (s *spine) run(t testing.TB, name string, args ...string) (string, error) {
	t.Helper()
	cmd := exec.Command(filepath.Join(bin, name), args...)
	cmd.Env = append(os.Environ(), s.env...)
	out, err := cmd.CombinedOutput()
	return string(out), err
}

func (s *spine) daemon(t testing.TB, dir, name string, args ...string) {
	t.Helper()
	cmd := exec.Command(filepath.Join(dir, name), args...)
	cmd.Env = append(os.Environ(), s.env...)
	var errOut bytes.Buffer
	cmd.Stderr = &errOut
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cmd.Process.Signal(os.Interrupt)
		done := make(chan struct{})
		go func() { cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(5 * time.Second):
			cmd.Process.Kill()
		}
		if t.Failed() {
			t.Logf("%s stderr:\n%s", name, errOut.String())
		}
	})
}

func (s *spine) token(t testing.TB, imp string, extra ...string) string {
	t.Helper()
	out, err := s.run(t, "impgw", append([]string{"token", "issue", "--imp", imp}, extra...)...)
	if err != nil {
		t.Fatalf("token issue: %v %s", err, out)
	}
	return strings.TrimSpace(out)
}

func (s *spine) propose(t testing.TB, tok, envelope string) (int, map[string]any, time.Duration) {
	t.Helper()
	req, _ := http.NewRequest("POST", "http://"+s.listen+"/v1/actions", strings.NewReader(envelope))
	req.Header.Set("Authorization", "Bearer "+tok)
	req.Header.Set("Content-Type", "application/json")
	start := time.Now()
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var out map[string]any
	b, _ := io.ReadAll(resp.Body)
	if err := json.Unmarshal(b, &out); err != nil {
		t.Fatalf("answer is not JSON: %d %s", resp.StatusCode, b)
	}
	return resp.StatusCode, out, time.Since(start)
}

func (s *spine) waitState(t testing.TB, gateID string, want ...string) *gate.Gate {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for {
		g, err := gate.Get(s.y, gateID)
		if err == nil {
			for _, w := range want {
				if g.State == w {
					// The transition appends its journal and audit records
					// under the gates lock after it writes the gate file:
					// taking that lock once waits for them.
					d, err := s.y.GatesDir()
					if err == nil {
						err = d.Update(func(*store.Tx) error { return nil })
					}
					if err != nil {
						t.Fatal(err)
					}
					return g
				}
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("gate %s is %v, want one of %v", gateID, g.State, want)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// grepTree reports files under dir that contain needle.
func grepTree(t *testing.T, dir, needle string) []string {
	var hits []string
	filepath.Walk(dir, func(p string, fi os.FileInfo, err error) error {
		if err == nil && fi.Mode().IsRegular() {
			if b, _ := os.ReadFile(p); bytes.Contains(b, []byte(needle)) {
				hits = append(hits, p)
			}
		}
		return nil
	})
	return hits
}

// TestSpineEmail is the seed's story end to end: an email-send envelope
// from yuko files a gate and returns at once; the desk shows the exact
// bytes; approval leads impexec to send it through the gateway with the
// injected key; the timeline tells the whole story; no yard file holds the
// key. Then the trust ladder's auto path, and an imp calling the mail API
// itself.
func TestSpineEmail(t *testing.T) {
	s := newSpine(t, true, bin)
	s.daemon(t, bin, "impexec", "run", "--rescan", "2s")
	tok := s.token(t, "yuko", "--run", "r-0000000000000001")

	code, out, took := s.propose(t, tok, `{"intent":"email-send","payload":{"to":["team@ourco.com","boss@elsewhere.com"],"subject":"Weekly digest","body":"Three things happened."},"rationale":"weekly digest requested by owner","run_id":"r-0000000000000001"}`)
	if code != http.StatusAccepted || out["status"] != "pending" {
		t.Fatalf("gated envelope: %d %v", code, out)
	}
	t.Logf("envelope -> pending in %v", took)
	gid := out["gate_id"].(string)
	show, err := s.run(t, "impgate", "show", gid)
	if err != nil || !strings.Contains(show, `"boss@elsewhere.com"`) || !strings.Contains(show, `"Weekly digest"`) || !strings.Contains(show, `"Three things happened."`) {
		t.Fatalf("impgate show: %v\n%s", err, show)
	}
	if len(s.mail.bodies) != 0 {
		t.Fatalf("sent before approval")
	}
	if out, err := s.run(t, "impgate", "approve", gid); err != nil {
		t.Fatalf("approve: %v %s", err, out)
	}
	g := s.waitState(t, gid, state.Executed, state.Failed)
	if g.State != state.Executed {
		t.Fatalf("gate ended %s: %s", g.State, g.History[len(g.History)-1].Why)
	}
	s.mail.mu.Lock()
	if len(s.mail.auth) != 1 || s.mail.auth[0] != "Bearer "+secret || s.mail.seen[gid] != 1 {
		t.Errorf("upstream saw auth %q and key counts %v; want the injected key once under %s", s.mail.auth, s.mail.seen, gid)
	}
	var sent map[string]any
	json.Unmarshal([]byte(s.mail.bodies[0]), &sent)
	if sent["subject"] != "Weekly digest" {
		t.Errorf("upstream got %s", s.mail.bodies[0])
	}
	s.mail.mu.Unlock()
	log, _ := s.run(t, "impgate", "log", gid)
	for _, want := range []string{"-> filed", "filed        -> approved     by alice", "approved     -> executing", "executing    -> executed"} {
		if !strings.Contains(log, want) {
			t.Errorf("impgate log lacks %q:\n%s", want, log)
		}
	}
	journal, _ := os.ReadFile(s.y.Path("journal", "yuko", "events.jsonl"))
	for _, want := range []string{`"event":"gate-filed"`, `"event":"gate-approved","imp":"yuko","actor":"impgate","by":"alice"`, `"event":"gate-executing"`, `"event":"gate-executed"`} {
		if !bytes.Contains(journal, []byte(want)) {
			t.Errorf("journal lacks %s", want)
		}
	}
	if hits := grepTree(t, s.y.Root, secret); len(hits) > 0 {
		t.Errorf("the secret leaked into %v", hits)
	}

	// Internal recipients only: the trust rule approves, one call returns
	// the upstream's answer.
	code, out, took = s.propose(t, tok, `{"intent":"email-send","payload":{"to":["team@ourco.com"],"subject":"status","body":"ok"}}`)
	if code != http.StatusOK || out["status"] != "done" {
		t.Fatalf("auto envelope: %d %v", code, out)
	}
	t.Logf("auto envelope -> done in %v", took)
	res, _ := json.Marshal(out["result"])
	if !strings.Contains(string(res), "msg-"+out["gate_id"].(string)) {
		t.Errorf("result lacks the upstream's answer: %s", res)
	}

	// The same trust rule against the attacker: a comma list in one
	// string is refused at the door, a bcc it does not name is gated, and
	// the mail API sees neither.
	sentBefore := len(s.mail.bodies)
	code, out, _ = s.propose(t, tok, `{"intent":"email-send","payload":{"to":"attacker@evil.com, team@ourco.com","subject":"status","body":"ok"}}`)
	if code != http.StatusBadRequest || !strings.Contains(fmt.Sprint(out["error"]), `field "to"`) {
		t.Errorf("comma list: %d %v", code, out)
	}
	code, out, _ = s.propose(t, tok, `{"intent":"email-send","payload":{"to":["team@ourco.com"],"bcc":["attacker@evil.com"],"subject":"status","body":"ok"}}`)
	if code != http.StatusAccepted || out["status"] != "pending" {
		t.Errorf("bcc: %d %v", code, out)
	}
	if len(s.mail.bodies) != sentBefore {
		t.Errorf("the mail API saw an attacker's payload: %v", s.mail.bodies[sentBefore:])
	}

	// The imp calls the mail API itself through the proxy: no rule lets
	// it, and the key is never added.
	before := len(s.mail.bodies)
	proxy, _ := url.Parse("http://yuko:" + tok + "@" + s.listen)
	pool := x509.NewCertPool()
	caPEM, _ := os.ReadFile(filepath.Join(s.home, "ca", "ca.crt"))
	pool.AppendCertsFromPEM(caPEM)
	client := &http.Client{Transport: &http.Transport{Proxy: http.ProxyURL(proxy), TLSClientConfig: &tls.Config{RootCAs: pool}}}
	resp, err := client.Post(s.mail.srv.URL+"/emails", "application/json", strings.NewReader(`{"to":["all@world.com"]}`))
	if err == nil {
		resp.Body.Close()
		if resp.StatusCode != http.StatusForbidden {
			t.Errorf("direct call answered %d", resp.StatusCode)
		}
	}
	if len(s.mail.bodies) != before {
		t.Errorf("an imp reached the mail API directly")
	}
	var denied bool
	store.ReadJSONL(s.y.Path("runs", "decisions.jsonl"), func(line []byte) error {
		var d struct {
			Verdict string `json:"verdict"`
			Request struct {
				Imp  *string `json:"imp"`
				Path string  `json:"path"`
			} `json:"request"`
		}
		if json.Unmarshal(line, &d) == nil && d.Verdict == "deny" && d.Request.Imp != nil && *d.Request.Imp == "yuko" {
			denied = true
		}
		return nil
	})
	if !denied {
		t.Errorf("no deny record for yuko's direct call")
	}
}

// auditCounts counts the records of each (gate, seq) in the audit log.
func auditCounts(t *testing.T, y *yard.Yard) map[string]map[int]int {
	counts := map[string]map[int]int{}
	store.ReadJSONL(y.Path("runs", "decisions.jsonl"), func(line []byte) error {
		var e event.Event
		if json.Unmarshal(line, &e) == nil && e.Schema == "impyard.event/1" && strings.HasPrefix(e.ID, "g-") {
			if counts[e.ID] == nil {
				counts[e.ID] = map[int]int{}
			}
			counts[e.ID][e.Seq]++
		}
		return nil
	})
	return counts
}

// TestExecutorCrashPoints kills impexec at each named crash point many
// times, restarts it, and checks every request the upstream received: each
// gate sent under its own id as the Idempotency-Key, as many times as the
// point allows (an idempotent executor resends what it may have sent, a
// non-idempotent one never sends a gate twice), a terminal state (or
// outcome unknown) for every gate, and exactly one audit record per
// transition.
func TestExecutorCrashPoints(t *testing.T) {
	rounds := 50
	if testing.Short() {
		rounds = 5
	}
	// Requests per gate that reach the upstream when impexec dies at the
	// point and a second impexec takes the gate up. mid-audit-append is
	// the first audit record, the move to executing: the gate never began,
	// so the second impexec begins it, whatever its executor.
	sends := map[bool]map[string]int{
		true:  {"after-mark-executing": 1, "after-send": 2, "before-mark-executed": 2, "mid-audit-append": 1},
		false: {"after-mark-executing": 0, "after-send": 1, "before-mark-executed": 1, "mid-audit-append": 1},
	}
	for _, idem := range []bool{true, false} {
		t.Run(fmt.Sprintf("idempotent=%v", idem), func(t *testing.T) {
			s := newSpine(t, idem, bin)
			n := rounds
			if !idem {
				n = rounds / 5
			}
			var gates []string
			pointOf := map[string]string{} // gate -> crash point
			gateOf := map[string]string{}  // "point n" in the payload -> gate
			for _, point := range []string{"after-mark-executing", "after-send", "before-mark-executed", "mid-audit-append"} {
				for i := 0; i < n; i++ {
					g, err := gate.File(s.y, gate.FileOptions{Imp: "yuko", Intent: "email-send", Payload: []byte(fmt.Sprintf(`{"to":["x@elsewhere.com"],"n":%d,"p":%q}`, i, point)), By: "yuko", Actor: "test"})
					if err != nil {
						t.Fatal(err)
					}
					if out, err := s.run(t, "impgate", "approve", g.ID); err != nil {
						t.Fatalf("approve: %v %s", err, out)
					}
					gates = append(gates, g.ID)
					pointOf[g.ID] = point
					gateOf[fmt.Sprintf("%s %d", point, i)] = g.ID
					cmd := exec.Command(filepath.Join(crashBin, "impexec"), "once", g.ID)
					cmd.Env = append(os.Environ(), append(s.env, "IMPYARD_CRASH="+point)...)
					out, err := cmd.CombinedOutput()
					if !signalled(err) {
						t.Fatalf("%s: impexec was not killed at the crash point: %v %s", point, err, out)
					}
					// The restart.
					out2, _ := s.run(t, "impexec", "once", g.ID)
					got, _ := gate.Get(s.y, g.ID)
					last := got.History[len(got.History)-1].Why
					switch {
					case idem && got.State != state.Executed:
						t.Fatalf("%s: idempotent gate ended %s: %s %s", point, got.State, last, out2)
					case !idem && got.State == state.Failed && !strings.Contains(last, "outcome unknown"):
						t.Fatalf("%s: failed without outcome unknown: %s", point, last)
					case !state.GateMachine.Terminal(got.State):
						t.Fatalf("%s: gate left %s", point, got.State)
					}
				}
			}
			// Every request the upstream received, attributed to its gate by
			// the payload it carried, not by the key it was sent under.
			got := map[string]int{}
			s.mail.mu.Lock()
			for i, body := range s.mail.bodies {
				var p struct {
					N int    `json:"n"`
					P string `json:"p"`
				}
				json.Unmarshal([]byte(body), &p)
				gid := gateOf[fmt.Sprintf("%s %d", p.P, p.N)]
				if gid == "" {
					t.Errorf("the upstream received a request of no gate: %s", body)
					continue
				}
				got[gid]++
				if s.mail.keys[i] != gid {
					t.Errorf("gate %s was sent under Idempotency-Key %q, not its id", gid, s.mail.keys[i])
				}
			}
			s.mail.mu.Unlock()
			for _, gid := range gates {
				if want := sends[idem][pointOf[gid]]; got[gid] != want {
					t.Errorf("gate %s (killed at %s) reached the upstream %d times, want %d", gid, pointOf[gid], got[gid], want)
				}
			}
			counts := auditCounts(t, s.y)
			for _, gid := range gates {
				g, _ := gate.Get(s.y, gid)
				for seq := 1; seq <= len(g.History); seq++ {
					if counts[gid][seq] != 1 {
						t.Errorf("gate %s transition %d (%s) has %d audit records", gid, seq, g.History[seq-1].To, counts[gid][seq])
					}
				}
				if len(counts[gid]) != len(g.History) {
					t.Errorf("gate %s: %d transitions, audit records for %v", gid, len(g.History), counts[gid])
				}
			}
		})
	}
}

// through sends a GET through the gateway as imp with its token and
// returns the status.
func (s *spine) through(t *testing.T, imp, tok, target string) int {
	t.Helper()
	proxy, _ := url.Parse("http://" + imp + ":" + tok + "@" + s.listen)
	pool := x509.NewCertPool()
	caPEM, _ := os.ReadFile(filepath.Join(s.home, "ca", "ca.crt"))
	pool.AppendCertsFromPEM(caPEM)
	client := &http.Client{Transport: &http.Transport{Proxy: http.ProxyURL(proxy), TLSClientConfig: &tls.Config{RootCAs: pool}}}
	resp, err := client.Get(target)
	if err != nil {
		if strings.Contains(err.Error(), "Forbidden") {
			return http.StatusForbidden
		}
		t.Fatalf("GET %s: %v", target, err)
	}
	resp.Body.Close()
	return resp.StatusCode
}

// TestEgressGrant: an imp denied by the gateway proposes the narrow rule
// it needs; the gate shows the exact rule, scoped to that imp; once
// approved, the next request is decided by it without a restart, and
// another imp's is not. A grant cannot ask for a network allowance, so the
// loopback upstream stays refused: the rule decides, the address floor
// holds.
func TestEgressGrant(t *testing.T) {
	s := newSpine(t, true, bin)
	s.daemon(t, bin, "impexec", "run", "--rescan", "2s")
	yuko, rex := s.token(t, "yuko"), s.token(t, "rex")
	docs := s.mail.srv.URL + "/docs/index.html"
	if code := s.through(t, "yuko", yuko, docs); code != http.StatusForbidden {
		t.Fatalf("before the grant: %d", code)
	}
	if code, out, _ := s.propose(t, yuko, `{"intent":"egress-grant","payload":{"name":"docs","match":{"host":"127.0.0.1","method":"GET","pathPrefix":"/docs/","network":"127.0.0.0/8"},"verdict":"allow"}}`); code != http.StatusBadRequest || !strings.Contains(fmt.Sprint(out["error"]), "network") {
		t.Errorf("a grant asking for a network: %d %v", code, out)
	}
	code, out, _ := s.propose(t, yuko, `{"intent":"egress-grant","payload":{"name":"docs","match":{"host":"127.0.0.1","method":"GET","pathPrefix":"/docs/"},"verdict":"allow"},"rationale":"I need the docs"}`)
	if code != http.StatusAccepted {
		t.Fatalf("proposal: %d %v", code, out)
	}
	gid := out["gate_id"].(string)
	raw, err := s.run(t, "impgate", "show", "--raw", gid)
	if err != nil || !strings.Contains(raw, `"name":"grant-yuko-docs"`) || !strings.Contains(raw, `"subject":"yuko"`) {
		t.Fatalf("the gate does not show the rule that will go in: %v %s", err, raw)
	}
	if code, out, _ := s.propose(t, yuko, `{"intent":"egress-grant","payload":{"name":"all","match":{"host":"*"},"verdict":"allow","inject":{"header":"authorization","secret":"resend"}}}`); code != http.StatusBadRequest {
		t.Errorf("a grant asking for a credential: %d %v", code, out)
	}
	if out, err := s.run(t, "impgate", "approve", gid); err != nil {
		t.Fatalf("approve: %v %s", err, out)
	}
	if g := s.waitState(t, gid, state.Executed, state.Failed); g.State != state.Executed {
		t.Fatalf("grant ended %s: %s", g.State, g.History[len(g.History)-1].Why)
	}
	if code := s.through(t, "yuko", yuko, docs); code != http.StatusForbidden {
		t.Errorf("after the grant yuko reached a loopback upstream: %d", code)
	}
	if rule, reason := lastDecision(t, s.y, "yuko"); rule != "grant-yuko-docs" || !strings.Contains(reason, "does not allow that network") {
		t.Errorf("yuko's request after the grant: rule %q, %q", rule, reason)
	}
	if code := s.through(t, "rex", rex, docs); code != http.StatusForbidden {
		t.Errorf("the grant opened the door for rex too: %d", code)
	}
	if rule, reason := lastDecision(t, s.y, "rex"); rule == "grant-yuko-docs" {
		t.Errorf("yuko's grant decided rex's request: %q", reason)
	}
	if _, err := os.Stat(s.y.PolicyPath() + ".1"); err != nil {
		t.Errorf("no backup of the previous policy: %v", err)
	}
}

// lastDecision returns the rule and reason of imp's last request decision.
func lastDecision(t *testing.T, y *yard.Yard, imp string) (rule, reason string) {
	t.Helper()
	store.ReadJSONL(y.Path("runs", "decisions.jsonl"), func(line []byte) error {
		var d struct {
			Schema  string `json:"schema"`
			Rule    string `json:"rule"`
			Reason  string `json:"reason"`
			Request struct {
				Imp *string `json:"imp"`
			} `json:"request"`
		}
		if json.Unmarshal(line, &d) == nil && d.Schema == "impyard.decision/1" && d.Request.Imp != nil && *d.Request.Imp == imp {
			rule, reason = d.Rule, d.Reason
		}
		return nil
	})
	return rule, reason
}
