package approval_test

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/impyard/impyard/internal/passkeytest"
	. "github.com/impyard/impyard/lib/approval"
)

// TestPasskeyApproval: a passkey's assertion over the approval message
// verifies, for ES256 and EdDSA passkeys; each thing the verifier checks
// (signature, type, challenge, origin, rpIdHash, UP, UV, credential,
// every field of the subject) refuses it when wrong, wrapping ErrInvalid.
func TestPasskeyApproval(t *testing.T) {
	for _, alg := range []int{AlgES256, AlgEdDSA} {
		home := t.TempDir()
		a := passkeytest.New(t, alg, "phone")
		if err := AddPasskey(home, a.Passkey); err != nil {
			t.Fatal(err)
		}
		if _, err := Create(home, Owner); err != nil {
			t.Fatal(err)
		}
		kr, err := LoadKeyring(home)
		if err != nil {
			t.Fatal(err)
		}
		at := time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC)
		good := a.Approve(passkeySubject, "phone", at)
		if k, err := kr.Verify(passkeySubject, good); err != nil || k.Name != "phone" || k.Kind != KindWebAuthn || k.Passkey == nil {
			t.Fatalf("alg %d: a good approval: %v %+v", alg, err, k)
		}
		key := a.Passkey.Fingerprint()
		msg := Challenge(passkeySubject, "phone", at, key)
		other := passkeySubject
		other.Gate = "g-0000000000000002"
		bad := map[string]*Approval{
			"type webauthn.create": WebAuthnApproval("phone", at, key, a.Assert("webauthn.create", msg, a.Passkey.Origin, a.Passkey.RPID)),
			"random challenge":     WebAuthnApproval("phone", at, key, a.Assert("webauthn.get", []byte("0123456789abcdef0123456789abcdef"), a.Passkey.Origin, a.Passkey.RPID)),
			"another gate":         a.Approve(other, "phone", at),
			"another origin":       WebAuthnApproval("phone", at, key, a.Assert("webauthn.get", msg, "https://evil.example", a.Passkey.RPID)),
			"another rp id":        WebAuthnApproval("phone", at, key, a.Assert("webauthn.get", msg, a.Passkey.Origin, "evil.example")),
			"decider changed":      func() *Approval { c := *good; c.By = "owner"; return &c }(),
			"time changed":         func() *Approval { c := *good; c.At = at.Add(time.Second); return &c }(),
			"signature flipped": func() *Approval {
				c := *good
				w := *good.WebAuthn
				w.Signature = append([]byte{}, w.Signature...)
				w.Signature[len(w.Signature)-1] ^= 1
				c.WebAuthn = &w
				return &c
			}(),
			"no assertion":   WebAuthnApproval("phone", at, key, nil),
			"as ed25519 sig": func() *Approval { c := *good; c.Kind = ""; return &c }(),
			"unknown kind":   func() *Approval { c := *good; c.Kind = "fido-u2f"; return &c }(),
		}
		for _, flags := range []struct {
			name string
			f    byte
		}{{"no UP", passkeytest.UV}, {"no UV", passkeytest.UP}} {
			b := *a
			b.Flags = flags.f
			bad[flags.name] = b.Approve(passkeySubject, "phone", at)
		}
		for name, ap := range bad {
			if _, err := kr.Verify(passkeySubject, ap); !errors.Is(err, ErrInvalid) {
				t.Errorf("alg %d, %s: %v, want ErrInvalid", alg, name, err)
			}
		}
		for name, edit := range map[string]func(s *Subject){
			"imp": func(s *Subject) { s.Imp = "mallory" }, "intent": func(s *Subject) { s.Intent = "git-push" },
			"task": func(s *Subject) { s.Task = "" }, "sha256": func(s *Subject) { s.SHA256 = "ff" },
			"trust": func(s *Subject) { s.Trust = "" }, "run": func(s *Subject) { s.Run = "r-0000000000000002" },
		} {
			s := passkeySubject
			edit(&s)
			if _, err := kr.Verify(s, good); !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), "its challenge is not this approval's message hash") {
				t.Errorf("alg %d, passkeySubject's %s edited: %v", alg, name, err)
			}
		}
		// Another passkey's signature under this one's fingerprint.
		thief := passkeytest.New(t, alg, "thief")
		thief.Passkey.CredentialID = a.Passkey.CredentialID
		if _, err := kr.Verify(passkeySubject, thief.Approve(passkeySubject, "phone", at)); !errors.Is(err, ErrInvalid) {
			t.Errorf("alg %d: another key's assertion verifies: %v", alg, err)
		}
		// An Ed25519 approval naming the passkey's fingerprint.
		owner, _ := Load(home, Owner)
		forged := owner.Sign(passkeySubject, "phone", at)
		forged.Key = key
		if _, err := kr.Verify(passkeySubject, forged); !errors.Is(err, ErrInvalid) {
			t.Errorf("alg %d: an Ed25519 signature under a passkey's fingerprint: %v", alg, err)
		}
	}
}

// TestPasskeyFiles: a passkey is written 0600 under keys/, never over a
// key or passkey of its name, and listed in the keyring; one that others
// may write, or that does not parse, refuses the whole keyring; revoking
// removes it, and revoking it again says it is not there.
func TestPasskeyFiles(t *testing.T) {
	home := t.TempDir()
	a := passkeytest.New(t, AlgES256, "phone")
	if err := AddPasskey(home, a.Passkey); err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(PasskeyPath(home, "phone")); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("passkey file: %v %v", fi, err)
	}
	if err := AddPasskey(home, a.Passkey); !errors.Is(err, ErrExists) {
		t.Errorf("a second passkey phone: %v", err)
	}
	if _, err := Create(home, "laptop"); err != nil {
		t.Fatal(err)
	}
	clash := passkeytest.New(t, AlgES256, "laptop")
	if err := AddPasskey(home, clash.Passkey); !errors.Is(err, ErrExists) {
		t.Errorf("a passkey named as a key: %v", err)
	}
	broken := passkeytest.New(t, AlgES256, "broken")
	broken.Passkey.PublicKey = []byte{4, 1, 2}
	if err := AddPasskey(home, broken.Passkey); err == nil || !strings.Contains(err.Error(), "ES256 public key") {
		t.Errorf("a passkey whose key is not a P-256 point: %v", err)
	}
	kr, err := LoadKeyring(home)
	if err != nil || len(kr.Keys) != 2 || kr.Keys[1].Name != "phone" || kr.Keys[1].Kind != KindWebAuthn || kr.Keys[1].Fingerprint != a.Passkey.Fingerprint() {
		t.Fatalf("keyring: %+v %v", kr, err)
	}
	os.Chmod(PasskeyPath(home, "phone"), 0o622)
	if _, err := LoadKeyring(home); err == nil || !strings.Contains(err.Error(), PasskeyPath(home, "phone")) {
		t.Errorf("a passkey others may write: %v", err)
	}
	os.Chmod(PasskeyPath(home, "phone"), 0o600)
	if err := RemovePasskey(home, "phone"); err != nil {
		t.Fatal(err)
	}
	if err := RemovePasskey(home, "phone"); !errors.Is(err, ErrNoPasskey) {
		t.Errorf("revoking again: %v", err)
	}
	if kr, err := LoadKeyring(home); err != nil || len(kr.Keys) != 1 {
		t.Errorf("keyring after revoking: %+v %v", kr, err)
	}
}

// A passkey that could not be removed is not reported as revoked.
func TestRemovePasskeyThatCannotBeRemoved(t *testing.T) {
	home := t.TempDir()
	if _, err := Create(home, Owner); err != nil {
		t.Fatal(err)
	}
	// A directory in the passkey's place, not empty: os.Remove fails
	// with ENOTEMPTY, not ENOENT.
	if err := os.MkdirAll(filepath.Join(PasskeyPath(home, "phone"), "x"), 0o700); err != nil {
		t.Fatal(err)
	}
	err := RemovePasskey(home, "phone")
	if err == nil || errors.Is(err, ErrNoPasskey) {
		t.Errorf("removing a passkey that cannot be removed: %v, want its error", err)
	}
	if _, err := os.Stat(PasskeyPath(home, "phone")); err != nil {
		t.Errorf("after a failed removal: %v", err)
	}
}

// passkeySubject is a gate's Subject with every field set.
var passkeySubject = Subject{Gate: "g-0000000000000001", Imp: "yuko", Intent: "message-user", Task: "t-0000000000000001",
	Run: "r-0000000000000001", Filed: time.Date(2026, 11, 30, 11, 59, 0, 0, time.UTC), Filer: "yuko", Via: "impgw",
	SHA256: "ab", Trust: "cd"}

// BenchmarkVerify measures what impexec pays to verify one approval: an
// owner's Ed25519 signature, and a passkey's ES256 and EdDSA assertions
// (the client data parsed, the authenticator data checked, then the
// signature), side by side in one run.
func BenchmarkVerify(b *testing.B) {
	home := b.TempDir()
	owner, err := Create(home, Owner)
	if err != nil {
		b.Fatal(err)
	}
	es := passkeytest.New(b, AlgES256, "phone")
	ed := passkeytest.New(b, AlgEdDSA, "tablet")
	for _, a := range []*passkeytest.Authenticator{es, ed} {
		if err := AddPasskey(home, a.Passkey); err != nil {
			b.Fatal(err)
		}
	}
	kr, err := LoadKeyring(home)
	if err != nil {
		b.Fatal(err)
	}
	at := time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC)
	for _, c := range []struct {
		name string
		a    *Approval
	}{
		{"ed25519", owner.Sign(passkeySubject, "alice", at)},
		{"passkey-es256", es.Approve(passkeySubject, "phone", at)},
		{"passkey-eddsa", ed.Approve(passkeySubject, "tablet", at)},
	} {
		b.Run(c.name, func(b *testing.B) {
			for b.Loop() {
				if _, err := kr.Verify(passkeySubject, c.a); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
