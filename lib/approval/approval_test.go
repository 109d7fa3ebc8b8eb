package approval

import (
	"bytes"
	"crypto/ed25519"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/impyard/impyard/lib/store"
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

// A key whose public half was lost (a process died between writing the
// two) gets it back from the next Ensure, the same key and no notice of
// a new one, so its approvals verify again.
func TestEnsureRestoresThePublicHalf(t *testing.T) {
	home := filepath.Join(t.TempDir(), "home")
	k, err := Ensure(home, Owner, io.Discard, "impgate")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(PubPath(home, Owner)); err != nil {
		t.Fatal(err)
	}
	var notice bytes.Buffer
	again, err := Ensure(home, Owner, &notice, "impgate")
	if err != nil || again.Fingerprint() != k.Fingerprint() || notice.Len() != 0 {
		t.Fatalf("Ensure without the public half: %v %v %q", again, err, notice.String())
	}
	kr, err := LoadKeyring(home)
	if err != nil || len(kr.Keys) != 1 || kr.Keys[0].Fingerprint != k.Fingerprint() {
		t.Fatalf("keyring after Ensure: %+v %v, want the key's public half", kr, err)
	}
}

// Ensure of a key that is there, whole or refused, does not take the
// keys' lock: a program loading its key does not wait on another that
// is creating one.
func TestEnsureOfAKeyThereTakesNoLock(t *testing.T) {
	home := filepath.Join(t.TempDir(), "home")
	k, err := Ensure(home, Owner, io.Discard, "impgate")
	if err != nil {
		t.Fatal(err)
	}
	unlock, err := store.Lock(filepath.Join(Dir(home), ".lock"))
	if err != nil {
		t.Fatal(err)
	}
	defer unlock()
	was := store.LockTimeout
	store.LockTimeout = time.Nanosecond
	t.Cleanup(func() { store.LockTimeout = was })

	if again, err := Ensure(home, Owner, io.Discard, "impgate"); err != nil || again.Fingerprint() != k.Fingerprint() {
		t.Errorf("Ensure while another holds the keys' lock: %v, %v", again, err)
	}
	if err := os.Chmod(KeyPath(home, Owner), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := Ensure(home, Owner, io.Discard, "impgate"); err == nil || !strings.Contains(err.Error(), "lets others read the signing key") {
		t.Errorf("Ensure of a key others can read, the lock held: %v, want the key refused", err)
	}
}

// subject is a gate's Subject with every field set.
var subject = Subject{Gate: "g-0000000000000001", Imp: "yuko", Intent: "message-user", Task: "t-0000000000000001",
	Run: "r-0000000000000001", Filed: time.Date(2026, 11, 30, 11, 59, 0, 0, time.UTC), Filer: "yuko", Via: "impgw",
	SHA256: "ab", Trust: "cd"}

// TestVerify: an approval verifies over the subject it was signed for,
// and a change to any field of the subject, or of the approval, breaks
// it: each field of the gate that decides what runs, where and for whom
// is covered.
func TestVerify(t *testing.T) {
	home := t.TempDir()
	k, _ := Create(home, Owner)
	kr, _ := LoadKeyring(home)
	at := time.Date(2026, 11, 30, 12, 0, 0, 123, time.UTC)
	a := k.Sign(subject, "alice", at)
	if a.Schema != Schema {
		t.Fatalf("schema %q, want %q", a.Schema, Schema)
	}
	if key, err := kr.Verify(subject, a); err != nil || key.Name != Owner {
		t.Fatalf("%v %v", key, err)
	}
	same := func(a Approval) *Approval { return &a }
	for name, tc := range map[string]struct {
		edit func(s *Subject)
		sign func(a Approval) *Approval
	}{
		"other gate":        {func(s *Subject) { s.Gate = "g-0000000000000002" }, same},
		"other imp":         {func(s *Subject) { s.Imp = "rex" }, same},
		"other intent":      {func(s *Subject) { s.Intent = "memory-promote" }, same},
		"other task":        {func(s *Subject) { s.Task = "t-0000000000000002" }, same},
		"no task":           {func(s *Subject) { s.Task = "" }, same},
		"other run":         {func(s *Subject) { s.Run = "r-0000000000000002" }, same},
		"other filing time": {func(s *Subject) { s.Filed = s.Filed.Add(-time.Second) }, same},
		"other filer":       {func(s *Subject) { s.Filer = "owner" }, same},
		"other program":     {func(s *Subject) { s.Via = "impgate" }, same},
		"other sha":         {func(s *Subject) { s.SHA256 = "cd" }, same},
		"other trust":       {func(s *Subject) { s.Trust = "ab" }, same},
		"no trust":          {func(s *Subject) { s.Trust = "" }, same},
		"other by":          {func(*Subject) {}, func(a Approval) *Approval { a.By = "bob"; return &a }},
		"other time":        {func(*Subject) {}, func(a Approval) *Approval { a.At = a.At.Add(1); return &a }},
		"unknown key":       {func(*Subject) {}, func(a Approval) *Approval { a.Key = "ed25519:00"; return &a }},
		"no signature":      {func(*Subject) {}, func(a Approval) *Approval { return nil }},
		"bad base64":        {func(*Subject) {}, func(a Approval) *Approval { a.Sig = "%%"; return &a }},
		"older schema":      {func(*Subject) {}, func(a Approval) *Approval { a.Schema = ""; return &a }},
	} {
		s := subject
		tc.edit(&s)
		if _, err := kr.Verify(s, tc.sign(*a)); !errors.Is(err, ErrInvalid) || !strings.HasPrefix(err.Error(), "approval signature does not verify: ") {
			t.Errorf("%s: %v", name, err)
		}
	}
}

// TestVersion1Refused: an approval signed as impyard.approval/1 was,
// over the gate id, sha256, decider, time and key only, is refused as
// outdated, which is an unsigned approval to be made again, not a
// forgery.
func TestVersion1Refused(t *testing.T) {
	home := t.TempDir()
	k, _ := Create(home, Owner)
	kr, _ := LoadKeyring(home)
	at := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	v1, _ := json.Marshal([]string{"impyard.approval/1", subject.Gate, subject.SHA256, "approved", "alice", at.Format(time.RFC3339Nano), k.Fingerprint()})
	a := &Approval{By: "alice", At: at, Key: k.Fingerprint(), Sig: base64.StdEncoding.EncodeToString(ed25519.Sign(k.priv, v1))}
	_, err := kr.Verify(subject, a)
	if !errors.Is(err, ErrOutdated) || !errors.Is(err, ErrUnsigned) || !strings.Contains(err.Error(), "impyard.approval/1") {
		t.Fatalf("a /1 approval: %v", err)
	}
	if a.Current() {
		t.Error("a /1 approval is current")
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
		if got, err := kr.Verify(subject, k.Sign(subject, "alice", at)); err != nil || got.Fingerprint != k.Fingerprint() {
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
