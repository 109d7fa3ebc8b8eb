package trust

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/impyard/impyard/lib/config"
	"github.com/impyard/impyard/lib/payload"
	"github.com/impyard/impyard/lib/rate"
)

var email = map[string]string{"to": payload.Addresses, "cc": payload.Addresses, "bcc": payload.Addresses,
	"reply_to": payload.Address, "subject": payload.Text, "body": payload.Text}

func testOrg() *config.Org {
	return &config.Org{
		Executors: map[string]*config.Executor{
			"email-send":   {Kind: config.HTTP, URL: "https://api.resend.com/emails", Fields: email},
			"message-user": {Kind: config.MessageUser},
			"deploy":       {Kind: config.HTTP, URL: "https://deploy.example/"},
		},
		Trust: []config.Trust{
			{Intent: "email-send", Imp: "yuko", Match: map[string]string{"to": "*@OurCo.com"}, Free: []string{"subject", "body"}, Level: config.Auto, Where: "org#1"},
			{Intent: "email-send", Match: map[string]string{"to": "*@spam.example"}, Level: config.Deny, Where: "org#2"},
			{Intent: "message-user", Free: []string{"text"}, Level: config.Auto, Where: "org#3"},
			{Intent: "deploy", Match: map[string]string{"env.name": "staging", "dry": "true"}, Level: config.Auto, Where: "org#4"},
			{Intent: "email-send", Imp: "ops", Match: map[string]string{"to": "*@partner.com"}, Level: config.Gate, Where: "org#5"},
			{Intent: "email-send", Imp: "ops", Match: map[string]string{"to": "*"}, Free: []string{"subject", "cc"}, Level: config.Auto, Where: "org#6"},
			{Intent: "email-send", Imp: "ops", Match: map[string]string{"reply_to": "*@OURCO.com", "to": "*"}, Free: []string{"subject"}, Level: config.Auto, Where: "org#7"},
			{Intent: "deploy", Match: map[string]string{"tags": "prod"}, Level: config.Deny, Where: "org#9"},
			{Intent: "egress-grant", Match: map[string]string{"name": "grant-yuko-docs", "verdict": "allow"}, Free: []string{"match"}, Level: config.Auto, Where: "org#8"},
		},
	}
}

func TestDecide(t *testing.T) {
	org := testOrg()
	imp := &config.Imp{Name: "rex", Trust: []config.Trust{{Intent: "message-user", Level: config.Gate, Where: "imp#1"}}}
	for _, tc := range []struct {
		imp     string
		impCfg  *config.Imp
		intent  string
		payload string
		level   string
		entry   string
		why     string
	}{
		{"yuko", nil, "email-send", `{"to":["a@ourco.com","b@ourco.com"],"subject":"s","body":"b"}`, config.Auto, "org#1", ""},
		{"yuko", nil, "email-send", `{"to":["a@ourco.com"]}`, config.Auto, "org#1", ""},
		{"yuko", nil, "email-send", `{"to":["Team@OURCO.COM"],"subject":"s"}`, config.Auto, "org#1", ""},
		// The two attacks of issue 9: a comma list in one string, and a
		// field the entry does not name.
		{"yuko", nil, "email-send", `{"to":"attacker@evil.com, team@ourco.com","subject":"s","body":"b"}`, config.Gate, "", "no trust entry matches"},
		{"yuko", nil, "email-send", `{"to":["attacker@evil.com, team@ourco.com"],"subject":"s"}`, config.Gate, "", ""},
		{"yuko", nil, "email-send", `{"to":["team@ourco.com"],"bcc":["attacker@evil.com"],"subject":"s","body":"b"}`, config.Gate, "", `field "bcc" is neither matched nor free`},
		{"yuko", nil, "email-send", `{"to":["team@ourco.com"],"cc":["a@ourco.com"]}`, config.Gate, "", `field "cc"`},
		{"yuko", nil, "email-send", `{"to":["\"attacker@evil.com\"@ourco.com"]}`, config.Gate, "", ""},
		{"yuko", nil, "email-send", `{"to":["attacker@evil.com@ourco.com"]}`, config.Gate, "", ""},
		{"yuko", nil, "email-send", `{"to":["Team <team@ourco.com>"]}`, config.Gate, "", ""},
		{"yuko", nil, "email-send", `{"to":["team@ourco.com."]}`, config.Gate, "", ""},
		{"yuko", nil, "email-send", `{"to":["a@ourco.com","x@elsewhere.com"]}`, config.Gate, "", ""},
		{"yuko", nil, "email-send", `{"to":[]}`, config.Gate, "", ""},
		{"yuko", nil, "email-send", `{"cc":["a@ourco.com"]}`, config.Gate, "", ""},
		{"yuko", nil, "email-send", `{"to":"a@ourco.com"}`, config.Gate, "", ""},
		{"yuko", nil, "email-send", `["a@ourco.com"]`, config.Gate, "", ""},
		{"rex", nil, "email-send", `{"to":["a@ourco.com"]}`, config.Gate, "", ""},
		{"rex", nil, "email-send", `{"to":["x@spam.example"]}`, config.Deny, "org#2", ""},
		{"rex", nil, "email-send", `{"to":["X@SPAM.Example"]}`, config.Deny, "org#2", ""},
		// A restriction holds when any recipient matches, whatever else the
		// payload holds.
		{"yuko", nil, "email-send", `{"to":["a@ourco.com","x@spam.example"]}`, config.Deny, "org#2", ""},
		{"rex", nil, "email-send", `{"to":["a@ourco.com","x@spam.example"],"bcc":["b@c.d"],"x":1}`, config.Deny, "org#2", ""},
		{"ops", nil, "email-send", `{"to":["a@anywhere.com"],"subject":"s"}`, config.Auto, "org#6", ""},
		{"ops", nil, "email-send", `{"to":["a@anywhere.com","b@partner.com"],"subject":"s"}`, config.Gate, "org#5", ""},
		{"ops", nil, "email-send", `{"to":["a@anywhere.com"],"reply_to":"r@ourco.com","subject":"s"}`, config.Auto, "org#7", ""},
		{"ops", nil, "email-send", `{"to":["a@anywhere.com"],"reply_to":"attacker@evil.com, r@ourco.com"}`, config.Gate, "", ""},
		{"ops", nil, "email-send", `{"to":["a@anywhere.com"],"reply_to":"r@ourco.com","body":"b"}`, config.Gate, "", `field "body"`},
		{"rex", nil, "message-user", `{"text":"hi"}`, config.Auto, "org#3", ""},
		{"rex", nil, "message-user", `{}`, config.Auto, "org#3", ""},
		{"rex", nil, "message-user", `{"text":"hi","also":"x"}`, config.Gate, "", `field "also"`},
		{"rex", imp, "message-user", `{"text":"hi"}`, config.Gate, "imp#1", ""},
		// An executor without fields never gets auto.
		{"yuko", nil, "deploy", `{"env":{"name":"staging"},"dry":true}`, config.Gate, "", "executor deploy declares no fields; auto trust needs typed payloads"},
		{"yuko", nil, "deploy", `{"tags":["x","prod"]}`, config.Deny, "org#9", ""},
		{"yuko", nil, "deploy", `{"tags":["x",["prod"]]}`, config.Gate, "", ""},
		{"yuko", nil, "egress-grant", `{"match":{"host":"docs.python.org","subject":"yuko"},"name":"grant-yuko-docs","verdict":"allow"}`, config.Auto, "org#8", ""},
		{"yuko", nil, "egress-grant", `{"comment":"x","match":{"host":"docs.python.org","subject":"yuko"},"name":"grant-yuko-docs","verdict":"allow"}`, config.Gate, "", `field "comment"`},
		{"yuko", nil, "email-send", `not json`, config.Gate, "", ""},
		{"yuko", nil, "unknown", `{}`, config.Gate, "", ""},
	} {
		d := Decide(org, tc.impCfg, tc.imp, tc.intent, []byte(tc.payload))
		if d.Level != tc.level || d.Entry != tc.entry || d.Why == "" || !strings.Contains(d.Why, tc.why) {
			t.Errorf("%s %s %s: got %+v, want %s by %q (%s)", tc.imp, tc.intent, tc.payload, d, tc.level, tc.entry, tc.why)
		}
	}
}

// An imp.toml entry naming a field its intent does not declare is a
// configuration error, and a configuration error denies.
func TestImpEntryNamingUndeclaredField(t *testing.T) {
	imp := &config.Imp{Name: "yuko", Trust: []config.Trust{{Intent: "email-send", Match: map[string]string{"to": "*@ourco.com"},
		Free: []string{"subject", "body", "from"}, Level: config.Auto, Where: "imps/yuko/imp.toml [[trust]] #1"}}}
	d := Decide(testOrg(), imp, "yuko", "email-send", []byte(`{"to":["a@ourco.com"]}`))
	if d.Level != config.Deny || !strings.Contains(d.Why, `free field "from" names no declared field of intent email-send`) {
		t.Errorf("got %+v", d)
	}
}

func TestAdmit(t *testing.T) {
	org := testOrg()
	for _, tc := range []struct {
		intent, payload string
		want            error
	}{
		{"email-send", `{"to":["team@ourco.com"],"subject":"s","body":"b"}`, nil},
		{"email-send", `{"to":"attacker@evil.com, team@ourco.com","subject":"s"}`, payload.ErrType},
		{"email-send", `{"to":["team@ourco.com"],"reply_to":"attacker@evil.com, team@ourco.com"}`, payload.ErrType},
		{"email-send", `{"to":["team@ourco.com"],"from":"ceo@ourco.com"}`, payload.ErrUndeclared},
		{"email-send", `"to"`, payload.ErrNotObject},
		{"message-user", `{"text":"hi","level":"loud"}`, payload.ErrUndeclared},
		{"egress-grant", `{"name":"x","match":{"host":"a.example"},"verdict":"allow","inject":{}}`, payload.ErrUndeclared},
		{"deploy", `["anything", "goes"]`, nil},
	} {
		err := Admit(org, tc.intent, []byte(tc.payload))
		if !errors.Is(err, tc.want) || (tc.want == nil) != (err == nil) {
			t.Errorf("Admit(%s, %s) = %v, want %v", tc.intent, tc.payload, err, tc.want)
		}
	}
}

// TestEarnedLast: an earned entry in imp.toml is consulted after every
// hand-written entry, org.toml's included, so it never widens what the
// owner's own deny or gate entry holds back.
func TestEarnedLast(t *testing.T) {
	org := testOrg()
	earned := config.Trust{Intent: "email-send", Match: map[string]string{"to": "{a@spam.example,b@ourco.com}"}, Free: []string{"subject"},
		Level: config.Auto, Earned: true, Gates: []string{"g-0000000000000001"}, Where: "imp#1"}
	imp := &config.Imp{Name: "rex", Trust: []config.Trust{earned}}
	if d := Decide(org, imp, "rex", "email-send", []byte(`{"to":["a@spam.example"],"subject":"s"}`)); d.Level != config.Deny || d.Entry != "org#2" {
		t.Errorf("hand-written deny after an earned auto: %+v", d)
	}
	if d := Decide(org, imp, "rex", "email-send", []byte(`{"to":["b@ourco.com"],"subject":"s"}`)); d.Level != config.Auto || d.Entry != "imp#1" {
		t.Errorf("earned auto: %+v", d)
	}
	if d := Decide(org, imp, "rex", "email-send", []byte(`{"to":["c@ourco.com"],"subject":"s"}`)); d.Level != config.Gate {
		t.Errorf("a recipient the earned entry does not name: %+v", d)
	}
	if !Covers(org, earned, "email-send", []byte(`{"to":["a@spam.example"],"subject":"s"}`)) ||
		Covers(org, earned, "email-send", []byte(`{"to":["a@spam.example"],"subject":"s","body":"b"}`)) ||
		Covers(org, earned, "message-user", []byte(`{"text":"x"}`)) || Covers(org, earned, "email-send", []byte(`{`)) {
		t.Errorf("Covers")
	}
}

// TestDecisionCarriesRule: a decision by an entry carries the entry
// itself as canonical JSON, which a gate records and an auto-approval
// signs; a decision by no entry carries none.
func TestDecisionCarriesRule(t *testing.T) {
	org := testOrg()
	d := Decide(org, nil, "yuko", "email-send", []byte(`{"to":["a@ourco.com"],"subject":"s"}`))
	if want := `{"intent":"email-send","imp":"yuko","match":{"to":"*@OurCo.com"},"free":["subject","body"],"level":"auto"}`; d.Level != config.Auto || string(d.Rule) != want {
		t.Errorf("auto decision: %s %s, want the rule %s", d.Level, d.Rule, want)
	}
	if d := Decide(org, nil, "yuko", "email-send", []byte(`{"to":["x@spam.example"]}`)); d.Level != config.Deny || string(d.Rule) != string(Rule(org.Trust[1])) {
		t.Errorf("deny decision: %s %s", d.Level, d.Rule)
	}
	if d := Decide(org, nil, "yuko", "email-send", []byte(`{"to":["x@elsewhere.com"]}`)); d.Level != config.Gate || d.Rule != nil {
		t.Errorf("no entry: %s %s", d.Level, d.Rule)
	}
}

// An auto entry's rate is in its decision, for lib/gate to count, and in
// its rule, so the approval's signature covers it.
func TestDecisionCarriesRate(t *testing.T) {
	org := testOrg()
	org.Trust[0].Rate = rate.Limit{N: 10, Period: time.Hour}
	d := Decide(org, nil, "yuko", "email-send", []byte(`{"to":["a@ourco.com"],"subject":"s"}`))
	if want := `{"intent":"email-send","imp":"yuko","match":{"to":"*@OurCo.com"},"free":["subject","body"],"level":"auto","rate":"10/1h"}`; string(d.Rule) != want || d.Rate != org.Trust[0].Rate {
		t.Errorf("decision rule %s rate %v, want %s and 10/1h", d.Rule, d.Rate, want)
	}
}

// A gated MCP call is a typed payload (server, tool, arguments): an
// auto entry matches its arguments by path, and applies only when it
// accounts for every argument, at every depth.
func TestMCPArguments(t *testing.T) {
	org, err := config.ParseOrg("org.toml", []byte(`
[mcp.gh]
command = ["gh-mcp"]
isolation = "host"
imps = ["yuko"]
[[trust]]
intent = "mcp.gh"
match = { tool = "create_issue", "arguments.repo" = "ourco/*", "arguments.labels" = "bug" }
free = ["server"]
level = "auto"
[[trust]]
intent = "mcp.gh"
match = { tool = "delete_*" }
level = "deny"
`))
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		payload string
		level   string
		why     string
	}{
		{`{"server":"gh","tool":"create_issue","arguments":{"repo":"ourco/site","labels":["bug"]}}`, config.Auto, ""},
		{`{"server":"gh","tool":"create_issue","arguments":{"repo":"evil/site","labels":["bug"]}}`, config.Gate, ""},
		{`{"server":"gh","tool":"create_issue","arguments":{"repo":"ourco/site","labels":["bug","wontfix"]}}`, config.Gate, ""},
		// An argument the entry does not name keeps the call gated.
		{`{"server":"gh","tool":"create_issue","arguments":{"repo":"ourco/site","labels":["bug"],"assignee":"x"}}`, config.Gate, `field "arguments.assignee"`},
		{`{"server":"gh","tool":"create_issue","arguments":{"repo":"ourco/site","labels":["bug"],"body":{"text":"x"}}}`, config.Gate, `field "arguments.body"`},
		{`{"server":"gh","tool":"create_issue"}`, config.Gate, ""},
		{`{"server":"gh","tool":"delete_repo","arguments":{"repo":"ourco/site"}}`, config.Deny, ""},
	} {
		d := Decide(org, nil, "yuko", "mcp.gh", []byte(tc.payload))
		if d.Level != tc.level || !strings.Contains(d.Why, tc.why) {
			t.Errorf("%s: %s (%s), want %s (%s)", tc.payload, d.Level, d.Why, tc.level, tc.why)
		}
	}
	// A dotted key into a field that is no object is refused as
	// org.toml loads.
	_, err = config.ParseOrg("org.toml", []byte(`
[mcp.gh]
command = ["gh-mcp"]
isolation = "host"
[[trust]]
intent = "mcp.gh"
match = { "tool.name" = "x" }
level = "auto"
`))
	if err == nil || !strings.Contains(err.Error(), "a dotted key names a path into a field of type object") {
		t.Fatalf("dotted key into a line field: %v", err)
	}
}
