// Package deskd is the desk on the owner's phone: a small server-rendered
// web application (impgate serve) that lists pending gates, shows each
// as impgate show does (through lib/desk), and decides them.
//
// Guarantees:
//   - Nothing about a gate is served without a session, and a session is
//     had only by a WebAuthn assertion, over a random challenge, of a
//     passkey in IMPYARD_HOME/keys/ (approval.Passkey). A session is a
//     cookie (HttpOnly, SameSite=Strict, Secure under TLS) that lasts
//     SessionTTL and ends as soon as its passkey is revoked.
//   - Every state change is a POST whose Origin header is the configured
//     origin; any other is refused before it is read.
//   - An approval is not the session's: it is a fresh assertion of the
//     session's passkey whose challenge is the SHA-256 of the gate's
//     approval message (approval.Challenge) for the payload sha256 the
//     page showed, recorded as an approval of kind webauthn that impexec
//     verifies offline. A stolen session can deny, never approve.
//   - Every byte a box or a yard writer chose is rendered as escaped
//     text under a Content-Security-Policy that runs only the desk's own
//     script file: no inline script, no third-party asset.
//
// What it rests on: the passkeys in IMPYARD_HOME/keys/ (whoever can
// write there can enroll one), the browser enforcing the origin it puts
// in a WebAuthn assertion, and TLS (or loopback) between browser and
// desk.
package deskd

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"net/http"
	"sync"
	"time"

	"github.com/go-webauthn/webauthn/webauthn"

	"github.com/impyard/impyard/lib/approval"
	"github.com/impyard/impyard/lib/yard"
)

// SessionTTL is how long a sign-in lasts.
const SessionTTL = 15 * time.Minute

// ceremonyTTL bounds a WebAuthn ceremony from options to answer.
const ceremonyTTL = 2 * time.Minute

// Cookie names.
const (
	sessionCookie  = "desk_session"
	ceremonyCookie = "desk_ceremony"
)

// Config is what a desk serves.
type Config struct {
	Yard *yard.Yard
	Home string // IMPYARD_HOME: keys/ and desk/enroll/
	// Origin is the WebAuthn origin (scheme://host[:port]) and RPID its
	// host, the relying party id every passkey is bound to.
	Origin string
	RPID   string
	// Secure marks cookies Secure: the desk serves HTTPS.
	Secure bool
	// Now is the clock; nil is time.Now.
	Now  func() time.Time
	Logf func(format string, a ...any)
}

// Server is a desk.
type Server struct {
	cfg Config
	wa  *webauthn.WebAuthn

	mu         sync.Mutex
	sessions   map[string]*session  // by sha256 of the cookie
	ceremonies map[string]*ceremony // by sha256 of the ceremony cookie
}

type session struct {
	name, key string // the passkey's name and fingerprint
	expires   time.Time
}

// ceremony is a WebAuthn ceremony begun: its session data, and for an
// approval what the challenge commits to.
type ceremony struct {
	kind    string // "login", "enroll:<token>", "approve:<gate>"
	data    webauthn.SessionData
	expires time.Time
	// For an approval: the message signed is the gate's, for by at at
	// with key, for the payload sha256 shown.
	by, key, sha string
	at           time.Time
}

// New makes a desk.
func New(cfg Config) (*Server, error) {
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Logf == nil {
		cfg.Logf = func(string, ...any) {}
	}
	wa, err := webauthn.New(&webauthn.Config{
		RPID:          cfg.RPID,
		RPDisplayName: "impyard desk",
		RPOrigins:     []string{cfg.Origin},
	})
	if err != nil {
		return nil, err
	}
	return &Server{cfg: cfg, wa: wa, sessions: map[string]*session{}, ceremonies: map[string]*ceremony{}}, nil
}

// owner is the one WebAuthn user of a desk: the yard's owner, holding
// every enrolled passkey.
type owner struct{ creds []webauthn.Credential }

func (owner) WebAuthnID() []byte                           { return []byte("impyard-owner") }
func (owner) WebAuthnName() string                         { return "owner" }
func (owner) WebAuthnDisplayName() string                  { return "impyard owner" }
func (o owner) WebAuthnCredentials() []webauthn.Credential { return o.creds }

// passkeys loads the enrolled passkeys, as the desk's user and by
// credential id.
func (s *Server) passkeys() (owner, map[string]*approval.Trusted, error) {
	kr, err := approval.LoadKeyring(s.cfg.Home)
	if err != nil && !errors.Is(err, approval.ErrNoKeys) {
		return owner{}, nil, err
	}
	byID := map[string]*approval.Trusted{}
	var o owner
	if kr == nil {
		return o, byID, nil
	}
	for _, t := range kr.Keys {
		p := t.Passkey
		if p == nil || p.RPID != s.cfg.RPID || p.Origin != s.cfg.Origin {
			continue
		}
		byID[string(p.CredentialID)] = t
		o.creds = append(o.creds, webauthn.Credential{ID: p.CredentialID, PublicKey: p.COSEKey,
			Flags: webauthn.CredentialFlags{UserPresent: true, UserVerified: true, BackupEligible: p.BackupEligible}})
	}
	return o, byID, nil
}

func token() string {
	var b [32]byte
	if _, err := rand.Read(b[:]); err != nil {
		panic(err) // crypto/rand does not fail on Linux
	}
	return base64.RawURLEncoding.EncodeToString(b[:])
}

func hashed(v string) string {
	s := sha256.Sum256([]byte(v))
	return hex.EncodeToString(s[:])
}

func (s *Server) cookie(name, value string, ttl time.Duration) *http.Cookie {
	return &http.Cookie{Name: name, Value: value, Path: "/", HttpOnly: true, Secure: s.cfg.Secure,
		SameSite: http.SameSiteStrictMode, MaxAge: int(ttl / time.Second)}
}

// session returns the request's session, once its passkey is still
// enrolled and it has not expired; any other is forgotten.
func (s *Server) session(r *http.Request) *session {
	c, err := r.Cookie(sessionCookie)
	if err != nil {
		return nil
	}
	k := hashed(c.Value)
	s.mu.Lock()
	ss := s.sessions[k]
	s.mu.Unlock()
	if ss == nil {
		return nil
	}
	_, byID, err := s.passkeys()
	alive := err == nil && s.cfg.Now().Before(ss.expires)
	if alive {
		alive = false
		for _, t := range byID {
			alive = alive || t.Fingerprint == ss.key
		}
	}
	if !alive {
		s.mu.Lock()
		delete(s.sessions, k)
		s.mu.Unlock()
		return nil
	}
	return ss
}

// MaxSignIns bounds the sign-ins under way at once. Anyone who reaches
// the desk can begin one, and each is kept for ceremonyTTL: without a
// bound a stranger's loop would grow the desk's memory, and the time each
// new ceremony takes, without end. Enrollments (which need a token) and
// approvals (which need a session) are not counted.
const MaxSignIns = 256

// ErrBusy is a sign-in begun while MaxSignIns others are under way.
var ErrBusy = errors.New("too many sign-ins under way; try again in a minute")

// begin keeps a ceremony for the browser that asked, under a fresh
// ceremony cookie; a sign-in past MaxSignIns is refused with ErrBusy and
// nothing kept.
func (s *Server) begin(w http.ResponseWriter, c *ceremony) error {
	t := token()
	c.expires = s.cfg.Now().Add(ceremonyTTL)
	s.mu.Lock()
	signIns := 0
	for k, old := range s.ceremonies {
		if !s.cfg.Now().Before(old.expires) {
			delete(s.ceremonies, k)
		} else if old.kind == "login" {
			signIns++
		}
	}
	if c.kind == "login" && signIns >= MaxSignIns {
		s.mu.Unlock()
		return ErrBusy
	}
	s.ceremonies[hashed(t)] = c
	s.mu.Unlock()
	http.SetCookie(w, s.cookie(ceremonyCookie, t, ceremonyTTL))
	return nil
}

// finish takes the request's ceremony of kind, once: a ceremony answers
// one assertion.
func (s *Server) finish(r *http.Request, kind string) *ceremony {
	ck, err := r.Cookie(ceremonyCookie)
	if err != nil {
		return nil
	}
	k := hashed(ck.Value)
	s.mu.Lock()
	defer s.mu.Unlock()
	c := s.ceremonies[k]
	delete(s.ceremonies, k)
	if c == nil || c.kind != kind || !s.cfg.Now().Before(c.expires) {
		return nil
	}
	return c
}

// ErrOrigin is a state change from another origin, or one that names none.
var ErrOrigin = errors.New("cross-origin request refused")

func (s *Server) sameOrigin(r *http.Request) bool {
	return r.Header.Get("Origin") == s.cfg.Origin
}
