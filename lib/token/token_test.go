package token

import (
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/impyard/impyard/lib/store"
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
	if sub, _, err := ProxyLookup(home, basic(Org, a)); err != nil || sub != Org {
		t.Errorf("the org token as proxy credentials: %q %v", sub, err)
	}
	if err := Revoke(home, a); !errors.Is(err, ErrReserved) {
		t.Errorf("Revoke(org token) = %v", err)
	}
}

func basic(name, tok string) string {
	return "Basic " + base64.StdEncoding.EncodeToString([]byte(name+":"+tok))
}

func TestOrgNeverIssued(t *testing.T) {
	home := filepath.Join(t.TempDir(), "home")
	if tok, err := Issue(home, Org, "", ""); !errors.Is(err, ErrReserved) || tok != "" {
		t.Fatalf("Issue(org) = %q, %v", tok, err)
	}
	if _, err := os.Stat(home); !os.IsNotExist(err) {
		t.Errorf("refusing org wrote %s: %v", home, err)
	}
	OrgToken(home)
	// A token issued for an imp never speaks for org, whatever name it
	// is presented under.
	imp, _ := Issue(home, "yuko", "r-0000000000000001", "")
	for _, name := range []string{Org, "yuko"} {
		if sub, _, err := ProxyLookup(home, basic(name, imp)); sub == Org || (name == Org) == (err == nil) {
			t.Errorf("an imp's token presented as %s: subject %q, %v", name, sub, err)
		}
	}
	// A record that names org (as one issued by hand before org was
	// refused would) is not accepted: only org.token is.
	var raw [32]byte
	rand.Read(raw[:])
	forged := prefix + hex.EncodeToString(raw[:])
	b, _ := store.Encode(Subject{Schema: store.Schema(kind, major), Subject: Org})
	os.WriteFile(filepath.Join(home, "tokens", hashName(forged)), b, 0o600)
	if s, err := Lookup(home, forged); !errors.Is(err, ErrUnknown) {
		t.Errorf("a record naming org was accepted: %+v %v", s, err)
	}
	if sub, _, err := ProxyLookup(home, basic(Org, forged)); err == nil || sub == Org {
		t.Errorf("a record naming org proxies as %q", sub)
	}
}
