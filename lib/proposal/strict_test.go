package proposal

import (
	"os"
	"strings"
	"testing"
	"time"

	"github.com/impyard/impyard/lib/gate"
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
