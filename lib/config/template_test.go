package config

import (
	"bytes"
	"os"
	"reflect"
	"regexp"
	"testing"
)

// TestTemplateIsDefault: the org.toml a yard starts with loads, and as
// the default configuration.
func TestTemplateIsDefault(t *testing.T) {
	y := yardWith(t, "")
	created, err := CreateOrg(y)
	if err != nil || !created {
		t.Fatalf("CreateOrg: %v, %v", created, err)
	}
	o, err := LoadOrg(y)
	if err != nil {
		t.Fatal(err)
	}
	o.path = ""
	if !reflect.DeepEqual(o, Default()) {
		t.Errorf("the template loads as\n%+v\nwant the defaults\n%+v", o, Default())
	}
}

// setting is a setting the template leaves out: "#key = value" or
// "#[table]", as opposed to a comment ("# text").
var setting = regexp.MustCompile(`(?m)^#([\[a-z])`)

// TestTemplateSettingsLoad takes the "#" off every setting the template
// leaves out and loads the result: every key it shows is one this
// package reads, with a value it accepts, and every default it shows is
// the default.
func TestTemplateSettingsLoad(t *testing.T) {
	all := setting.ReplaceAll(Template, []byte("$1"))
	if bytes.Equal(all, Template) {
		t.Fatal("the template shows no setting")
	}
	y := yardWith(t, string(all))
	o, err := LoadOrg(y)
	if err != nil {
		t.Fatalf("%v\n%s", err, all)
	}
	d := Default()
	if o.Gateway != d.Gateway || o.Containerd != d.Containerd || o.Supervisor != d.Supervisor {
		t.Errorf("the defaults the template shows are not the defaults:\ngot  %+v %+v %+v\nwant %+v %+v %+v",
			o.Gateway, o.Containerd, o.Supervisor, d.Gateway, d.Containerd, d.Supervisor)
	}
	if len(o.Imps) == 0 || len(o.Trust) == 0 || len(o.Executors) == 0 || len(o.Budget) == 0 {
		t.Errorf("a section has no example: imps %d, trust %d, executors %d, budget %d", len(o.Imps), len(o.Trust), len(o.Executors), len(o.Budget))
	}
}

// TestCreateOrgKeepsOwners: an org.toml already there, even one that does
// not load, is kept byte for byte.
func TestCreateOrgKeepsOwners(t *testing.T) {
	const mine = "[gateway]\nlisten = \"127.0.0.1:7399\"\nbogus = 1\n"
	y := yardWith(t, mine)
	created, err := CreateOrg(y)
	if err != nil || created {
		t.Fatalf("CreateOrg over an owner's file: %v, %v; want false, nil", created, err)
	}
	if b, _ := os.ReadFile(OrgPath(y)); string(b) != mine {
		t.Errorf("org.toml is now %q; want the owner's %q", b, mine)
	}
}
