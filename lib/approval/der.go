package approval

import (
	"bytes"
	"crypto/ed25519"
	"errors"
)

// The DER forms of an Ed25519 key (RFC 8410): fixed prefixes before the
// 32 key bytes. Spelled out rather than taken from crypto/x509, which
// links package net and with it the C resolver and the dynamic loader
// into every command that reads a key, impq among them, each of whose
// short lives then pays for loading them.
var (
	// PrivateKeyInfo: version 0, algorithm id-Ed25519, the seed as an
	// OCTET STRING inside the privateKey OCTET STRING.
	pkcs8Prefix = []byte{0x30, 0x2e, 0x02, 0x01, 0x00, 0x30, 0x05, 0x06, 0x03, 0x2b, 0x65, 0x70, 0x04, 0x22, 0x04, 0x20}
	// SubjectPublicKeyInfo: algorithm id-Ed25519, the key as a BIT STRING.
	pkixPrefix = []byte{0x30, 0x2a, 0x30, 0x05, 0x06, 0x03, 0x2b, 0x65, 0x70, 0x03, 0x21, 0x00}
)

var (
	errNotEd25519    = errors.New("not an Ed25519 key (want PKCS #8 id-Ed25519, as openssl genpkey -algorithm ed25519 writes)")
	errNotEd25519Pub = errors.New("not an Ed25519 public key (want SubjectPublicKeyInfo id-Ed25519)")
)

func marshalPKCS8(priv ed25519.PrivateKey) []byte {
	return append(bytes.Clone(pkcs8Prefix), priv.Seed()...)
}

func parsePKCS8(der []byte) (ed25519.PrivateKey, error) {
	seed, ok := bytes.CutPrefix(der, pkcs8Prefix)
	if !ok || len(seed) != ed25519.SeedSize {
		return nil, errNotEd25519
	}
	return ed25519.NewKeyFromSeed(seed), nil
}

func marshalPKIX(pub ed25519.PublicKey) []byte {
	return append(bytes.Clone(pkixPrefix), pub...)
}

func parsePKIX(der []byte) (ed25519.PublicKey, error) {
	key, ok := bytes.CutPrefix(der, pkixPrefix)
	if !ok || len(key) != ed25519.PublicKeySize {
		return nil, errNotEd25519Pub
	}
	return ed25519.PublicKey(bytes.Clone(key)), nil
}
