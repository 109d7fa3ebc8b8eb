package grant

import (
	"errors"
	"net/netip"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/impyard/impyard/lib/judge"
	"github.com/impyard/impyard/lib/yard"
	"github.com/impyard/impyard/lib/yard/yardtest"
)

// public is a public address, so the judge's floor does not decide.
var public = netip.MustParseAddr("93.184.216.34")

func grantYard(t *testing.T) *yard.Yard {
	t.Helper()
	y := yardtest.New(t)
	os.MkdirAll(y.Path("policies"), 0o750)
	if err := os.WriteFile(y.PolicyPath(), []byte(policy), 0o640); err != nil {
		t.Fatal(err)
	}
	return y
}

// judgeAt judges a GET by yuko for task to host at a time under the
// yard's policy, and names the deciding rule ("" for a deny).
func judgeAt(t *testing.T, y *yard.Yard, host, task string, at time.Time) string {
	t.Helper()
	p, err := judge.Load(y.PolicyPath())
	if err != nil {
		t.Fatal(err)
	}
	d := p.Judge(&judge.Request{Subject: "yuko", Task: task, Time: at, Protocol: "https", Method: "GET", Host: host, Port: 443, Path: "/",
		Addr: public})
	if d.Verdict != judge.Allow {
		return ""
	}
	return d.Rule
}

// A grant for an hour, scoped to its task, goes in as a rule that names
// its end and its task; it holds for that task until then, and Sweep
// removes it once its hour is over, keeping the policy before.
func TestTemporaryGrant(t *testing.T) {
	y := grantYard(t)
	approved := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	rule, err := Rule("yuko", "t-1", []byte(`{"name":"docs","match":{"host":"docs.python.org","query":{"v":"3.*"}},"verdict":"allow","expires":"1h","scope":"task"}`))
	if err != nil {
		t.Fatal(err)
	}
	if got := Describe(rule, "t-1", time.Time{}); got != "scope task: only the runs of task t-1; expires 1h0m0s after approval" {
		t.Errorf("Describe pending: %q", got)
	}
	if got := Describe(rule, "t-1", approved); got != "scope task: only the runs of task t-1; expires 1h0m0s after approval, at 2026-03-01T13:00:00Z" {
		t.Errorf("Describe approved: %q", got)
	}
	detail, err := Apply(y, Grant{Imp: "yuko", Task: "t-1", Approved: approved}, rule)
	if err != nil {
		t.Fatal(err)
	}
	if want := "rule grant-yuko-docs inserted at position 3, for task t-1, until 2026-03-01T13:00:00Z; previous policy kept as gateway.json.1"; detail != want {
		t.Errorf("detail\n got: %s\nwant: %s", detail, want)
	}
	b, _ := os.ReadFile(y.PolicyPath())
	for _, want := range []string{`"expires": "2026-03-01T13:00:00Z"`, `"task": "t-1"`, `"query": {`} {
		if !strings.Contains(string(b), want) {
			t.Errorf("policy lacks %s:\n%s", want, b)
		}
	}
	if strings.Contains(string(b), `"scope"`) || strings.Contains(string(b), `"1h"`) {
		t.Errorf("the grant's terms reached the policy:\n%s", b)
	}
	// Applied again (a resumed execution): the same rule, nothing changes.
	if d, err := Apply(y, Grant{Imp: "yuko", Task: "t-1", Approved: approved}, rule); err != nil || !strings.Contains(d, "already present") {
		t.Errorf("second apply: %s %v", d, err)
	}

	p, _ := judge.Load(y.PolicyPath())
	req := func(task string, at time.Time) judge.Decision {
		return p.Judge(&judge.Request{Subject: "yuko", Task: task, Time: at, Protocol: "https", Method: "GET", Host: "docs.python.org", Port: 443, Path: "/", Query: "v=3.12",
			Addr: public})
	}
	if d := req("t-1", approved.Add(59*time.Minute)); d.Rule != "grant-yuko-docs" || d.Verdict != judge.Allow {
		t.Errorf("within its hour and task: %+v", d)
	}
	if d := req("t-2", approved.Add(time.Minute)); d.Verdict != judge.Deny {
		t.Errorf("another task: %+v", d)
	}
	if d := req("t-1", approved.Add(time.Hour)); d.Verdict != judge.Deny {
		t.Errorf("after its hour: %+v", d)
	}

	if d, err := Sweep(y, approved.Add(59*time.Minute)); d != "" || err != nil {
		t.Errorf("sweep before the end: %q %v", d, err)
	}
	d, err := Sweep(y, approved.Add(time.Hour))
	if err != nil || d != "expired grant-yuko-docs removed; previous policy kept as gateway.json.2" {
		t.Errorf("sweep at the end: %q %v", d, err)
	}
	if b, _ := os.ReadFile(y.PolicyPath() + ".2"); !strings.Contains(string(b), "grant-yuko-docs") {
		t.Errorf("the backup does not hold the swept rule")
	}
	pp, err := judge.Load(y.PolicyPath())
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, r := range pp.Rules() {
		names = append(names, r.Name)
	}
	if got := strings.Join(names, ","); got != "model-api,no-tracker,default-deny" {
		t.Errorf("after the sweep: %s", got)
	}
	// The same grant approved again later replaces nothing and holds anew.
	later := approved.Add(2 * time.Hour)
	if _, err := Apply(y, Grant{Imp: "yuko", Task: "t-1", Approved: later}, rule); err != nil {
		t.Fatal(err)
	}
	if d, _ := Sweep(y, later.Add(time.Minute)); d != "" {
		t.Errorf("a renewed grant swept: %s", d)
	}
}

// A grant of a name already granted replaces the earlier rule where it
// stands: a new task's grant does not hide behind the last task's.
func TestGrantRenewedForAnotherTask(t *testing.T) {
	y := grantYard(t)
	rule, err := Rule("yuko", "t-1", []byte(`{"name":"docs","match":{"host":"docs.python.org"},"verdict":"allow","scope":"task"}`))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Apply(y, Grant{Imp: "yuko", Task: "t-1"}, rule); err != nil {
		t.Fatal(err)
	}
	d, err := Apply(y, Grant{Imp: "yuko", Task: "t-2"}, rule)
	if err != nil || !strings.HasPrefix(d, "rule grant-yuko-docs replaced the earlier grant at position 3, for task t-2") {
		t.Fatalf("second task: %q %v", d, err)
	}
	if got := judgeAt(t, y, "docs.python.org", "t-2", time.Now()); got != "grant-yuko-docs" {
		t.Errorf("t-2 decided by %q", got)
	}
	if got := judgeAt(t, y, "docs.python.org", "t-1", time.Now()); got != "" {
		t.Errorf("t-1 still allowed by %q", got)
	}
}

func TestGrantTermsRefused(t *testing.T) {
	for _, tc := range []struct{ rule, task, want string }{
		{`{"name":"x","match":{"host":"a.example"},"verdict":"allow","expires":"forever"}`, "", `expires: "forever" is not a positive duration`},
		{`{"name":"x","match":{"host":"a.example"},"verdict":"allow","expires":"-1h"}`, "", `expires: "-1h" is not a positive duration`},
		{`{"name":"x","match":{"host":"a.example"},"verdict":"allow","expires":3600}`, "", `expires: 3600 is not a positive duration`},
		{`{"name":"x","match":{"host":"a.example"},"verdict":"allow","scope":"org"}`, "", `scope: "org" is not "task" or "imp"`},
		{`{"name":"x","match":{"host":"a.example","task":"t-9"},"verdict":"allow"}`, "t-1", `may not set match.task`},
		{`{"name":"x","match":{"host":"a.example"},"verdict":"allow","scope":"task"}`, "", `"scope": "task" needs a gate filed for a task`},
		{`{"name":"x","match":{"host":"a.example","query":{"q":1}},"verdict":"allow"}`, "", `match.query: "q"`},
	} {
		_, err := Rule("yuko", tc.task, []byte(tc.rule))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Rule(%s) = %v, want an error naming %q", tc.rule, err, tc.want)
		}
	}
	// A task-scoped grant approved on a gate without a task changes nothing.
	y := grantYard(t)
	rule, err := Rule("yuko", "t-1", []byte(`{"name":"x","match":{"host":"a.example"},"verdict":"allow","scope":"task"}`))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Apply(y, Grant{Imp: "yuko"}, rule); !errors.Is(err, ErrNoTask) {
		t.Errorf("applied without a task: %v", err)
	}
	if b, _ := os.ReadFile(y.PolicyPath()); string(b) != policy {
		t.Errorf("policy changed by a refused grant")
	}
	if got := Describe([]byte(`{"name":"x","verdict":"allow"}`), "t-1", time.Time{}); got != "permanent" {
		t.Errorf("Describe of a permanent grant: %q", got)
	}
}
