// Package passkeytest stands in for a phone's passkey in tests: it signs
// WebAuthn assertions laid out as the WebAuthn specification lays them
// out (§6.1 authenticator data, §7.2 client data), so that what an
// offline verifier checks can be made right, or wrong one part at a time.
package passkeytest

import (
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"testing"
	"time"

	"github.com/impyard/impyard/lib/approval"
)

// The authenticator data flags: user present, user verified.
const (
	UP = 0x01
	UV = 0x04
)

// Authenticator is one passkey and the flags it sets.
type Authenticator struct {
	Passkey *approval.Passkey
	Flags   byte
	ec      *ecdsa.PrivateKey
	ed      ed25519.PrivateKey
}

// New makes a passkey called name of COSE algorithm alg (approval.AlgES256
// or approval.AlgEdDSA) for https://desk.example.com.
func New(t testing.TB, alg int, name string) *Authenticator {
	t.Helper()
	a := &Authenticator{Passkey: &approval.Passkey{Name: name, CredentialID: []byte("cred-" + name), Alg: alg,
		RPID: "desk.example.com", Origin: "https://desk.example.com", COSEKey: []byte{0xa0}, Created: time.Unix(0, 0).UTC()},
		Flags: UP | UV}
	var err error
	switch alg {
	case approval.AlgES256:
		if a.ec, err = ecdsa.GenerateKey(elliptic.P256(), rand.Reader); err == nil {
			a.Passkey.PublicKey, err = a.ec.PublicKey.Bytes()
		}
	case approval.AlgEdDSA:
		var pub ed25519.PublicKey
		pub, a.ed, err = ed25519.GenerateKey(rand.Reader)
		a.Passkey.PublicKey = pub
	}
	if err != nil {
		t.Fatal(err)
	}
	return a
}

// Assert answers a ceremony of type typ ("webauthn.get") with challenge,
// as a browser at origin would for relying party rpID.
func (a *Authenticator) Assert(typ string, challenge []byte, origin, rpID string) *approval.Assertion {
	rp := sha256.Sum256([]byte(rpID))
	ad := append(rp[:], a.Flags, 0, 0, 0, 7)
	cd, _ := json.Marshal(map[string]any{"type": typ, "challenge": base64.RawURLEncoding.EncodeToString(challenge), "origin": origin, "crossOrigin": false})
	cdh := sha256.Sum256(cd)
	signed := append(append([]byte{}, ad...), cdh[:]...)
	var sig []byte
	if a.ec != nil {
		h := sha256.Sum256(signed)
		sig, _ = ecdsa.SignASN1(rand.Reader, a.ec, h[:])
	} else {
		sig = ed25519.Sign(a.ed, signed)
	}
	return &approval.Assertion{CredentialID: a.Passkey.CredentialID, AuthenticatorData: ad, ClientDataJSON: cd, Signature: sig}
}

// Approve is the approval the passkey makes of s for by at at.
func (a *Authenticator) Approve(s approval.Subject, by string, at time.Time) *approval.Approval {
	key := a.Passkey.Fingerprint()
	return approval.WebAuthnApproval(by, at, key, a.Assert("webauthn.get", approval.Challenge(s, by, at, key), a.Passkey.Origin, a.Passkey.RPID))
}
