package token

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestIssueLookupRevoke(t *testing.T) {
	home := filepath.Join(t.TempDir(), "home")
	tok, err := Issue(home, "yuko", "r-0000000000000001", "t-0000000000000001")
	if err != nil {
		t.Fatal(err)
	}
	s, err := Lookup(home, tok)
	if err != nil || s.Subject != "yuko" || s.Run != "r-0000000000000001" || s.Imp() != "yuko" {
		t.Fatalf("%+v %v", s, err)
	}
	fi, _ := os.Stat(home)
	if fi.Mode().Perm() != 0o700 {
		t.Errorf("IMPYARD_HOME mode %v, want 0700", fi.Mode().Perm())
	}
	entries, _ := os.ReadDir(filepath.Join(home, "tokens"))
	for _, e := range entries {
		b, _ := os.ReadFile(filepath.Join(home, "tokens", e.Name()))
		if strings.Contains(string(b), tok) || strings.Contains(e.Name(), tok) {
			t.Errorf("token stored in the clear in %s", e.Name())
		}
	}
	// Another token of the right shape: the same but for its last digit.
	other := tok[:len(tok)-1] + map[bool]string{true: "1", false: "0"}[tok[len(tok)-1] == '0']
	for _, bad := range []string{"", "x", tok + "0", strings.ToUpper(tok), "impyard_../../etc/passwd", other} {
		if _, err := Lookup(home, bad); err != ErrUnknown {
			t.Errorf("Lookup(%q) = %v", bad, err)
		}
	}
	if err := Revoke(home, tok); err != nil {
		t.Fatal(err)
	}
	if _, err := Lookup(home, tok); err != ErrUnknown {
		t.Errorf("revoked token still works: %v", err)
	}
	if _, err := Issue(home, "Bad Name", "", ""); err == nil {
		t.Errorf("bad imp name accepted")
	}
	if _, err := Issue(home, "yuko", "../x", ""); err == nil {
		t.Errorf("bad run id accepted")
	}
}

func TestOrgToken(t *testing.T) {
	home := t.TempDir()
	a, err := OrgToken(home)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := OrgToken(home)
	if a != b {
		t.Errorf("org token changed between calls")
	}
	s, err := Lookup(home, a)
	if err != nil || s.Subject != Org || s.Imp() != "" {
		t.Errorf("%+v %v", s, err)
	}
	fi, _ := os.Stat(filepath.Join(home, "tokens", "org.token"))
	if fi.Mode().Perm() != 0o600 {
		t.Errorf("org.token mode %v", fi.Mode().Perm())
	}
}
