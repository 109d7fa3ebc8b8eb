package approval

import (
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// The hand-written DER is byte for byte what crypto/x509 writes, and
// reads what it writes back to the same key.
func TestDERMatchesX509(t *testing.T) {
	pub, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	want8, _ := x509.MarshalPKCS8PrivateKey(priv)
	if got := marshalPKCS8(priv); string(got) != string(want8) {
		t.Errorf("PKCS #8 %x, x509 writes %x", got, want8)
	}
	wantPub, _ := x509.MarshalPKIXPublicKey(pub)
	if got := marshalPKIX(pub); string(got) != string(wantPub) {
		t.Errorf("SubjectPublicKeyInfo %x, x509 writes %x", got, wantPub)
	}
	if back, err := parsePKCS8(want8); err != nil || !back.Equal(priv) {
		t.Errorf("parse PKCS #8: %v", err)
	}
	if back, err := parsePKIX(wantPub); err != nil || !back.Equal(pub) {
		t.Errorf("parse SubjectPublicKeyInfo: %v", err)
	}
}

// Keys of another kind, cut short or with bytes after them are refused
// with an error saying what is wanted.
func TestDERRefusesOtherKeys(t *testing.T) {
	ec, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	ec8, _ := x509.MarshalPKCS8PrivateKey(ec)
	ecPub, _ := x509.MarshalPKIXPublicKey(&ec.PublicKey)
	_, priv, _ := ed25519.GenerateKey(rand.Reader)
	good8 := marshalPKCS8(priv)
	goodPub := marshalPKIX(priv.Public().(ed25519.PublicKey))
	for name, der := range map[string][]byte{"P-256": ec8, "short": good8[:len(good8)-1], "trailing": append(good8, 0), "empty": nil} {
		if _, err := parsePKCS8(der); !errors.Is(err, errNotEd25519) {
			t.Errorf("%s private key: %v, want %v", name, err, errNotEd25519)
		}
	}
	for name, der := range map[string][]byte{"P-256": ecPub, "short": goodPub[:len(goodPub)-1], "trailing": append(goodPub, 0)} {
		if _, err := parsePKIX(der); !errors.Is(err, errNotEd25519Pub) {
			t.Errorf("%s public key: %v, want %v", name, err, errNotEd25519Pub)
		}
	}
}

// A key made by openssl reads as the same key.
func TestDERReadsOpenSSLKeys(t *testing.T) {
	if _, err := exec.LookPath("openssl"); err != nil {
		t.Skip("no openssl")
	}
	dir := t.TempDir()
	key := filepath.Join(dir, "k.pem")
	if out, err := exec.Command("openssl", "genpkey", "-algorithm", "ed25519", "-out", key).CombinedOutput(); err != nil {
		t.Fatalf("openssl genpkey: %v %s", err, out)
	}
	pubOut, err := exec.Command("openssl", "pkey", "-in", key, "-pubout").Output()
	if err != nil {
		t.Fatal(err)
	}
	b, _ := os.ReadFile(key)
	blk, _ := pem.Decode(b)
	priv, err := parsePKCS8(blk.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	blk, _ = pem.Decode(pubOut)
	pub, err := parsePKIX(blk.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	if !pub.Equal(priv.Public()) {
		t.Error("openssl's public key is not the private key's")
	}
}
