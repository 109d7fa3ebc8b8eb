package trust

import (
	"testing"

	"github.com/impyard/impyard/lib/config"
)

// An auto entry's glob never matches across a line break: "Weekly
// digest*" vouches for that subject, not for a second line (a header, in
// a mail) appended after it, whatever wildcard spans it; a restriction's
// glob still does, so a line break never slips past a deny.
func TestGlobAcrossLines(t *testing.T) {
	org := &config.Org{
		Executors: map[string]*config.Executor{"email-send": {Kind: config.HTTP, URL: "https://api.resend.com/emails", Fields: email}},
		Trust: []config.Trust{
			{Intent: "email-send", Match: map[string]string{"body": "*evil*"}, Level: config.Deny, Where: "org#1"},
			{Intent: "email-send", Imp: "a", Match: map[string]string{"to": "*@ourco.com", "subject": "Weekly digest*"}, Level: config.Auto, Where: "org#2"},
			{Intent: "email-send", Imp: "b", Match: map[string]string{"to": "*@ourco.com", "subject": "Weekly**"}, Level: config.Auto, Where: "org#3"},
			{Intent: "email-send", Imp: "c", Match: map[string]string{"to": "*@ourco.com", "subject": "Weekly[!x]digest"}, Level: config.Auto, Where: "org#4"},
			{Intent: "email-send", Imp: "d", Match: map[string]string{"to": "*@ourco.com", "subject": "Week?y"}, Level: config.Auto, Where: "org#5"},
			{Intent: "email-send", Imp: "e", Match: map[string]string{"to": "*@ourco.com", "subject": "One\nTwo \\[x\\]"}, Level: config.Auto, Where: "org#6"},
		},
	}
	for _, tc := range []struct{ imp, subject, level string }{
		{"a", `Weekly digest 48`, config.Auto},
		{"a", `Weekly digest\r\nBcc: x@evil.com`, config.Gate},
		{"a", `Weekly digest\nBcc: x@evil.com`, config.Gate},
		{"a", `Weekly digest\r`, config.Gate},
		{"b", `Weekly digest`, config.Auto},
		{"b", `Weekly\nBcc: x@evil.com`, config.Gate},
		{"c", `Weekly digest`, config.Auto},
		{"c", `Weekly\ndigest`, config.Gate},
		{"d", `Week\ny`, config.Gate},
		{"e", `One\nTwo [x]`, config.Auto}, // its own line break, written in the pattern
	} {
		p := `{"to":["team@ourco.com"],"subject":"` + tc.subject + `"}`
		if d := Decide(org, nil, tc.imp, "email-send", []byte(p)); d.Level != tc.level {
			t.Errorf("%s %s: %+v, want %s", tc.imp, p, d, tc.level)
		}
	}
	p := `{"to":["team@ourco.com"],"subject":"Weekly digest","body":"hello\nevil"}`
	if d := Decide(org, nil, "a", "email-send", []byte(p)); d.Level != config.Deny {
		t.Errorf("%s: %+v, want the deny across lines", p, d)
	}
}
