package inbound

import (
	"crypto/tls"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"time"
)

// certFiles serves the certificate in a pair of PEM files, read again
// when either file changes, so a renewal (certbot, acme.sh) takes effect
// at the next handshake without restarting impgw. A renewal that does not
// load keeps the last good pair and is logged once per change.
type certFiles struct {
	cert, key string
	who       string // the listener, in the log: "inbound relay"
	logf      func(format string, a ...any)

	mu      sync.Mutex
	certMod time.Time
	keyMod  time.Time
	current *tls.Certificate
	// told is the last error logged, so that a pair that stays broken
	// (a file removed mid-renewal) is logged once, not per handshake.
	told string
}

// tlsFiles resolves p against IMPYARD_HOME: the key is a secret, and
// IMPYARD_HOME is where the yard's secrets live.
func tlsFiles(home, cert, key string, logf func(format string, a ...any)) (*certFiles, error) {
	abs := func(p string) string {
		if filepath.IsAbs(p) {
			return p
		}
		return filepath.Join(home, p)
	}
	c := &certFiles{cert: abs(cert), key: abs(key), who: "inbound relay", logf: logf}
	if _, err := c.load(); err != nil {
		return nil, err
	}
	return c, nil
}

// load returns the pair, reading the files again when either changed.
func (c *certFiles) load() (*tls.Certificate, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	cm, err := mtime(c.cert)
	if err != nil {
		return c.current, err
	}
	km, err := mtime(c.key)
	if err != nil {
		return c.current, err
	}
	if c.current != nil && cm.Equal(c.certMod) && km.Equal(c.keyMod) {
		return c.current, nil
	}
	pair, err := tls.LoadX509KeyPair(c.cert, c.key)
	// Whatever the outcome, this change is judged once.
	c.certMod, c.keyMod = cm, km
	if err != nil {
		return c.current, fmt.Errorf("inbound tls: %s and %s: %w", c.cert, c.key, err)
	}
	c.current = &pair
	return c.current, nil
}

func mtime(p string) (time.Time, error) {
	fi, err := os.Stat(p)
	if err != nil {
		return time.Time{}, fmt.Errorf("inbound tls: %w", err)
	}
	return fi.ModTime(), nil
}

// get is the listener's GetCertificate.
func (c *certFiles) get(*tls.ClientHelloInfo) (*tls.Certificate, error) {
	pair, err := c.load()
	if err != nil && pair == nil {
		return nil, err
	}
	c.mu.Lock()
	say := err != nil && err.Error() != c.told
	if err != nil {
		c.told = err.Error()
	}
	c.mu.Unlock()
	if say {
		c.logf("%s: keeping the previous certificate: %v", c.who, err)
	}
	return pair, nil
}

func (c *certFiles) config() *tls.Config {
	return &tls.Config{GetCertificate: c.get, MinVersion: tls.VersionTLS12, NextProtos: []string{"http/1.1"}}
}

// TLSConfig serves the PEM pair cert and key (relative ones in
// IMPYARD_HOME home) for another listener, who (as "desk"), as the relay
// serves its own: read again on renewal, the last good pair kept.
func TLSConfig(home, cert, key, who string, logf func(format string, a ...any)) (*tls.Config, error) {
	c, err := tlsFiles(home, cert, key, logf)
	if err != nil {
		return nil, err
	}
	c.who = who
	return c.config(), nil
}
