package config

import (
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/impyard/impyard/lib/notify"
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
		{"[notify]\non = [\"gate-approved\"]\n", `org.toml:2: key "on": [notify]: unknown event "gate-approved" (want gate-filed, task-failed, task-needs-review, trust-earned-removed, pause, resume, gate-expiring, budget-warning)`},
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

// Notifies answers from org.toml as it is now, reading it again only when
// lstat shows it changed, and says yes when it does not load.
func TestNotifies(t *testing.T) {
	y := yardWith(t, "")
	if Notifies(y, notify.TaskFailed) {
		t.Error("no org.toml: a receiver for task-failed")
	}
	p := OrgPath(y)
	write := func(s string) {
		t.Helper()
		// Atomically, as an editor or impyard itself would: a new inode.
		if err := os.WriteFile(p+".new", []byte(s), 0o640); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(p+".new", p); err != nil {
			t.Fatal(err)
		}
	}
	write("[notify]\non = [\"task-failed\"]\ncommand = [\"true\"]\n")
	if !Notifies(y, notify.TaskFailed) || Notifies(y, notify.GateFiled) || !Notifies(y, notify.TrustEarnedRemoved) {
		t.Error("command on task-failed: want task-failed and trust-earned-removed alone")
	}
	write("[notify]\non = [\"task-failed\"]\n")
	if Notifies(y, notify.TaskFailed) {
		t.Error("no receiver after the rewrite, still told")
	}
	// Broken, it says yes: the deliverer sorts it out once it is fixed.
	write("[notify]\nformat = \"teams\"\n")
	if !Notifies(y, notify.GateFiled) {
		t.Error("org.toml that does not load: no entry")
	}
	// Changed in place with its size and times kept, it is not read
	// again: what lstat shows decides. A new mtime has it read.
	write("[notify]\non = [\"task-failed\"]\ncommand = [\"true\"]\n")
	if !Notifies(y, notify.TaskFailed) {
		t.Fatal("command on task-failed: not told")
	}
	fi, err := os.Stat(p)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte("[notify]\non = [\"task-failed\"]\n#ommand = [\"true\"]\n"), 0o640); err != nil {
		t.Fatal(err)
	}
	os.Chtimes(p, fi.ModTime(), fi.ModTime())
	if !Notifies(y, notify.TaskFailed) {
		t.Error("org.toml read again though lstat shows no change")
	}
	later := fi.ModTime().Add(time.Second)
	os.Chtimes(p, later, later)
	if Notifies(y, notify.TaskFailed) {
		t.Error("a new mtime: org.toml not read again")
	}
	os.Remove(p)
	if Notifies(y, notify.TaskFailed) {
		t.Error("org.toml removed: still told")
	}
	// A yard elsewhere has its own org.toml.
	other := yardWith(t, "[notify]\ncommand = [\"true\"]\n")
	if !Notifies(other, notify.GateFiled) || Notifies(y, notify.GateFiled) {
		t.Error("the answer of one yard given for another")
	}
}
