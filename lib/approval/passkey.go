package approval

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/impyard/impyard/lib/store"
)

// KindWebAuthn is an approval made by a passkey: a WebAuthn assertion
// whose challenge is the SHA-256 of the approval's Message.
const KindWebAuthn = "webauthn"

// The COSE algorithms a passkey may sign with (RFC 9053): the ones every
// platform authenticator offers.
const (
	AlgES256 = -7
	AlgEdDSA = -8
)

// Passkey is an owner's WebAuthn credential, kept as keys/NAME.passkey
// beside the Ed25519 keys. Its public key is stored as the desk took it
// from the authenticator's COSE key at enrollment (go-webauthn parsed it):
// for ES256 the uncompressed P-256 point, for EdDSA the 32 key bytes. It
// is kept in that form so a verifier needs only the standard library,
// and impq, which verifies memory approvals, links no CBOR decoder and
// no network stack.
type Passkey struct {
	Schema       string `json:"schema"`
	Name         string `json:"name"`
	CredentialID []byte `json:"credential_id"`
	Alg          int    `json:"alg"`
	PublicKey    []byte `json:"public_key"`
	// COSEKey is the credential public key as the authenticator sent it,
	// which the desk's sign-in ceremonies check assertions against, and
	// BackupEligible the flag it was enrolled with, which they compare.
	COSEKey        []byte    `json:"cose_key"`
	BackupEligible bool      `json:"backup_eligible,omitempty"`
	RPID           string    `json:"rp_id"`
	Origin         string    `json:"origin"`
	Created        time.Time `json:"created"`
}

const (
	passkeyKind  = "passkey"
	passkeyMajor = 1
)

// PasskeyPath is keys/NAME.passkey in home.
func PasskeyPath(h, name string) string { return filepath.Join(Dir(h), name+".passkey") }

// PasskeyFingerprint names a passkey: "webauthn:" and the first 16 bytes
// of its credential id's sha256, in hex.
func PasskeyFingerprint(credentialID []byte) string {
	s := sha256.Sum256(credentialID)
	return "webauthn:" + hex.EncodeToString(s[:16])
}

// Fingerprint names p.
func (p *Passkey) Fingerprint() string { return PasskeyFingerprint(p.CredentialID) }

// CheckName refuses a name no key or passkey may have.
func CheckName(name string) error { return checkName(name) }

// ErrNoPasskey is a passkey asked for by a name keys/ does not hold.
var ErrNoPasskey = errors.New("no such passkey")

func (p *Passkey) check() error {
	switch {
	case len(p.CredentialID) == 0:
		return errors.New("no credential id")
	case p.RPID == "" || p.Origin == "":
		return errors.New("no relying party id or origin")
	case p.Alg == AlgES256:
		if _, err := ecdsa.ParseUncompressedPublicKey(elliptic.P256(), p.PublicKey); err != nil {
			return fmt.Errorf("ES256 public key: %w", err)
		}
	case p.Alg == AlgEdDSA:
		if len(p.PublicKey) != ed25519.PublicKeySize {
			return errors.New("EdDSA public key is not 32 bytes")
		}
	default:
		return fmt.Errorf("unsupported COSE algorithm %d (want %d ES256 or %d EdDSA)", p.Alg, AlgES256, AlgEdDSA)
	}
	return nil
}

// AddPasskey makes home trust p: it writes keys/NAME.passkey, never
// replacing a key or passkey of that name.
func AddPasskey(home string, p *Passkey) error {
	if err := checkName(p.Name); err != nil {
		return err
	}
	if err := p.check(); err != nil {
		return fmt.Errorf("passkey %s: %w", p.Name, err)
	}
	unlock, err := lockKeys(home)
	if err != nil {
		return err
	}
	defer unlock()
	for _, q := range []string{PasskeyPath(home, p.Name), PubPath(home, p.Name)} {
		if exists(q) {
			return fmt.Errorf("%s: %w; refusing to replace it", q, ErrExists)
		}
	}
	p.Schema = store.Schema(passkeyKind, passkeyMajor)
	b, err := store.Encode(p)
	if err != nil {
		return err
	}
	return store.WriteMode(PasskeyPath(home, p.Name), b, 0o600)
}

// RemovePasskey stops home trusting passkey NAME: approvals it made no
// longer verify, and the desk ends its sessions.
func RemovePasskey(home, name string) error {
	if err := checkName(name); err != nil {
		return err
	}
	unlock, err := lockKeys(home)
	if err != nil {
		return err
	}
	defer unlock()
	p := PasskeyPath(home, name)
	if err := os.Remove(p); errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("%s: %w", p, ErrNoPasskey)
	} else if err != nil {
		return err
	}
	return store.SyncDir(Dir(home))
}

func loadPasskey(p string) (*Trusted, error) {
	fi, err := os.Lstat(p)
	if err != nil {
		return nil, err
	}
	if !fi.Mode().IsRegular() || fi.Mode().Perm()&0o022 != 0 {
		return nil, fmt.Errorf("%s: mode %v lets others replace a trusted passkey; want a plain file, 0600", p, fi.Mode())
	}
	b, err := store.ReadFile(p)
	if err != nil {
		return nil, err
	}
	var pk Passkey
	if err := store.Decode(p, b, passkeyKind, passkeyMajor, &pk); err != nil {
		return nil, err
	}
	if err := pk.check(); err != nil {
		return nil, fmt.Errorf("%s: %w", p, err)
	}
	return &Trusted{Path: p, Fingerprint: pk.Fingerprint(), Kind: KindWebAuthn, Passkey: &pk}, nil
}

// Assertion is what a passkey's WebAuthn assertion leaves for an offline
// verifier: the authenticator data and client data it signed, and the
// signature.
type Assertion struct {
	CredentialID      []byte `json:"credential_id"`
	AuthenticatorData []byte `json:"authenticator_data"`
	ClientDataJSON    []byte `json:"client_data_json"`
	Signature         []byte `json:"signature"`
}

// Challenge is what a passkey approving s, for by at at, signs: the
// SHA-256 of the approval's Message, key being the passkey's fingerprint.
func Challenge(s Subject, by string, at time.Time, key string) []byte {
	h := sha256.Sum256(Message(s, by, at, key))
	return h[:]
}

// WebAuthnApproval is the approval of kind webauthn an assertion makes.
func WebAuthnApproval(by string, at time.Time, key string, a *Assertion) *Approval {
	return &Approval{Schema: Schema, Kind: KindWebAuthn, By: by, At: at, Key: key, WebAuthn: a}
}

// The authenticator data flags an approval needs (WebAuthn §6.1): the
// user was present and verified (PIN or biometrics).
const (
	flagUP = 0x01
	flagUV = 0x04
)

// verifyAssertion checks that a is p's signature, made in a WebAuthn get
// ceremony at p's origin and relying party with the user present and
// verified, over challenge.
func verifyAssertion(p *Passkey, challenge []byte, a *Assertion) error {
	if a == nil {
		return errors.New("no assertion")
	}
	if !bytes.Equal(a.CredentialID, p.CredentialID) {
		return errors.New("made by another credential")
	}
	var cd struct {
		Type      string `json:"type"`
		Challenge string `json:"challenge"`
		Origin    string `json:"origin"`
	}
	if err := json.Unmarshal(a.ClientDataJSON, &cd); err != nil {
		return fmt.Errorf("client data: %w", err)
	}
	if cd.Type != "webauthn.get" {
		return fmt.Errorf("client data type %q, not webauthn.get", cd.Type)
	}
	got, err := base64.RawURLEncoding.DecodeString(cd.Challenge)
	if err != nil || !bytes.Equal(got, challenge) {
		return errors.New("its challenge is not this approval's message hash")
	}
	if cd.Origin != p.Origin {
		return fmt.Errorf("made at origin %q, not %q", cd.Origin, p.Origin)
	}
	ad := a.AuthenticatorData
	if len(ad) < 37 {
		return errors.New("authenticator data too short")
	}
	if rp := sha256.Sum256([]byte(p.RPID)); !bytes.Equal(ad[:32], rp[:]) {
		return fmt.Errorf("rpIdHash is not relying party %q's", p.RPID)
	}
	if ad[32]&flagUP == 0 || ad[32]&flagUV == 0 {
		return errors.New("user not present and verified")
	}
	cdh := sha256.Sum256(a.ClientDataJSON)
	signed := append(bytes.Clone(ad), cdh[:]...)
	ok := false
	switch p.Alg {
	case AlgES256:
		pub, err := ecdsa.ParseUncompressedPublicKey(elliptic.P256(), p.PublicKey)
		if err != nil {
			return err
		}
		h := sha256.Sum256(signed)
		ok = ecdsa.VerifyASN1(pub, h[:], a.Signature)
	case AlgEdDSA:
		ok = len(p.PublicKey) == ed25519.PublicKeySize && ed25519.Verify(p.PublicKey, signed, a.Signature)
	}
	if !ok {
		return errors.New("signature does not verify under the passkey's public key")
	}
	return nil
}
