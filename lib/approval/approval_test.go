package approval

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestEnsureCreatesOnce(t *testing.T) {
	home := filepath.Join(t.TempDir(), "home")
	var notice bytes.Buffer
	k, err := Ensure(home, Owner, &notice, "impgate")
	if err != nil {
		t.Fatal(err)
	}
	if want := "impgate: created owner signing key " + KeyPath(home, Owner) + "\n"; notice.String() != want {
		t.Errorf("notice %q, want %q", notice.String(), want)
	}
	for p, mode := range map[string]os.FileMode{home: 0o700, Dir(home): 0o700, KeyPath(home, Owner): 0o600, PubPath(home, Owner): 0o644} {
		if fi, err := os.Stat(p); err != nil || fi.Mode().Perm() != mode {
			t.Errorf("%s: %v %v, want mode %04o", p, fi.Mode(), err, mode)
		}
	}
	notice.Reset()
	again, err := Ensure(home, Owner, &notice, "impgate")
	if err != nil || again.Fingerprint() != k.Fingerprint() || notice.Len() != 0 {
		t.Errorf("second Ensure: %v %v %q", again, err, notice.String())
	}
	if _, err := Create(home, Owner); !errors.Is(err, ErrExists) {
		t.Errorf("Create over an existing key: %v", err)
	}
	kr, err := LoadKeyring(home)
	if err != nil || len(kr.Keys) != 1 || kr.Keys[0].Name != Owner || kr.Keys[0].Fingerprint != k.Fingerprint() {
		t.Fatalf("keyring %+v %v", kr, err)
	}
}

func TestVerify(t *testing.T) {
	home := t.TempDir()
	k, _ := Create(home, Owner)
	kr, _ := LoadKeyring(home)
	at := time.Date(2026, 11, 30, 12, 0, 0, 123, time.UTC)
	a := k.Sign("g-0000000000000001", "ab", "alice", at)
	if key, err := kr.Verify("g-0000000000000001", "ab", a); err != nil || key.Name != Owner {
		t.Fatalf("%v %v", key, err)
	}
	for name, tc := range map[string]struct {
		id, sha string
		edit    func(a Approval) *Approval
	}{
		"other gate":   {"g-0000000000000002", "ab", func(a Approval) *Approval { return &a }},
		"other sha":    {"g-0000000000000001", "cd", func(a Approval) *Approval { return &a }},
		"other by":     {"g-0000000000000001", "ab", func(a Approval) *Approval { a.By = "bob"; return &a }},
		"other time":   {"g-0000000000000001", "ab", func(a Approval) *Approval { a.At = a.At.Add(1); return &a }},
		"unknown key":  {"g-0000000000000001", "ab", func(a Approval) *Approval { a.Key = "ed25519:00"; return &a }},
		"no signature": {"g-0000000000000001", "ab", func(a Approval) *Approval { return nil }},
		"bad base64":   {"g-0000000000000001", "ab", func(a Approval) *Approval { a.Sig = "%%"; return &a }},
	} {
		if _, err := kr.Verify(tc.id, tc.sha, tc.edit(*a)); !errors.Is(err, ErrInvalid) || !strings.HasPrefix(err.Error(), "approval signature does not verify: ") {
			t.Errorf("%s: %v", name, err)
		}
	}
}

func TestRefusesLooseFiles(t *testing.T) {
	home := t.TempDir()
	Create(home, Owner)
	os.Chmod(KeyPath(home, Owner), 0o640)
	if _, err := Load(home, Owner); err == nil || !strings.Contains(err.Error(), "lets others read") {
		t.Errorf("group-readable key: %v", err)
	}
	os.Chmod(PubPath(home, Owner), 0o666)
	if _, err := LoadKeyring(home); err == nil || !strings.Contains(err.Error(), "lets others replace") {
		t.Errorf("world-writable public key: %v", err)
	}
	if _, err := LoadKeyring(t.TempDir()); !errors.Is(err, ErrNoKeys) {
		t.Errorf("no keys: %v", err)
	}
	if _, err := Load(home, "../x"); err == nil {
		t.Errorf("a key name with a path loaded")
	}
}

func TestWritePublicTrustsAnotherKey(t *testing.T) {
	home := t.TempDir()
	// A keys/ directory made loose by hand is tightened before use.
	os.Mkdir(Dir(home), 0o755)
	owner, _ := Create(home, Owner)
	if fi, _ := os.Stat(Dir(home)); fi.Mode().Perm() != 0o700 {
		t.Errorf("keys/ mode %04o, want 0700", fi.Mode().Perm())
	}
	second, _ := Generate("backup")
	if err := WritePublic(home, second); err != nil {
		t.Fatal(err)
	}
	if err := WritePublic(home, second); !errors.Is(err, ErrExists) {
		t.Errorf("WritePublic over an existing key: %v", err)
	}
	if err := WritePublic(home, &Key{Name: "../x", priv: second.priv}); err == nil {
		t.Errorf("a key name with a path was written")
	}
	if _, err := os.Stat(KeyPath(home, "backup")); !os.IsNotExist(err) {
		t.Errorf("WritePublic wrote a private key: %v", err)
	}
	kr, err := LoadKeyring(home)
	if err != nil || len(kr.Keys) != 2 || kr.Keys[0].Name != "backup" || kr.Keys[1].Name != Owner {
		t.Fatalf("keyring %+v %v", kr.Keys, err)
	}
	at := time.Now()
	for _, k := range []*Key{owner, second} {
		if got, err := kr.Verify("g-0000000000000001", "ab", k.Sign("g-0000000000000001", "ab", "alice", at)); err != nil || got.Fingerprint != k.Fingerprint() {
			t.Errorf("%s: %v %v", k.Name, got, err)
		}
	}
}

// TestKeyNames: a key name is a plain name of at most 64 bytes; a longer
// one, or one that could leave keys/, is refused and nothing is written.
func TestKeyNames(t *testing.T) {
	home := filepath.Join(t.TempDir(), "home")
	if _, err := Create(home, strings.Repeat("a", 64)); err != nil {
		t.Errorf("a 64-byte name: %v", err)
	}
	for _, name := range []string{"", strings.Repeat("b", 65), "../x", "a/b", "a.b", `a\b`, "a\x00b"} {
		if _, err := Create(home, name); err == nil || !strings.Contains(err.Error(), "invalid key name") {
			t.Errorf("Create(%q): %v, want an invalid key name", name, err)
		}
	}
	entries, _ := os.ReadDir(Dir(home))
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	if len(names) != 3 {
		t.Errorf("keys/ holds %v, want the 64-byte key, its public half and .lock", names)
	}
}

// TestErrUnsigned: an unsigned approval is an invalid one, and says so
// first, then why, as every verification failure does.
func TestErrUnsigned(t *testing.T) {
	if !errors.Is(ErrUnsigned, ErrInvalid) {
		t.Fatal("ErrUnsigned does not wrap ErrInvalid")
	}
	if got, want := ErrUnsigned.Error(), "approval signature does not verify: no signed approval"; got != want {
		t.Fatalf("ErrUnsigned says %q, want %q", got, want)
	}
	if wrapped := fmt.Errorf("%w on gate g-1", ErrUnsigned); !errors.Is(wrapped, ErrUnsigned) || !errors.Is(wrapped, ErrInvalid) {
		t.Fatal("a wrapped ErrUnsigned is no longer ErrUnsigned and ErrInvalid")
	}
}
