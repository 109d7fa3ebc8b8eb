package deskd

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/impyard/impyard/lib/approval"
	"github.com/impyard/impyard/lib/home"
	"github.com/impyard/impyard/lib/store"
)

// EnrollTTL is how long an enrollment URL registers a passkey.
const EnrollTTL = 10 * time.Minute

// ErrEnrollment is an enrollment token that is unknown, used or expired.
var ErrEnrollment = errors.New("enrollment link unknown, used or expired")

// enrollment is one pending enrollment, IMPYARD_HOME/desk/enroll/<sha256
// of the token>.json: the name its passkey gets and until when. Only
// the token's hash is kept, so reading the directory enrolls nothing.
type enrollment struct {
	Schema  string    `json:"schema"`
	Name    string    `json:"name"`
	Expires time.Time `json:"expires"`
}

const (
	enrollKind  = "enrollment"
	enrollMajor = 1
)

func enrollDir(h string) string { return filepath.Join(h, "desk", "enroll") }

func enrollPath(h, token string) string {
	s := sha256.Sum256([]byte(token))
	return filepath.Join(enrollDir(h), hex.EncodeToString(s[:])+".json")
}

// lockEnroll makes desk/enroll/ in h private and takes its lock.
func lockEnroll(h string) (func(), error) {
	d := home.Dir(h)
	if err := d.Private(filepath.Join(h, "desk")); err != nil {
		return nil, err
	}
	if err := d.Private(enrollDir(h)); err != nil {
		return nil, err
	}
	return store.Lock(filepath.Join(enrollDir(h), ".lock"))
}

// Enroll makes a one-time enrollment token for a passkey called name,
// valid EnrollTTL from now. A name a key or passkey of home already has
// is refused.
func Enroll(h, name string, now time.Time) (token string, expires time.Time, err error) {
	if err := approval.CheckName(name); err != nil {
		return "", time.Time{}, err
	}
	for _, p := range []string{approval.PasskeyPath(h, name), approval.PubPath(h, name)} {
		if _, err := os.Lstat(p); err == nil {
			return "", time.Time{}, fmt.Errorf("%s: %w; revoke it first or choose another name", p, approval.ErrExists)
		}
	}
	var b [32]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", time.Time{}, err
	}
	token = base64.RawURLEncoding.EncodeToString(b[:])
	unlock, err := lockEnroll(h)
	if err != nil {
		return "", time.Time{}, err
	}
	defer unlock()
	e := enrollment{Schema: store.Schema(enrollKind, enrollMajor), Name: name, Expires: now.Add(EnrollTTL).UTC()}
	out, err := store.Encode(e)
	if err != nil {
		return "", time.Time{}, err
	}
	if err := store.WriteMode(enrollPath(h, token), out, 0o600); err != nil {
		return "", time.Time{}, err
	}
	return token, e.Expires, nil
}

// pending returns the enrollment token names, if it is still valid at
// now; take also removes it, so it enrolls once.
func pending(h, token string, now time.Time, take bool) (*enrollment, error) {
	if len(token) != 43 {
		return nil, ErrEnrollment
	}
	if _, err := base64.RawURLEncoding.DecodeString(token); err != nil {
		return nil, ErrEnrollment
	}
	unlock, err := lockEnroll(h)
	if err != nil {
		return nil, err
	}
	defer unlock()
	p := enrollPath(h, token)
	b, err := store.ReadFile(p)
	if store.IsNotExist(err) {
		return nil, ErrEnrollment
	}
	if err != nil {
		return nil, err
	}
	var e enrollment
	if err := store.Decode(p, b, enrollKind, enrollMajor, &e); err != nil {
		return nil, err
	}
	if !now.Before(e.Expires) || take {
		if err := os.Remove(p); err != nil {
			return nil, err
		}
		if err := store.SyncDir(enrollDir(h)); err != nil {
			return nil, err
		}
	}
	if !now.Before(e.Expires) {
		return nil, fmt.Errorf("%w: expired at %s", ErrEnrollment, e.Expires.Format(time.RFC3339))
	}
	return &e, nil
}

// EnrollURL is the page of token on the desk at base.
func EnrollURL(base, token string) string {
	return strings.TrimSuffix(base, "/") + "/enroll/" + token
}
