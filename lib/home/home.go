// Package home knows where IMPYARD_HOME's files live: the gateway's CA,
// the approval keys, the bearer tokens, the secrets and the executor's
// replay marks. IMPYARD_HOME is never in the yard and never mounted into
// a box (except ca/ca.crt, copied in); every path into it is built here,
// so a reader of this file sees the whole tree.
package home

import (
	"fmt"
	"os"
	"path/filepath"

	"github.com/impyard/impyard/lib/store"
)

// Dir is an IMPYARD_HOME directory.
type Dir string

// Resolve is IMPYARD_HOME made absolute, or ~/.impyard when it is unset.
func Resolve() (Dir, error) {
	if h := os.Getenv("IMPYARD_HOME"); h != "" {
		abs, err := filepath.Abs(h)
		return Dir(abs), err
	}
	u, err := os.UserHomeDir()
	if err != nil {
		return "", fmt.Errorf("IMPYARD_HOME is not set and there is no home directory: %w", err)
	}
	return Dir(filepath.Join(u, ".impyard")), nil
}

func (h Dir) join(rel ...string) string {
	return filepath.Join(append([]string{string(h)}, rel...)...)
}

// Private creates IMPYARD_HOME (0700 if new) and dir, one of its
// directories (CA, Keys), and makes sure dir is a real directory only its
// owner can enter: a symlink there is refused, a looser mode tightened.
// Each directory it makes is synced into its parent, so what is written
// durably inside survives a power cut.
func (h Dir) Private(dir string) error {
	if err := h.make(); err != nil {
		return err
	}
	if _, err := store.Mkdir(dir, 0o700); err != nil {
		return err
	}
	fi, err := os.Lstat(dir)
	if err != nil {
		return err
	}
	if !fi.IsDir() {
		return fmt.Errorf("%s: not a directory (a symlink is not followed)", dir)
	}
	if fi.Mode().Perm() != 0o700 {
		return os.Chmod(dir, 0o700)
	}
	return nil
}

// make creates IMPYARD_HOME (0700) if it is missing, synced into its
// parent.
func (h Dir) make() error {
	if err := os.MkdirAll(filepath.Dir(string(h)), 0o700); err != nil {
		return err
	}
	_, err := store.Mkdir(string(h), 0o700)
	return err
}

// CA is ca/, the gateway's certificate authority (mode 0700).
func (h Dir) CA() string { return h.join("ca") }

// CAKey is ca/ca.key, the CA's private key (PEM, mode 0600).
func (h Dir) CAKey() string { return h.join("ca", "ca.key") }

// CACert is ca/ca.crt, the CA's certificate (PEM, mode 0644), the one
// file of IMPYARD_HOME a box is given.
func (h Dir) CACert() string { return h.join("ca", "ca.crt") }

// Keys is keys/, the approval signing keys.
func (h Dir) Keys() string { return h.join("keys") }

// Key is keys/NAME.key, a private approval key.
func (h Dir) Key(name string) string { return h.join("keys", name+".key") }

// Pub is keys/NAME.pub, the public half beside it.
func (h Dir) Pub(name string) string { return h.join("keys", name+".pub") }

// Tokens opens tokens/, the bearer tokens by sha256 and org.token,
// creating IMPYARD_HOME private (0700) if needed.
func (h Dir) Tokens() (*store.Dir, error) {
	if err := h.make(); err != nil {
		return nil, err
	}
	return store.OpenDir(string(h), "tokens")
}

// Sockets holds the gateway's unix socket for the owner's processes
// (lib/mcpcall): made with Private, so only the owner can reach it.
func (h Dir) Sockets() string { return h.join("sock") }

// GatewaySocket is impgw serve's socket in Sockets.
func (h Dir) GatewaySocket() string { return h.join("sock", "impgw") }

// Secrets is secrets/, one file per secret the gateway injects.
func (h Dir) Secrets() string { return h.join("secrets") }

// Secret is secrets/NAME. The caller checks that name is a plain name.
func (h Dir) Secret(name string) string { return h.join("secrets", name) }

// Executed is executed/GATE, the executor's mark that it took an
// approved gate to executing, so an approval is used once.
func (h Dir) Executed(gateID string) string { return h.join("executed", gateID) }
