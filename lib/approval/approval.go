// Package approval signs and verifies the approvals of gates with Ed25519
// keys kept in IMPYARD_HOME/keys/, never in the yard and never in a box.
//
// Guarantees:
//   - An approval (schema impyard.approval/2) is a signature over one
//     canonical, domain-separated message of every field of the gate that
//     decides what is executed, where and for whom (Subject): the gate id,
//     the imp, the intent (which chooses the executor), the task, the run
//     (whose worktree a push reads), when, by whom and through which
//     program the gate was filed, the payload's sha256, the state
//     "approved", the decider, the time, the signing key's fingerprint and
//     the sha256 of the trust verdict recorded at filing, which for an
//     auto-approval holds the trust entry that applied, whole, and the
//     deadline set at filing when the gate has one. Changing any
//     of them, or moving the signature to another gate, breaks it.
//   - An impyard.approval/1 approval (over id, sha256, decider, time and
//     key only) no longer verifies: Verify refuses it with ErrOutdated,
//     which wraps ErrUnsigned, so it is treated as a gate approved without
//     a signature and the owner approves it again.
//   - Verify accepts only a signature by a public key in IMPYARD_HOME/keys/
//     (*.pub). Writing to the yard alone therefore cannot approve anything,
//     nor point an approval at another imp, executor, task or run: that
//     takes a private key from IMPYARD_HOME/keys/.
//   - An approval of kind webauthn is a passkey's WebAuthn assertion
//     (keys/NAME.passkey) whose challenge is the SHA-256 of that same
//     message; it verifies only with type webauthn.get, the origin and
//     relying party recorded at enrollment, and the user present and
//     verified.
//   - keys/ is 0700; a private key is 0600 and Load refuses one that is a
//     symlink, a hard link or readable by anyone else; a public key that
//     others may write is refused, since adding one grants the power to
//     approve. Create never replaces a key.
//
// What it rests on: whoever can read a private key in IMPYARD_HOME/keys/
// can approve; whoever can write IMPYARD_HOME/keys/ can add a key that
// approves. The owner's key ("owner") is used by impgate, the gateway's
// ("gateway") by impgw for trust auto-approvals. What the fields outside
// the message (the rationale, the result, the timeline after the
// approval) say is not vouched for by any signature.
package approval

import (
	"bytes"
	"crypto/ed25519"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/impyard/impyard/lib/home"
	"github.com/impyard/impyard/lib/store"
)

// The two keys impyard creates.
const (
	Owner   = "owner"   // impgate approve
	Gateway = "gateway" // impgw's trust auto-approvals
)

// Schema is the approval schema signed and verified: it is the domain
// that separates an approval's signature from any other use of the key,
// and it is written in every approval.
const Schema = "impyard.approval/2"

// approvedState is the state every approval attests.
const approvedState = "approved"

// ErrInvalid is an approval that does not verify. Every verification
// failure wraps it, so its text leads every reason.
var ErrInvalid = errors.New("approval signature does not verify")

// ErrUnsigned is a gate approved without a signature: approved before
// approvals were signed, or written into the yard by hand. It wraps
// ErrInvalid without fmt.Errorf, which at package init was fmt's first
// use in every process linking this package, each impq add among them.
var ErrUnsigned error = &wrapped{msg: ErrInvalid.Error() + ": no signed approval", err: ErrInvalid}

// ErrOutdated is an approval of an older schema (impyard.approval/1, which
// left the imp, intent, task and trust verdict outside the signature). It
// wraps ErrUnsigned: such a gate is approved again, as an unsigned one is.
var ErrOutdated error = &wrapped{msg: ErrUnsigned.Error() + " of the current schema " + Schema, err: ErrUnsigned}

// wrapped is an error with its own text that wraps err.
type wrapped struct {
	msg string
	err error
}

func (w *wrapped) Error() string { return w.msg }
func (w *wrapped) Unwrap() error { return w.err }

// ErrExists means Create found the key already there.
var ErrExists = errors.New("key already exists")

// Approval is the signed approval kept in a gate.
type Approval struct {
	// Schema is Schema; an approval without one is impyard.approval/1.
	Schema string    `json:"schema,omitempty"`
	By     string    `json:"by"`
	At     time.Time `json:"at"`
	Key    string    `json:"key"` // the signing key's fingerprint
	Sig    string    `json:"sig"` // base64 Ed25519 signature of Message
	// Kind is "" for an Ed25519 signature, KindWebAuthn for a passkey's
	// assertion, kept in WebAuthn; Sig is then empty.
	Kind     string     `json:"kind,omitempty"`
	WebAuthn *Assertion `json:"webauthn,omitempty"`
}

// Current reports whether a is of the schema Verify checks.
func (a *Approval) Current() bool { return a != nil && a.Schema == Schema }

// Subject is what an approval approves: every field of a gate that
// decides what is executed, where and for whom.
type Subject struct {
	Gate   string    // the gate id: the executor's idempotency key
	Imp    string    // for whom: memory.md, imp.toml, refs/heads/imp/<imp>/, the ledger
	Intent string    // what: the executor is chosen by it
	Task   string    // the task it answers, continued and charged with it
	Run    string    // the run whose worktree a push reads
	Filed  time.Time // when it was filed: earned trust counts from it
	Filer  string    // who filed it: the imp for a proposal
	Via    string    // the program that filed it: impgw for a proposal
	SHA256 string    // the payload's canonical bytes
	Trust  string    // sha256 of the trust verdict recorded at filing, or ""
	// Expires is the deadline set at filing, zero when the gate has none
	// of its own: impexec refuses an approval signed at or after it.
	Expires time.Time
}

// Message is the exact byte string an approval of s signs: a JSON array
// of the schema and the fields, which cannot be read two ways. A gate's
// own deadline is one more element, only when it has one, so the
// approvals of gates without one read as they always did.
func Message(s Subject, by string, at time.Time, key string) []byte {
	fields := []string{Schema, s.Gate, s.Imp, s.Intent, s.Task, s.Run, stamp(s.Filed), s.Filer, s.Via,
		s.SHA256, approvedState, by, stamp(at), key, s.Trust}
	if !s.Expires.IsZero() {
		fields = append(fields, stamp(s.Expires))
	}
	b, _ := json.Marshal(fields)
	return b
}

// Digest names s whole, without a decider, time or key: the sha256, in
// hex, of its Message for nobody. A page that shows a gate carries it, so
// the approval asked from that page is of the very gate shown.
func (s Subject) Digest() string {
	h := sha256.Sum256(Message(s, "", time.Time{}, ""))
	return hex.EncodeToString(h[:])
}

func stamp(t time.Time) string { return t.UTC().Format(time.RFC3339Nano) }

// Fingerprint names a public key: "ed25519:" and the first 16 bytes of
// its sha256, in hex.
func Fingerprint(pub ed25519.PublicKey) string {
	s := sha256.Sum256(pub)
	return "ed25519:" + hex.EncodeToString(s[:16])
}

// Key is a private signing key.
type Key struct {
	Name string
	Path string
	priv ed25519.PrivateKey
}

// Fingerprint names the key's public half.
func (k *Key) Fingerprint() string { return Fingerprint(k.priv.Public().(ed25519.PublicKey)) }

// Sign approves s for by at at.
func (k *Key) Sign(s Subject, by string, at time.Time) *Approval {
	fp := k.Fingerprint()
	sig := ed25519.Sign(k.priv, Message(s, by, at, fp))
	return &Approval{Schema: Schema, By: by, At: at, Key: fp, Sig: base64.StdEncoding.EncodeToString(sig)}
}

// Generate makes a key held only in memory; Create writes one.
func Generate(name string) (*Key, error) {
	_, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		return nil, err
	}
	return &Key{Name: name, priv: priv}, nil
}

// Dir is IMPYARD_HOME/keys.
func Dir(h string) string { return home.Dir(h).Keys() }

// KeyPath is the private key name in home: keys/NAME.key.
func KeyPath(h, name string) string { return home.Dir(h).Key(name) }

// PubPath is the public key beside it: keys/NAME.pub.
func PubPath(h, name string) string { return home.Dir(h).Pub(name) }

func checkName(name string) error {
	if name == "" || strings.ContainsAny(name, "/\\.\x00") || len(name) > 64 {
		return fmt.Errorf("invalid key name %q", name)
	}
	return nil
}

// Create makes a new key NAME in home and returns it; it never replaces
// one. The public key is written beside it, so verifiers trust it.
func Create(home, name string) (*Key, error) {
	if err := checkName(name); err != nil {
		return nil, err
	}
	unlock, err := lockKeys(home)
	if err != nil {
		return nil, err
	}
	defer unlock()
	return create(home, name)
}

// create writes a new key; the caller holds keys/.lock.
func create(home, name string) (*Key, error) {
	for _, p := range []string{KeyPath(home, name), PubPath(home, name)} {
		if _, err := os.Lstat(p); err == nil {
			return nil, fmt.Errorf("%s: %w; refusing to replace it", p, ErrExists)
		} else if !errors.Is(err, os.ErrNotExist) {
			return nil, err
		}
	}
	k, err := Generate(name)
	if err != nil {
		return nil, err
	}
	k.Path = KeyPath(home, name)
	pkcs8 := marshalPKCS8(k.priv)
	// The private key goes first: a crash between the writes leaves a key
	// nobody trusts yet, never a trusted public key without its private half.
	if err := store.WriteMode(k.Path, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: pkcs8}), 0o600); err != nil {
		return nil, err
	}
	if err := writePublic(home, k); err != nil {
		return nil, err
	}
	return k, nil
}

// WritePublic makes home trust k: it writes keys/NAME.pub for k's name,
// never replacing one. This is how a key made elsewhere (Generate) is
// trusted, in tests or for a second approver.
func WritePublic(home string, k *Key) error {
	if err := checkName(k.Name); err != nil {
		return err
	}
	unlock, err := lockKeys(home)
	if err != nil {
		return err
	}
	defer unlock()
	if _, err := os.Lstat(PubPath(home, k.Name)); err == nil {
		return fmt.Errorf("%s: %w; refusing to replace it", PubPath(home, k.Name), ErrExists)
	}
	return writePublic(home, k)
}

func writePublic(home string, k *Key) error {
	pkix := marshalPKIX(k.priv.Public().(ed25519.PublicKey))
	return store.WriteMode(PubPath(home, k.Name), pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: pkix}), 0o644)
}

// Ensure loads key NAME from home, creating it on first use with a notice
// on notice ("PROG: created NAME signing key PATH").
func Ensure(home, name string, notice io.Writer, prog string) (*Key, error) {
	if err := checkName(name); err != nil {
		return nil, err
	}
	k, err := Load(home, name)
	if err == nil && exists(PubPath(home, name)) || err != nil && !errors.Is(err, os.ErrNotExist) {
		return k, err
	}
	unlock, err := lockKeys(home)
	if err != nil {
		return nil, err
	}
	defer unlock()
	// Another process may have created it while we waited for the lock.
	// One that died between the private key and its public half left a
	// key nothing would verify: its approvals would never execute, so the
	// public half is written now.
	if k, err := Load(home, name); !errors.Is(err, os.ErrNotExist) {
		if err == nil && !exists(PubPath(home, name)) {
			err = writePublic(home, k)
		}
		if err != nil {
			return nil, err
		}
		return k, nil
	}
	if k, err = create(home, name); err != nil {
		return nil, err
	}
	fmt.Fprintf(notice, "%s: created %s signing key %s\n", prog, name, k.Path)
	return k, nil
}

// exists reports whether p names anything, not following a symlink.
func exists(p string) bool {
	_, err := os.Lstat(p)
	return err == nil
}

// lockKeys makes keys/ in h private and takes its lock, so a key and its
// public half are written together.
func lockKeys(h string) (func(), error) {
	dir := Dir(h)
	if err := home.Dir(h).Private(dir); err != nil {
		return nil, err
	}
	return store.Lock(filepath.Join(dir, ".lock"))
}

// Load reads key NAME from home. A missing key is an error for which
// errors.Is(err, os.ErrNotExist) holds.
func Load(home, name string) (*Key, error) {
	if err := checkName(name); err != nil {
		return nil, err
	}
	p := KeyPath(home, name)
	fi, err := os.Lstat(p)
	if err != nil {
		return nil, err
	}
	if fi.Mode().Perm()&0o077 != 0 {
		return nil, fmt.Errorf("%s: mode %04o lets others read the signing key; want 0600", p, fi.Mode().Perm())
	}
	b, err := store.ReadFile(p)
	if err != nil {
		return nil, err
	}
	blk, rest := pem.Decode(b)
	if blk == nil || blk.Type != "PRIVATE KEY" || len(bytes.TrimSpace(rest)) != 0 {
		return nil, fmt.Errorf("%s: want exactly one PEM \"PRIVATE KEY\" block", p)
	}
	priv, err := parsePKCS8(blk.Bytes)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", p, err)
	}
	return &Key{Name: name, Path: p, priv: priv}, nil
}

// Trusted is one public key a verifier accepts.
type Trusted struct {
	Name        string `json:"name"`
	Path        string `json:"path"`
	Fingerprint string `json:"fingerprint"`
	// Kind is "ed25519" or "webauthn" (a passkey, whose record is Passkey).
	Kind    string   `json:"kind"`
	Passkey *Passkey `json:"-"`
	pub     ed25519.PublicKey
}

// Keyring is the set of public keys in IMPYARD_HOME/keys/.
type Keyring struct {
	Dir  string
	Keys []*Trusted
}

// ErrNoKeys means keys/ holds no public key at all: most likely the
// verifier looks at the wrong IMPYARD_HOME, so callers wait rather than
// judge.
var ErrNoKeys = errors.New("no public keys to verify approvals with")

// LoadKeyring reads every keys/*.pub in home. A directory or public key
// that others may write is refused as a whole.
func LoadKeyring(home string) (*Keyring, error) {
	dir := Dir(home)
	kr := &Keyring{Dir: dir}
	fi, err := os.Lstat(dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("%s: %w (is IMPYARD_HOME right?)", dir, ErrNoKeys)
	}
	if err != nil {
		return nil, err
	}
	if !fi.IsDir() {
		return nil, fmt.Errorf("%s: not a directory (a symlink is not followed)", dir)
	}
	if fi.Mode().Perm()&0o022 != 0 {
		return nil, fmt.Errorf("%s: mode %04o lets others add keys; want 0700", dir, fi.Mode().Perm())
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	for _, e := range entries {
		load := loadPub
		name, ok := strings.CutSuffix(e.Name(), ".pub")
		if !ok {
			name, ok = strings.CutSuffix(e.Name(), ".passkey")
			load = loadPasskey
		}
		if !ok || strings.HasPrefix(name, ".") || name == "" {
			continue
		}
		p := filepath.Join(dir, e.Name())
		t, err := load(p)
		if err != nil {
			return nil, err
		}
		t.Name = name
		kr.Keys = append(kr.Keys, t)
	}
	if len(kr.Keys) == 0 {
		return nil, fmt.Errorf("%s: %w (is IMPYARD_HOME right?)", dir, ErrNoKeys)
	}
	sort.Slice(kr.Keys, func(i, j int) bool { return kr.Keys[i].Name < kr.Keys[j].Name })
	return kr, nil
}

func loadPub(p string) (*Trusted, error) {
	fi, err := os.Lstat(p)
	if err != nil {
		return nil, err
	}
	if fi.Mode().Perm()&0o022 != 0 {
		return nil, fmt.Errorf("%s: mode %04o lets others replace a trusted key; want 0644", p, fi.Mode().Perm())
	}
	b, err := store.ReadFile(p)
	if err != nil {
		return nil, err
	}
	blk, rest := pem.Decode(b)
	if blk == nil || blk.Type != "PUBLIC KEY" || len(bytes.TrimSpace(rest)) != 0 {
		return nil, fmt.Errorf("%s: want exactly one PEM \"PUBLIC KEY\" block", p)
	}
	pub, err := parsePKIX(blk.Bytes)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", p, err)
	}
	return &Trusted{Path: p, Fingerprint: Fingerprint(pub), Kind: "ed25519", pub: pub}, nil
}

// Verify checks that a approves s and was made by a key of the ring, and
// returns that key. Every error wraps ErrInvalid; an approval of another
// schema wraps ErrOutdated as well.
func (kr *Keyring) Verify(s Subject, a *Approval) (*Trusted, error) {
	if a == nil {
		return nil, fmt.Errorf("%w on gate %s", ErrUnsigned, s.Gate)
	}
	if !a.Current() {
		schema := a.Schema
		if schema == "" {
			schema = "impyard.approval/1"
		}
		return nil, fmt.Errorf("%w on gate %s: its approval is %s, which does not cover the gate's imp, intent, task, run or trust verdict",
			ErrOutdated, s.Gate, schema)
	}
	var key *Trusted
	for _, t := range kr.Keys {
		if t.Fingerprint == a.Key {
			key = t
		}
	}
	if key == nil {
		return nil, fmt.Errorf("%w: gate %s was signed by key %q, which is not in %s", ErrInvalid, s.Gate, a.Key, kr.Dir)
	}
	if a.Kind == KindWebAuthn || key.Passkey != nil {
		if a.Kind != KindWebAuthn || key.Passkey == nil {
			return nil, fmt.Errorf("%w: gate %s: an approval of kind %q names key %s (%s), which is of another kind", ErrInvalid, s.Gate, a.Kind, key.Name, key.Path)
		}
		if err := verifyAssertion(key.Passkey, Challenge(s, a.By, a.At, a.Key), a.WebAuthn); err != nil {
			return nil, fmt.Errorf("%w: gate %s: the passkey assertion by %s (%s) is not an approval of this gate id, payload sha256 %s, imp %s, intent %s, task %q, run %q, decider %q and time %s: %w",
				ErrInvalid, s.Gate, key.Name, key.Path, s.SHA256, s.Imp, s.Intent, s.Task, s.Run, a.By, stamp(a.At), err)
		}
		return key, nil
	}
	if a.Kind != "" {
		return nil, fmt.Errorf("%w: gate %s: unknown approval kind %q", ErrInvalid, s.Gate, a.Kind)
	}
	sig, err := base64.StdEncoding.DecodeString(a.Sig)
	if err != nil || !ed25519.Verify(key.pub, Message(s, a.By, a.At, a.Key), sig) {
		return nil, fmt.Errorf("%w: gate %s: the signature by %s (%s) is not over this gate id, payload sha256 %s, imp %s, intent %s, task %q, run %q, filing (%s by %q via %q), trust verdict sha256 %q, decider %q and time %s",
			ErrInvalid, s.Gate, key.Name, key.Path, s.SHA256, s.Imp, s.Intent, s.Task, s.Run, stamp(s.Filed), s.Filer, s.Via, s.Trust, a.By, stamp(a.At))
	}
	return key, nil
}
