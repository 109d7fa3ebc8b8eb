// Package ca is the gateway's certificate authority: one ECDSA P-256 CA
// kept in IMPYARD_HOME/ca, never in the yard, and the leaf certificates the
// gateway mints from it per host name on demand.
//
// Guarantees:
//   - The CA directory is 0700, ca.key is 0600 and ca.crt 0644, each written
//     by an atomic replace (temp file in the same directory, fsync, rename,
//     fsync the directory). Init never replaces an existing CA: it refuses
//     when either file is there, under the directory's lock.
//   - Load refuses a key that is a symlink, a hard link, readable by group or
//     others, or not the key of the certificate beside it, and a CA that is
//     not yet or no longer valid.
//   - The CA is a P-256 key with BasicConstraints CA:TRUE and pathlen 0, so
//     it can sign leaves and nothing that signs further.
//
// The key lives only in IMPYARD_HOME; only ca.crt is ever meant to be shown
// to a box.
package ca

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/hex"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"os"
	"path/filepath"
	"strings"
	"time"

	homedir "github.com/impyard/impyard/lib/home"
	"github.com/impyard/impyard/lib/store"
)

// Validity of a new CA.
const Lifetime = 10 * 365 * 24 * time.Hour

// Now is the clock, replaceable in tests.
var Now = time.Now

// CA is a loaded certificate authority.
type CA struct {
	Cert    *x509.Certificate
	CertPEM []byte
	Key     *ecdsa.PrivateKey
}

// Dir is IMPYARD_HOME/ca.
func Dir(h string) string { return homedir.Dir(h).CA() }

// KeyPath is IMPYARD_HOME/ca/ca.key.
func KeyPath(h string) string { return homedir.Dir(h).CAKey() }

// CertPath is IMPYARD_HOME/ca/ca.crt.
func CertPath(h string) string { return homedir.Dir(h).CACert() }

// ErrExists means Init found a CA (or half of one) already in place.
var ErrExists = errors.New("a CA already exists")

// Init creates a new CA in home and returns it. It never replaces an
// existing ca.key or ca.crt.
func Init(home string) (*CA, error) {
	dir := Dir(home)
	if err := homedir.Dir(home).Private(dir); err != nil {
		return nil, err
	}
	unlock, err := store.Lock(filepath.Join(dir, ".lock"))
	if err != nil {
		return nil, err
	}
	defer unlock()
	for _, p := range []string{KeyPath(home), CertPath(home)} {
		if _, err := os.Lstat(p); err == nil {
			return nil, fmt.Errorf("%s: %w; refusing to replace it", p, ErrExists)
		} else if !errors.Is(err, os.ErrNotExist) {
			return nil, err
		}
	}
	c, keyPEM, err := generate()
	if err != nil {
		return nil, err
	}
	// The key goes first: a crash between the two writes leaves a key with
	// no certificate, which Load refuses and Init will not paper over.
	if err := store.WriteMode(KeyPath(home), keyPEM, 0o600); err != nil {
		return nil, err
	}
	if err := store.WriteMode(CertPath(home), c.CertPEM, 0o644); err != nil {
		return nil, err
	}
	return c, nil
}

func generate() (*CA, []byte, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, err
	}
	serial, err := randomSerial()
	if err != nil {
		return nil, nil, err
	}
	now := Now()
	host, _ := os.Hostname()
	cn := "impyard gateway CA"
	if host != "" && len(cn)+len(host) < 60 {
		cn += " " + host
	}
	tmpl := &x509.Certificate{
		SerialNumber:          serial,
		Subject:               pkix.Name{CommonName: cn, Organization: []string{"impyard"}},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(Lifetime),
		IsCA:                  true,
		BasicConstraintsValid: true,
		MaxPathLen:            0,
		MaxPathLenZero:        true,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign | x509.KeyUsageDigitalSignature,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, nil, fmt.Errorf("create CA certificate: %w", err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, nil, err
	}
	pkcs8, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return nil, nil, err
	}
	keyPEM := pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: pkcs8})
	certPEM := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
	return &CA{Cert: cert, CertPEM: certPEM, Key: key}, keyPEM, nil
}

// Load reads the CA from home.
func Load(home string) (*CA, error) {
	kp, cp := KeyPath(home), CertPath(home)
	fi, err := os.Lstat(kp)
	if err != nil {
		return nil, err
	}
	if fi.Mode().Perm()&0o077 != 0 {
		return nil, fmt.Errorf("%s: mode %04o lets others read the CA key; want 0600", kp, fi.Mode().Perm())
	}
	keyPEM, err := store.ReadFile(kp)
	if err != nil {
		return nil, err
	}
	certPEM, err := store.ReadFile(cp)
	if err != nil {
		return nil, err
	}
	key, err := parseKey(kp, keyPEM)
	if err != nil {
		return nil, err
	}
	cert, err := parseCert(cp, certPEM)
	if err != nil {
		return nil, err
	}
	if !key.PublicKey.Equal(cert.PublicKey) {
		return nil, fmt.Errorf("%s is not the key of %s", kp, cp)
	}
	now := Now()
	if now.Before(cert.NotBefore) || now.After(cert.NotAfter) {
		return nil, fmt.Errorf("%s: valid only from %s to %s", cp, cert.NotBefore.Format(time.RFC3339), cert.NotAfter.Format(time.RFC3339))
	}
	return &CA{Cert: cert, CertPEM: certPEM, Key: key}, nil
}

func parseKey(path string, data []byte) (*ecdsa.PrivateKey, error) {
	b, rest := pem.Decode(data)
	if b == nil || b.Type != "PRIVATE KEY" || len(bytes.TrimSpace(rest)) != 0 {
		return nil, fmt.Errorf("%s: want exactly one PEM \"PRIVATE KEY\" block", path)
	}
	k, err := x509.ParsePKCS8PrivateKey(b.Bytes)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	ek, ok := k.(*ecdsa.PrivateKey)
	if !ok || ek.Curve != elliptic.P256() {
		return nil, fmt.Errorf("%s: not an ECDSA P-256 key", path)
	}
	return ek, nil
}

func parseCert(path string, data []byte) (*x509.Certificate, error) {
	b, rest := pem.Decode(data)
	if b == nil || b.Type != "CERTIFICATE" || len(bytes.TrimSpace(rest)) != 0 {
		return nil, fmt.Errorf("%s: want exactly one PEM \"CERTIFICATE\" block", path)
	}
	c, err := x509.ParseCertificate(b.Bytes)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if !c.IsCA || !c.BasicConstraintsValid {
		return nil, fmt.Errorf("%s: not a CA certificate", path)
	}
	return c, nil
}

// Fingerprint is the SHA-256 of the CA certificate, colon-separated upper
// case hex as openssl prints it.
func (c *CA) Fingerprint() string {
	sum := sha256.Sum256(c.Cert.Raw)
	h := strings.ToUpper(hex.EncodeToString(sum[:]))
	var b strings.Builder
	for i := 0; i < len(h); i += 2 {
		if i > 0 {
			b.WriteByte(':')
		}
		b.WriteString(h[i : i+2])
	}
	return b.String()
}

// randomSerial is 127 random bits, never zero (RFC 5280 wants a positive
// serial of at most 20 octets).
func randomSerial() (*big.Int, error) {
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		return nil, err
	}
	return n.Add(n, big.NewInt(1)), nil
}
