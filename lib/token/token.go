// Package token maps bearer tokens to subjects. Each imp run gets a fresh
// random token; the trusted side records token => (imp, run, task) under
// IMPYARD_HOME/tokens/, never in the yard, keyed by the token's sha256 so
// the directory holds no usable token.
//
// The privileged subject "org", used by executors, has exactly one
// credential: the token in IMPYARD_HOME/tokens/org.token (0600), made by
// OrgToken on first use and read by the executors themselves. Issue never
// issues one and Lookup accepts no other token as org, not even a record
// that says "org" (such as one issued by hand before this rule), so no
// command prints a token that could be handed to a box.
package token

import (
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/impyard/impyard/lib/home"
	"github.com/impyard/impyard/lib/id"
	"github.com/impyard/impyard/lib/store"
)

// Org is the privileged subject of the trusted side's own requests.
const Org = "org"

const (
	kind   = "token"
	major  = 1
	prefix = "impyard_"
)

// ErrUnknown means the token is not (or no longer) issued.
var ErrUnknown = errors.New("unknown or revoked token")

// ErrReserved refuses to issue or revoke the org subject's credential.
var ErrReserved = errors.New("reserved for the trusted side: the executors' credential is never issued or printed")

// Subject is who a token speaks for.
type Subject struct {
	Schema  string    `json:"schema"`
	Subject string    `json:"subject"` // an imp name, or "org"
	Run     string    `json:"run,omitempty"`
	Task    string    `json:"task,omitempty"`
	Created time.Time `json:"created"`
}

// Imp is the imp the subject speaks for, or "" for org.
func (s *Subject) Imp() string {
	if s.Subject == Org {
		return ""
	}
	return s.Subject
}

// dir opens IMPYARD_HOME/tokens, creating IMPYARD_HOME private (0700).
func dir(h string) (*store.Dir, error) { return home.Dir(h).Tokens() }

func hashName(tok string) string {
	s := sha256.Sum256([]byte(tok))
	return hex.EncodeToString(s[:]) + ".json"
}

// Issue records a fresh token for subject, an imp, and returns it. Org is
// refused with ErrReserved: its token comes only from OrgToken.
func Issue(home, subject, run, task string) (string, error) {
	if subject == Org {
		return "", fmt.Errorf("subject %q: %w", subject, ErrReserved)
	}
	if err := id.CheckName(subject); err != nil {
		return "", err
	}
	if run != "" {
		if err := id.Check(id.Run, run); err != nil {
			return "", err
		}
	}
	if task != "" {
		if err := id.Check(id.Task, task); err != nil {
			return "", err
		}
	}
	d, err := dir(home)
	if err != nil {
		return "", err
	}
	var raw [32]byte
	if _, err := rand.Read(raw[:]); err != nil {
		return "", err
	}
	tok := prefix + hex.EncodeToString(raw[:])
	s := Subject{Schema: store.Schema(kind, major), Subject: subject, Run: run, Task: task, Created: store.Now()}
	b, err := store.Encode(s)
	if err != nil {
		return "", err
	}
	err = d.Update(func(tx *store.Tx) error { return tx.Write(hashName(tok), b) })
	return tok, err
}

// Lookup returns the subject of tok.
func Lookup(home, tok string) (*Subject, error) {
	if !strings.HasPrefix(tok, prefix) || len(tok) != len(prefix)+64 {
		return nil, ErrUnknown
	}
	if _, err := hex.DecodeString(tok[len(prefix):]); err != nil {
		return nil, ErrUnknown
	}
	d, err := dir(home)
	if err != nil {
		return nil, err
	}
	if isOrg(d, tok) {
		return &Subject{Schema: store.Schema(kind, major), Subject: Org}, nil
	}
	p := filepath.Join(d.Path(), hashName(tok))
	b, err := store.ReadFile(p)
	if errors.Is(err, os.ErrNotExist) {
		return nil, ErrUnknown
	}
	if err != nil {
		return nil, err
	}
	var s Subject
	if err := store.Decode(p, b, kind, major, &s); err != nil {
		return nil, err
	}
	if s.Subject == Org {
		// Only org.token speaks for org.
		return nil, ErrUnknown
	}
	return &s, nil
}

// isOrg reports whether tok is the one in org.token.
func isOrg(d *store.Dir, tok string) bool {
	b, err := store.ReadFile(filepath.Join(d.Path(), orgFile))
	if err != nil {
		return false
	}
	org := strings.TrimSpace(string(b))
	return len(org) == len(prefix)+64 && subtle.ConstantTimeCompare([]byte(org), []byte(tok)) == 1
}

const orgFile = "org.token"

// Revoke forgets tok.
func Revoke(home, tok string) error {
	s, err := Lookup(home, tok)
	if err != nil {
		return err
	}
	if s.Subject == Org {
		return fmt.Errorf("the org token: %w", ErrReserved)
	}
	d, err := dir(home)
	if err != nil {
		return err
	}
	return d.Update(func(tx *store.Tx) error { return tx.Remove(hashName(tok)) })
}

// OrgToken returns the org subject's token, making it on first use. It is
// kept in IMPYARD_HOME/tokens/org.token, mode 0600, and is the only token
// Lookup accepts as org. Only the executors call it, to present the token
// to the gateway; nothing prints it.
func OrgToken(home string) (string, error) {
	d, err := dir(home)
	if err != nil {
		return "", err
	}
	p := filepath.Join(d.Path(), orgFile)
	var tok string
	err = d.Update(func(tx *store.Tx) error {
		if b, err := store.ReadFile(p); err == nil {
			if t := strings.TrimSpace(string(b)); len(t) == len(prefix)+64 && strings.HasPrefix(t, prefix) {
				tok = t
				return nil
			}
		}
		var raw [32]byte
		if _, err := rand.Read(raw[:]); err != nil {
			return err
		}
		tok = prefix + hex.EncodeToString(raw[:])
		if err := tx.Write(orgFile, []byte(tok+"\n")); err != nil {
			return err
		}
		return os.Chmod(p, 0o600)
	})
	return tok, err
}

// Describe renders a subject for messages.
func (s *Subject) String() string {
	out := s.Subject
	if s.Run != "" {
		out += " run " + s.Run
	}
	if s.Task != "" {
		out += " task " + s.Task
	}
	return out
}

// ProxyLookup authenticates non-empty proxy credentials, "Basic
// base64(NAME:TOKEN)": the token decides the subject, and NAME must agree
// with it. It returns the subject and the whole record of the token.
func ProxyLookup(home, proxyAuthorization string) (string, *Subject, error) {
	enc, ok := strings.CutPrefix(proxyAuthorization, "Basic ")
	if !ok {
		return "", nil, errors.New("want Basic credentials NAME:TOKEN")
	}
	raw, err := base64.StdEncoding.DecodeString(strings.TrimSpace(enc))
	if err != nil {
		return "", nil, errors.New("credentials are not base64")
	}
	name, tok, ok := strings.Cut(string(raw), ":")
	if !ok {
		return "", nil, errors.New("want Basic credentials NAME:TOKEN")
	}
	s, err := Lookup(home, tok)
	if err != nil {
		return "", nil, err
	}
	if name != s.Subject {
		return "", nil, fmt.Errorf("the token is %s's, not %s's", s.Subject, name)
	}
	return s.Subject, s, nil
}

// RevokeRun forgets every token issued for a run: what the supervisor does
// when a run ends, including one it adopted after a restart and whose
// token it no longer holds.
func RevokeRun(home, runID string) error {
	return RevokeRuns(home, func(run string) bool { return run == runID })
}

// RevokeRuns forgets every token issued for a run that ended says has
// ended: what the supervisor does when it starts, for the runs a crash
// or a power cut ended without the supervisor seeing them end.
func RevokeRuns(home string, ended func(runID string) bool) error {
	d, err := dir(home)
	if err != nil {
		return err
	}
	entries, err := os.ReadDir(d.Path())
	if err != nil {
		return err
	}
	return d.Update(func(tx *store.Tx) error {
		for _, e := range entries {
			if !strings.HasSuffix(e.Name(), ".json") {
				continue
			}
			p := filepath.Join(d.Path(), e.Name())
			b, err := store.ReadFile(p)
			if err != nil {
				continue
			}
			var s Subject
			if store.Decode(p, b, kind, major, &s) == nil && s.Run != "" && ended(s.Run) {
				if err := tx.Remove(e.Name()); err != nil {
					return err
				}
			}
		}
		return nil
	})
}
