package config

import (
	"errors"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/impyard/impyard/lib/yard"
	"github.com/impyard/impyard/lib/yard/yardtest"
)

const full = `
[gateway]
listen = "127.0.0.1:7301"
wait = "3s"

[imps.yuko]
description = "writes the weekly digest"

[[trust]]
intent = "email-send"
imp = "yuko"
match = { to = "*@ourco.com" }
level = "auto"

[[trust]]
intent = "email-send"
level = "gate"

[executors.email-send]
kind = "http"
url = "https://api.resend.com/emails"
idempotent = true
cost = 0.001

[executors.message-user]
kind = "message-user"

[budget.yuko]
daily = 2.5
tokens_daily = 100000

[prices."gpt-5"]
input = 1.25
output = 10.0
`

func yardWith(t *testing.T, org string) *yard.Yard {
	t.Helper()
	y := yardtest.New(t)
	if org != "" {
		if err := os.WriteFile(y.Path("org.toml"), []byte(org), 0o640); err != nil {
			t.Fatal(err)
		}
	}
	return y
}

func TestLoadOrg(t *testing.T) {
	o, err := LoadOrg(yardWith(t, full))
	if err != nil {
		t.Fatal(err)
	}
	if o.Gateway.Listen != "127.0.0.1:7301" || o.Gateway.Wait.Duration != 3*time.Second {
		t.Errorf("gateway %+v", o.Gateway)
	}
	if len(o.Trust) != 2 || o.Trust[0].Match["to"] != "*@ourco.com" || !strings.Contains(o.Trust[0].Where, "org.toml [[trust]] #1") {
		t.Errorf("trust %+v", o.Trust)
	}
	e := o.Executors["email-send"]
	if e.Kind != HTTP || e.Method != "POST" || !e.Idempotent || e.Timeout.Duration != 30*time.Second {
		t.Errorf("executor %+v", e)
	}
	if o.Budget["yuko"].Daily != 2.5 || o.Containerd.Namespace != "impyard" {
		t.Errorf("defaults or budget wrong: %+v", o)
	}
	if o.Budget["yuko"].TokensDaily != 100000 {
		t.Errorf("tokens_daily %+v", o.Budget["yuko"])
	}
	if got := o.Cost("gpt-5", 1000, 2000); got != 0.02125 {
		t.Errorf("cost of 1000 in, 2000 out of gpt-5: %v, want 0.02125", got)
	}
	if got := o.Cost("unpriced", 1000, 2000); got != 0 {
		t.Errorf("cost of an unpriced model: %v, want 0", got)
	}
	if err := o.CheckIntents([]string{"email-send", "message-user"}); err != nil {
		t.Error(err)
	}
	if err := o.CheckIntents(nil); err == nil || !strings.Contains(err.Error(), `[[trust]] #1: intent "email-send" names no rule`) {
		t.Errorf("unknown intent: %v", err)
	}
	if !o.Intent("message-user", nil) || o.Intent("email-send", nil) || !o.Intent("egress-grant", nil, "egress-grant") {
		t.Errorf("Intent: a trusted-side executor declares its intent; an http one needs a rule")
	}
}

// An auto entry's rate reads as "N/PERIOD"; an executor's dedupe is an
// hour unless set, and "0" turns it off.
func TestRateAndDedupe(t *testing.T) {
	o, err := LoadOrg(yardWith(t, "[[trust]]\nintent = \"email-send\"\nlevel = \"auto\"\nrate = \"10/1h\"\n"+emailExec+
		"[executors.off]\nkind = \"message-user\"\ndedupe = \"0\"\n[executors.day]\nkind = \"message-user\"\ndedupe = \"24h\"\n"))
	if err != nil {
		t.Fatal(err)
	}
	if r := o.Trust[0].Rate; r.N != 10 || r.Period != time.Hour {
		t.Errorf("rate %+v, want 10 an hour", r)
	}
	for intent, want := range map[string]time.Duration{"email-send": time.Hour, "off": 0, "day": 24 * time.Hour} {
		if got := o.Executors[intent].DedupeWindow(); got != want {
			t.Errorf("%s: dedupe %v, want %v", intent, got, want)
		}
	}
}

func TestMissingOrgIsDefaults(t *testing.T) {
	o, err := LoadOrg(yardWith(t, ""))
	if err != nil || o.Gateway.Listen != DefaultListen {
		t.Fatalf("%+v %v", o, err)
	}
}

func TestOrgErrors(t *testing.T) {
	for _, tc := range []struct{ toml, want string }{
		{"[gateway]\nlisten = \"x\"\nlistne = \"y\"\n", `org.toml:3: unknown key "gateway.listne"`},
		{"[[trust]]\nintent = \"email-send\"\nlevel = \"sometimes\"\n", `org.toml:3: key "level": [[trust]] #1: level "sometimes" is not gate, auto or deny`},
		{"[[trust]]\nlevel = \"auto\"\n", `invalid or missing intent`},
		{"[executors.x]\nkind = \"carrier-pigeon\"\n", `org.toml:2: key "kind": executor x: unknown kind "carrier-pigeon"`},
		{"[executors.x]\nkind = \"http\"\n", `an http executor needs url`},
		{"[executors.x]\nkind = \"git-push\"\nthen = \"open-pr\"\n", `org.toml:3: key "then": executor x: then = "open-pr" names no other configured executor`},
		{"[executors.x]\nkind = \"message-user\"\nthen = \"x\"\n", `then is only for git-push executors`},
		{"[executors.x]\nkind = \"message-user\"\nstdin = \"yaml\"\n", `org.toml:3: key "stdin": executor x: stdin = "yaml", want "text" or "json"`},
		{"[executors.x]\nkind = \"http\"\nurl = \"https://a.example\"\nstdin = \"json\"\n", `stdin is only for message-user executors`},
		{"[executors.x]\nkind = \"http\"\nurl = \"ftp://x\"\n", `url must be http:// or https://`},
		{"[gateway]\nwait = \"soon\"\n", `org.toml:2`},
		{"[gateway\nlisten = 1\n", `to end table name`},
		{"[budget.Yuko]\ndaily = 1\n", `invalid imp name`},
		{"[budget.yuko]\ndaily = -1\n", `must not be negative`},
		{"[supervisor]\nconcurrency = 2\nruntime = \"kata\"\n", `org.toml:3: key "runtime": unknown runtime "kata" (want runc, crun, runsc)`},
		{"[budget.yuko]\ntokens_daily = -1\n", `org.toml:2: key "tokens_daily": budget of yuko must not be negative`},
		{"[budget.yuko]\ntokens_daily = 10\nwarn = 1.5\n", `org.toml:3: key "warn": budget of yuko: warn is a share of its caps, from 0 to 1`},
		{"[executors.x]\nkind = \"message-user\"\nexpires = \"-2h\"\n", `org.toml:3: key "executors.x.expires": duration must not be negative`},
		{"[prices.\"gpt-5\"]\ninput = -1.25\n", `price of gpt-5 must not be negative`},
		{"[prices.\"gpt-5\"]\ninptu = 1.25\n", `unknown key "prices.gpt-5.inptu"`},
		{"[[trust]]\nintent = \"a\"\nlevel = \"auto\"\nmatch = { to = \"[\" }\n", `bad glob`},
		{emailExec + "fields = { to = \"addresses\", subject = \"txt\" }\n", `org.toml:4: key "fields.subject": executor email-send: field subject has unknown type "txt" (want address, addresses, url, text, line, number, bool, object)`},
		{emailExec + "fields = { \"a.b\" = \"text\" }\n", `org.toml:4: key "fields": executor email-send: "a.b" is not a field name`},
		{"[executors.commit-and-push]\nkind = \"git-push\"\nfields = { x = \"text\" }\n", `org.toml:3: key "fields": executor commit-and-push: the payload of a git-push executor is fixed`},
		{"[executors.memory-promote]\nkind = \"memory\"\nfields = { x = \"text\" }\n", `org.toml:3: key "fields": executor memory-promote: the payload of a memory executor is fixed`},
		{"[[trust]]\nintent = \"memory-promote\"\nlevel = \"auto\"\nfree = [\"txt\"]\n[executors.memory-promote]\nkind = \"memory\"\n", `free field "txt" names no declared field of intent memory-promote (declared: reason, replaces, text)`},
		{"[[trust]]\nintent = \"email-send\"\nlevel = \"gate\"\nfree = [\"body\"]\n", `org.toml:4: key "free": [[trust]] #1: free is only for auto entries`},
		{"[[trust]]\nintent = \"email-send\"\nlevel = \"auto\"\nfree = [\"a b\"]\n", `[[trust]] #1: "a b" is not a field name`},
		{"[[trust]]\nintent = \"email-send\"\nlevel = \"auto\"\nmatch = { from = \"*\" }\n" + emailExec + emailFields,
			`org.toml:4: key "match.from": [[trust]] #1: match key "from" names no declared field of intent email-send (declared: bcc, body, cc, meta, subject, to)`},
		{"[[trust]]\nintent = \"email-send\"\nlevel = \"auto\"\nmatch = { meta = \"*\" }\n" + emailExec + emailFields,
			`org.toml:4: key "match.meta": [[trust]] #1: match key "meta": a glob cannot match a field of type object`},
		{"[[trust]]\nintent = \"email-send\"\nlevel = \"auto\"\nmatch = { to = \"*@ourco.com\" }\nfree = [\"subject\", \"bodyy\"]\n" + emailExec + emailFields,
			`org.toml:5: key "free.bodyy": [[trust]] #1: free field "bodyy" names no declared field`},
		{"[[trust]]\nintent = \"egress-grant\"\nlevel = \"auto\"\nmatch = { host = \"*\" }\n", `match key "host" names no declared field of intent egress-grant (declared: comment, expires, match, name, scope, verdict)`},
		{"[[trust]]\nintent = \"message-user\"\nlevel = \"auto\"\nfree = [\"txt\"]\n[executors.message-user]\nkind = \"message-user\"\n", `free field "txt" names no declared field of intent message-user (declared: text)`},
		{"[[trust]]\nintent = \"email-send\"\nlevel = \"auto\"\nrate = \"ten an hour\"\n", `org.toml:4: key "trust.rate": rate "ten an hour"`},
		{"[[trust]]\nintent = \"email-send\"\nlevel = \"auto\"\nrate = \"0/1h\"\n", `count must be 1 to`},
		{"[[trust]]\nintent = \"email-send\"\nlevel = \"gate\"\nrate = \"10/1h\"\n", `org.toml:4: key "rate": [[trust]] #1: rate bounds auto-approvals; a gate entry approves nothing`},
		{emailExec + "dedupe = \"an hour\"\n", `org.toml:4: key "executors.email-send.dedupe"`},
	} {
		_, err := LoadOrg(yardWith(t, tc.toml))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q: got %v, want %q", tc.toml, err, tc.want)
		}
	}
}

const (
	emailExec   = "[executors.email-send]\nkind = \"http\"\nurl = \"https://api.resend.com/emails\"\n"
	emailFields = "fields = { to = \"addresses\", cc = \"addresses\", bcc = \"addresses\", subject = \"text\", body = \"text\", meta = \"object\" }\n"
)

func TestFields(t *testing.T) {
	o, err := LoadOrg(yardWith(t, `
[[trust]]
intent = "email-send"
match = { to = "*@ourco.com" }
free = ["subject", "body"]
level = "auto"
`+emailExec+emailFields+`
[executors.notify]
kind = "message-user"
[executors.note]
kind = "message-user"
fields = { text = "text", link = "url" }
[executors.commit-and-push]
kind = "git-push"
then = "open-pr"
[executors.open-pr]
kind = "http"
url = "https://api.github.com/repos/o/r/pulls"
[executors.webhook]
kind = "http"
url = "https://hooks.example/x"
[executors.memory-promote]
kind = "memory"
`))
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		intent, want string
		typed        bool
	}{
		{"email-send", "bcc:addresses body:text cc:addresses meta:object subject:text to:addresses", true},
		{"notify", "text:text", true},
		{"note", "link:url text:text", true},
		{"commit-and-push", "base:text branch:text diff:text head:text repo:text stat:text", true},
		{"open-pr", "base:text body:text head:text title:text", true},
		{"egress-grant", "comment:text expires:text match:object name:text scope:text verdict:text", true},
		{"memory-promote", "reason:text replaces:text text:text", true},
		{"webhook", "", false},
		{"unknown", "", false},
	} {
		f, typed := o.Fields(tc.intent)
		var got []string
		for _, k := range slices.Sorted(maps.Keys(f)) {
			got = append(got, k+":"+f[k])
		}
		if typed != tc.typed || strings.Join(got, " ") != tc.want {
			t.Errorf("Fields(%s) = %v %v, want %v %q", tc.intent, got, typed, tc.typed, tc.want)
		}
	}
	if o.Trust[0].Free[1] != "body" {
		t.Errorf("free: %v", o.Trust[0].Free)
	}
	bad := Trust{Intent: "email-send", Match: map[string]string{"reply-to": "*"}, Level: Auto, Where: "imp.toml [[trust]] #1"}
	if err := o.CheckTrust(bad); err == nil || !strings.Contains(err.Error(), `imp.toml [[trust]] #1: key "match": match key "reply-to" names no declared field`) {
		t.Errorf("CheckTrust: %v", err)
	}
	if err := o.CheckTrust(Trust{Intent: "webhook", Match: map[string]string{"any.path": "*"}, Level: Deny}); err != nil {
		t.Errorf("an untyped intent's entry: %v", err)
	}
}

func TestLoadImp(t *testing.T) {
	y := yardWith(t, "")
	dir := y.Path("imps", "yuko")
	os.MkdirAll(dir, 0o750)
	os.WriteFile(filepath.Join(dir, "imp.toml"), []byte(`
rootfs = "rootfs"
command = ["/usr/local/bin/imp"]
ceiling = "10m"
[[trust]]
intent = "message-user"
level = "auto"
`), 0o640)
	im, err := LoadImp(y, "yuko")
	if err != nil {
		t.Fatal(err)
	}
	if im.Rootfs != filepath.Join(dir, "rootfs") || im.Ceiling.Duration != 10*time.Minute || im.Trust[0].Level != Auto {
		t.Errorf("%+v", im)
	}
	if _, err := LoadImp(y, "rex"); !errors.Is(err, ErrNoImpConfig) || !strings.Contains(err.Error(), "imp rex has no configuration") {
		t.Errorf("missing imp: %v", err)
	}
	os.WriteFile(filepath.Join(dir, "imp.toml"), []byte("[[trust]]\nintent = \"x\"\nimp = \"rex\"\nlevel = \"auto\"\n"), 0o640)
	if _, err := LoadImp(y, "yuko"); err == nil || !strings.Contains(err.Error(), `cannot name imp "rex"`) {
		t.Errorf("foreign trust entry: %v", err)
	}
	os.WriteFile(filepath.Join(dir, "imp.toml"), []byte("rootfs = \"a\"\nimage = \"b\"\n"), 0o640)
	if _, err := LoadImp(y, "yuko"); err == nil || !strings.Contains(err.Error(), "exactly one of") {
		t.Errorf("two box sources: %v", err)
	}
	os.WriteFile(filepath.Join(dir, "imp.toml"), []byte("rootfs = \"a\"\nruntime = \"gvisor\"\n"), 0o640)
	if _, err := LoadImp(y, "yuko"); err == nil || !strings.Contains(err.Error(), `imp.toml:2: key "runtime": unknown runtime "gvisor" (want runc, crun, runsc)`) {
		t.Errorf("unknown runtime: %v", err)
	}
	if _, err := LoadImp(y, "../x"); err == nil {
		t.Errorf("traversal accepted")
	}
}

// An imp's runtime is its own, else org.toml's [supervisor] runtime, else
// runc.
func TestRuntimeOf(t *testing.T) {
	y := yardWith(t, "[supervisor]\nruntime = \"runsc\"\n")
	org, err := LoadOrg(y)
	if err != nil {
		t.Fatal(err)
	}
	if got := org.RuntimeOf(&Imp{}); got != "runsc" {
		t.Errorf("org default: %q", got)
	}
	if got := org.RuntimeOf(&Imp{Runtime: "crun"}); got != "crun" {
		t.Errorf("imp's own: %q", got)
	}
	if got := Default().RuntimeOf(&Imp{}); got != "runc" {
		t.Errorf("no default anywhere: %q", got)
	}
}

func TestEarn(t *testing.T) {
	o, err := LoadOrg(yardWith(t, "[[earn]]\nintent = \"email-send\"\nimp = \"yuko\"\nafter = 5\n"+emailExec+emailFields))
	if err != nil {
		t.Fatal(err)
	}
	if e := o.EarnFor("yuko", "email-send"); e == nil || e.After != 5 {
		t.Errorf("EarnFor: %+v", e)
	}
	if o.EarnFor("rex", "email-send") != nil || o.EarnFor("yuko", "message-user") != nil {
		t.Errorf("EarnFor found an entry not configured")
	}
	if err := o.CheckIntents(nil); err == nil || !strings.Contains(err.Error(), `[[earn]] #1: intent "email-send" names no rule`) {
		t.Errorf("CheckIntents: %v", err)
	}
	if err := o.CheckIntents([]string{"email-send"}); err != nil {
		t.Errorf("CheckIntents: %v", err)
	}
	for _, tc := range []struct{ toml, want string }{
		{"[[earn]]\nintent = \"email-send\"\nimp = \"yuko\"\n" + emailExec + emailFields, `key "after": [[earn]] #1: after must be at least 1, not 0`},
		{"[[earn]]\nintent = \"email-send\"\nafter = 2\n" + emailExec + emailFields, `[[earn]] #1: earned trust is per imp`},
		{"[[earn]]\nintent = \"trust-promote\"\nimp = \"yuko\"\nafter = 2\n", `[[earn]] #1: invalid or missing intent "trust-promote"`},
		{"[[earn]]\nintent = \"email-send\"\nimp = \"yuko\"\nafter = 2\n[[earn]]\nintent = \"email-send\"\nimp = \"yuko\"\nafter = 3\n" + emailExec + emailFields, `[[earn]] #2: a second entry for imp yuko, intent email-send`},
		{"[[earn]]\nintent = \"email-send\"\nimp = \"yuko\"\nafter = 2\n" + emailExec, `[[earn]] #1: intent email-send declares no fields`},
		{"[[earn]]\nintent = \"email-send\"\nimp = \"yuko\"\nafter = 2\nlevel = \"auto\"\n", `unknown key "earn.level"`},
		{"[executors.trust-promote]\nkind = \"message-user\"\n", `trust-promote is built in`},
		{"[[earn]]\nintent = \"egress-grant\"\nimp = \"yuko\"\nafter = 2\n", `[[earn]] #1: trust for egress-grant (egress grants, memory) is never earned`},
		{"[[earn]]\nintent = \"memory-promote\"\nimp = \"yuko\"\nafter = 2\n[executors.memory-promote]\nkind = \"memory\"\n", `trust for memory-promote (egress grants, memory) is never earned`},
		{"[[trust]]\nintent = \"email-send\"\nlevel = \"gate\"\nearned = true\n", `key "earned": [[trust]] #1: an earned entry is level auto, not "gate"`},
		{"[[trust]]\nintent = \"email-send\"\nlevel = \"auto\"\ngates = [\"g-0000000000000001\"]\n", `key "gates": [[trust]] #1: gates is only for earned entries`},
		{"[[trust]]\nintent = \"email-send\"\nlevel = \"auto\"\nearned = true\ngates = [\"../x\"]\n", `key "gates": [[trust]] #1:`},
	} {
		_, err := LoadOrg(yardWith(t, tc.toml))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q: got %v, want %q", tc.toml, err, tc.want)
		}
	}
}
