package executor

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/impyard/impyard/lib/config"
	"github.com/impyard/impyard/lib/gate"
	"github.com/impyard/impyard/lib/yard/yardtest"
)

// Where says where each kind of executor would send a gate's payload,
// and refuses to guess for a push the executor would refuse.
func TestWhere(t *testing.T) {
	y := yardtest.New(t)
	os.WriteFile(y.Path("org.toml"), []byte(`
[executors.email-send]
kind = "http"
url = "https://api.resend.com/emails"
[executors.note]
kind = "message-user"
log = "mail.jsonl"
command = ["notify-send", "gate"]
[executors.message-user]
kind = "message-user"
log = "/var/log/owner.jsonl"
[executors.egress-grant]
kind = "egress-grant"
[executors.commit-and-push]
kind = "git-push"
then = "open-pr"
[executors.open-pr]
kind = "http"
url = "https://api.github.com/repos/o/r/pulls"
`), 0o640)
	os.MkdirAll(y.Path("imps", "yuko"), 0o750)
	os.WriteFile(y.Path("imps", "yuko", "imp.toml"), []byte("image = \"busybox\"\nremote = \"https://git.example/o/r.git\"\n"), 0o640)
	os.MkdirAll(y.Path("imps", "rex"), 0o750)
	os.WriteFile(y.Path("imps", "rex", "imp.toml"), []byte("image = \"busybox\"\n"), 0o640)
	org, err := config.LoadOrg(y)
	if err != nil {
		t.Fatal(err)
	}
	push := func(branch string) string {
		return `{"repo":"/srv/app","branch":"` + branch + `","base":"a","head":"b","diff":"none","stat":""}`
	}
	for _, tc := range []struct {
		imp, intent, payload string
		want, err            string
	}{
		{"yuko", "email-send", `{}`, "http POST https://api.resend.com/emails (through impgw, as org)", ""},
		{"yuko", "note", `{}`, "message-user appended to " + filepath.Join(y.Root, "mail.jsonl") + ", then notify-send gate", ""},
		{"yuko", "message-user", `{}`, "message-user appended to /var/log/owner.jsonl", ""},
		{"yuko", "egress-grant", `{}`, "egress-grant a rule added to " + y.PolicyPath(), ""},
		{"yuko", "commit-and-push", push("imp/yuko/t-1"), "git-push refs/heads/imp/yuko/t-1 to https://git.example/o/r.git from /srv/app, then a gate for open-pr", ""},
		{"rex", "commit-and-push", push("refs/heads/imp/rex/t-1"), "git-push refs/heads/imp/rex/t-1 to (no remote set in imp.toml: the push would fail) from /srv/app, then a gate for open-pr", ""},
		{"yuko", "commit-and-push", push("refs/heads/main"), "", `refusing to push "refs/heads/main"`},
		{"yuko", "commit-and-push", `[1]`, "", "a git-push payload"},
		{"ghost", "commit-and-push", push("imp/ghost/t-1"), "", "imp ghost has no configuration"},
		{"yuko", "launch", `{}`, "", `no executor is configured for intent "launch"`},
	} {
		d, err := Where(y, org, &gate.Gate{Imp: tc.imp, Intent: tc.intent, Payload: []byte(tc.payload)})
		switch {
		case tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)):
			t.Errorf("%s %s: %v, want an error with %q", tc.imp, tc.intent, err, tc.err)
		case tc.err == "" && (err != nil || d.String() != tc.want):
			t.Errorf("%s %s: %v %v, want %q", tc.imp, tc.intent, d, err, tc.want)
		}
	}
}
