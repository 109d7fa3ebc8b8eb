package proposal

import (
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/impyard/impyard/lib/config"
	"github.com/impyard/impyard/lib/gate"
	"github.com/impyard/impyard/lib/state"
)

// TestWriterCannotGrantAuto: the one-line edit a writer of the yard would
// make to org.toml, an auto entry for email to any address, is refused
// when the file is theirs or writable by their group: the proposal is
// refused naming the file, and no gate is filed, approved or not.
func TestWriterCannotGrantAuto(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to give a file to another uid")
	}
	key := signer(t)
	for name, spoil := range map[string]func(p string) error{
		"their own file":       func(p string) error { return os.Chown(p, 65534, 65534) },
		"a group-writable one": func(p string) error { return os.Chmod(p, 0o660) },
	} {
		t.Run(name, func(t *testing.T) {
			y := newYard(t)
			p := y.Path("org.toml")
			if err := os.WriteFile(p, []byte(org+"[[trust]]\nintent = \"email-send\"\nfree = [\"to\", \"subject\", \"body\"]\nlevel = \"auto\"\n"), 0o640); err != nil {
				t.Fatal(err)
			}
			if err := spoil(p); err != nil {
				t.Fatal(err)
			}
			d, _ := Decide(y, Proposal{Imp: "yuko", Run: run, Body: strings.NewReader(`{"intent":"email-send","payload":{"to":["x@elsewhere.com"]}}`), Rules: rules, Signer: key, Now: time.Now()})
			if d.Verdict != Refused || d.Refusal != ConfigBroken || !strings.Contains(d.Reason, p+" is ") || !strings.Contains(d.Reason, "unsafe authority file") {
				t.Fatalf("got %v/%v %q; want refused naming %s as unsafe", d.Verdict, d.Refusal, d.Reason, p)
			}
			if filed, _ := gate.List(y, gate.Filter{All: true}); len(filed) != 0 {
				t.Fatalf("%d gates filed", len(filed))
			}
		})
	}
}

// TestKeeperKeepsTrust: under a daemon's config.Keeper, the same edit
// leaves the org.toml the gateway took before in force: the email to an
// outside address is gated for a human, as the owner's file says, and the
// refusal is logged once, naming the file.
func TestKeeperKeepsTrust(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to give a file to another uid")
	}
	key := signer(t)
	y := newYard(t)
	var logged []string
	var k config.Keeper
	load := func() (*config.Org, error) {
		return k.Load(y, func(f string, a ...any) { logged = append(logged, fmt.Sprintf(f, a...)) })
	}
	// Each proposal its own subject, so none is a duplicate of the last.
	n := 0
	propose := func() Decision {
		n++
		body := fmt.Sprintf(`{"intent":"email-send","payload":{"to":["x@elsewhere.com"],"subject":"n%d"}}`, n)
		d, _ := Decide(y, Proposal{Imp: "yuko", Run: run, Body: strings.NewReader(body), Rules: rules, Signer: key, Now: time.Now(), Org: load})
		return d
	}
	if d := propose(); d.Verdict != Gated {
		t.Fatalf("under the owner's org.toml: %v/%v %q", d.Verdict, d.Refusal, d.Reason)
	}
	p := y.Path("org.toml")
	if err := os.WriteFile(p, []byte(org+"[[trust]]\nintent = \"email-send\"\nfree = [\"to\", \"subject\", \"body\"]\nlevel = \"auto\"\n"), 0o640); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(p, 65534, 65534); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if d := propose(); d.Verdict != Gated {
			t.Fatalf("under the writer's org.toml: %v/%v %q; want gated, as the last good one says", d.Verdict, d.Refusal, d.Reason)
		}
	}
	if len(logged) != 1 || !strings.Contains(logged[0], p+" is owned by uid 65534") {
		t.Fatalf("logged %q; want the refusal once, naming %s", logged, p)
	}
	filed, _ := gate.List(y, gate.Filter{All: true})
	for _, g := range filed {
		if g.State != state.Filed {
			t.Fatalf("gate %s is %s; every gate should wait for a human", g.ID, g.State)
		}
	}
}
