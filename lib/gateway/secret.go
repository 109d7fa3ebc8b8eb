package gateway

import (
	"fmt"
	"strings"

	"github.com/impyard/impyard/lib/home"
	"github.com/impyard/impyard/lib/store"
)

// secretError is why a secret cannot be injected. Its text names the
// file, for the record and the log; a client is told only that the
// secret is not available.
type secretError struct {
	name string
	err  error
}

func (e *secretError) Error() string { return e.err.Error() }
func (e *secretError) Unwrap() error { return e.err }

// shown is what the client hears.
func (e *secretError) shown() string {
	return fmt.Sprintf("secret %q is not available to inject; the decision record says why", e.name)
}

// secret reads IMPYARD_HOME/secrets/<name> for injection. The error
// never holds any of the file's content.
func (g *Gateway) secret(name string) (string, *secretError) {
	v, err := g.readSecret(name)
	if err != nil {
		return "", &secretError{name: name, err: err}
	}
	return v, nil
}

func (g *Gateway) readSecret(name string) (string, error) {
	if g.cfg.Home == "" {
		return "", fmt.Errorf("secret %q: IMPYARD_HOME is not known", name)
	}
	if name == "" || strings.ContainsAny(name, `/\`) || strings.HasPrefix(name, ".") {
		return "", fmt.Errorf("secret %q: not a plain name", name)
	}
	b, err := store.ReadFile(home.Dir(g.cfg.Home).Secret(name))
	if err != nil {
		if store.IsNotExist(err) {
			return "", fmt.Errorf("secret %q is not in %s", name, home.Dir(g.cfg.Home).Secrets())
		}
		return "", fmt.Errorf("secret %q unreadable: %w", name, err)
	}
	v := strings.TrimRight(string(b), "\r\n")
	if v == "" {
		return "", fmt.Errorf("secret %q is empty", name)
	}
	for i := 0; i < len(v); i++ {
		if c := v[i]; c < 0x20 && c != '\t' || c == 0x7f {
			return "", fmt.Errorf("secret %q holds a control character; it cannot go in a header", name)
		}
	}
	return v, nil
}
