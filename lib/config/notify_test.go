package config

import (
	"slices"
	"strings"
	"testing"
	"time"
)

func TestNotify(t *testing.T) {
	o, err := LoadOrg(yardWith(t, "[notify]\ncommand = [\"notify-send\", \"impyard\"]\n"))
	if err != nil {
		t.Fatal(err)
	}
	n := o.Notify
	if !slices.Equal(n.On, []string{"gate-filed"}) || n.Format != "json" || n.Backoff.Duration != 5*time.Second || n.Timeout.Duration != 10*time.Second {
		t.Fatalf("defaults: %+v", n)
	}
	if !n.Wants("gate-filed") || n.Wants("task-failed") {
		t.Fatalf("Wants: %+v", n)
	}
	o, err = LoadOrg(yardWith(t, "[notify]\non = [\"task-failed\", \"task-needs-review\"]\nwebhook = \"https://ntfy.example/yard\"\nformat = \"ntfy\"\nbackoff = \"1s\"\n"))
	if err != nil {
		t.Fatal(err)
	}
	if n := o.Notify; !n.Wants("task-needs-review") || n.Wants("gate-filed") || n.Format != "ntfy" || n.Backoff.Duration != time.Second {
		t.Fatalf("%+v", n)
	}
	// Without a receiver the owner hears of nothing; with on = [] neither.
	for _, toml := range []string{"", "[notify]\non = [\"gate-filed\"]\n", "[notify]\non = []\ncommand = [\"true\"]\n"} {
		o, err := LoadOrg(yardWith(t, toml))
		if err != nil || o.Notify.Wants("gate-filed") {
			t.Errorf("%q: wants gate-filed (%v)", toml, err)
		}
	}
}

func TestNotifyErrors(t *testing.T) {
	for _, tc := range []struct{ toml, want string }{
		{"[notify]\non = [\"gate-approved\"]\n", `org.toml:2: key "on": [notify]: unknown event "gate-approved" (want gate-filed, task-failed, task-needs-review, trust-earned-removed)`},
		{"[notify]\ncommand = []\n", `org.toml:2: key "command": [notify]: command names no program`},
		{"[notify]\ncommand = [\"\"]\n", `command names no program`},
		{"[notify]\nwebhook = \"http://ntfy.example/x\"\n", `org.toml:2: key "webhook": [notify]: webhook must be https://`},
		{"[notify]\nwebhook = \"https://hooks.example:x/services/SECRETPATH\"\n", `org.toml:2: key "webhook": [notify]: webhook is not a URL with a host`},
		{"[notify]\nwebhook = \"https:///SECRETPATH\"\n", `webhook is not a URL with a host`},
		{"[notify]\nformat = \"teams\"\n", `org.toml:2: key "format": [notify]: unknown format "teams" (want json, discord, slack, ntfy)`},
		{"[notify]\nbackoff = \"-1s\"\n", `org.toml:2`},
		{"[notify]\nwebhok = \"https://x\"\n", `org.toml:2: unknown key "notify.webhok"`},
	} {
		_, err := LoadOrg(yardWith(t, tc.toml))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q: got %v, want %q", tc.toml, err, tc.want)
		}
		if err != nil && strings.Contains(err.Error(), "SECRETPATH") {
			t.Errorf("%q: the error repeats the webhook's secret: %v", tc.toml, err)
		}
	}
}
