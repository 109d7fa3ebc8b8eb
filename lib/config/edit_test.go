package config_test

import (
	"errors"
	"os"
	"testing"

	"github.com/impyard/impyard/lib/config"
	"github.com/impyard/impyard/lib/yard/yardtest"
)

// TestAuthorityReplace: an edit is applied only over the content it
// started from, keeps the previous file, and leaves a file in strict
// modes; content that would not load is refused before anything is
// written.
func TestAuthorityReplace(t *testing.T) {
	y := yardtest.New(t)
	p := config.OrgPath(y)
	if err := os.WriteFile(p, []byte(gated), 0o644); err != nil {
		t.Fatal(err)
	}
	a, err := config.AuthorityFile(y, "org.toml")
	if err != nil || a.Path != p {
		t.Fatalf("AuthorityFile(org.toml) = %v, %v", a, err)
	}
	old, err := a.Read(y)
	if err != nil || string(old) != gated {
		t.Fatalf("Read = %q, %v", old, err)
	}
	if _, err := a.Replace(y, old, []byte("[[trust]]\nlevel = \"sometimes\"\n")); err == nil {
		t.Fatal("content that does not load was written")
	}
	if _, err := a.Replace(y, []byte("something else"), []byte(gated+autoEmail)); !errors.Is(err, config.ErrChanged) {
		t.Fatalf("over changed content: %v; want ErrChanged", err)
	}
	backup, err := a.Replace(y, old, []byte(gated+autoEmail))
	if err != nil || backup != p+".1" {
		t.Fatalf("Replace = %q, %v", backup, err)
	}
	if b, _ := os.ReadFile(backup); string(b) != gated {
		t.Fatalf("backup holds %q", b)
	}
	if err := y.CheckAuthority(p); err != nil {
		t.Fatalf("the new file: %v", err)
	}
	for _, name := range []string{"queue/yuko/t-1.json", "imps/../org.toml.1", "imps/yuko/charter.md", "/etc/passwd"} {
		if _, err := config.AuthorityFile(y, name); !errors.Is(err, config.ErrNotAuthority) {
			t.Errorf("AuthorityFile(%s): %v; want ErrNotAuthority", name, err)
		}
	}
	for _, name := range []string{"policies/gateway.json", "imps/yuko/imp.toml", y.Path("imps", "kai", "imp.toml")} {
		if _, err := config.AuthorityFile(y, name); err != nil {
			t.Errorf("AuthorityFile(%s): %v", name, err)
		}
	}
}
