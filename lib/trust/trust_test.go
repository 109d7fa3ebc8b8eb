package trust

import (
	"testing"

	"github.com/impyard/impyard/lib/config"
)

func TestDecide(t *testing.T) {
	org := &config.Org{Trust: []config.Trust{
		{Intent: "email-send", Imp: "yuko", Match: map[string]string{"to": "*@ourco.com"}, Level: config.Auto, Where: "org#1"},
		{Intent: "email-send", Match: map[string]string{"to": "*@spam.example"}, Level: config.Deny, Where: "org#2"},
		{Intent: "message-user", Level: config.Auto, Where: "org#3"},
		{Intent: "deploy", Match: map[string]string{"env.name": "staging", "dry": "true"}, Level: config.Auto, Where: "org#4"},
	}}
	imp := &config.Imp{Name: "rex", Trust: []config.Trust{{Intent: "message-user", Level: config.Gate, Where: "imp#1"}}}
	for _, tc := range []struct {
		imp     string
		impCfg  *config.Imp
		intent  string
		payload string
		level   string
		entry   string
	}{
		{"yuko", nil, "email-send", `{"to":["a@ourco.com","b@ourco.com"]}`, config.Auto, "org#1"},
		{"yuko", nil, "email-send", `{"to":["a@ourco.com","x@elsewhere.com"]}`, config.Gate, ""},
		{"yuko", nil, "email-send", `{"to":[]}`, config.Gate, ""},
		{"yuko", nil, "email-send", `{"cc":["a@ourco.com"]}`, config.Gate, ""},
		{"yuko", nil, "email-send", `{"to":"a@ourco.com"}`, config.Auto, "org#1"},
		{"rex", nil, "email-send", `{"to":["a@ourco.com"]}`, config.Gate, ""},
		{"rex", nil, "email-send", `{"to":["x@spam.example"]}`, config.Deny, "org#2"},
		{"rex", nil, "message-user", `{"text":"hi"}`, config.Auto, "org#3"},
		{"rex", imp, "message-user", `{"text":"hi"}`, config.Gate, "imp#1"},
		{"yuko", nil, "deploy", `{"env":{"name":"staging"},"dry":true}`, config.Auto, "org#4"},
		{"yuko", nil, "deploy", `{"env":{"name":"prod"},"dry":true}`, config.Gate, ""},
		{"yuko", nil, "deploy", `{"env":"staging","dry":true}`, config.Gate, ""},
		{"yuko", nil, "email-send", `not json`, config.Gate, ""},
		{"yuko", nil, "unknown", `{}`, config.Gate, ""},
	} {
		d := Decide(org, tc.impCfg, tc.imp, tc.intent, []byte(tc.payload))
		if d.Level != tc.level || d.Entry != tc.entry || d.Why == "" {
			t.Errorf("%s %s %s: got %+v, want %s by %q", tc.imp, tc.intent, tc.payload, d, tc.level, tc.entry)
		}
	}
}
