package deskd

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/go-webauthn/webauthn/protocol"
	"github.com/go-webauthn/webauthn/protocol/webauthncose"
	"github.com/go-webauthn/webauthn/webauthn"

	"github.com/impyard/impyard/lib/approval"
	"github.com/impyard/impyard/lib/config"
	"github.com/impyard/impyard/lib/desk"
	"github.com/impyard/impyard/lib/gate"
	"github.com/impyard/impyard/lib/id"
	"github.com/impyard/impyard/lib/state"
)

// maxBody bounds what a browser may post: a WebAuthn answer, a reason.
const maxBody = 64 << 10

// Handler serves the desk.
func (s *Server) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /{$}", s.list)
	mux.HandleFunc("GET /login", s.loginPage)
	mux.HandleFunc("GET /enroll/{token}", s.enrollPage)
	mux.HandleFunc("GET /g/{id}", s.gatePage)
	mux.HandleFunc("GET /static/{file}", s.static)
	mux.HandleFunc("POST /api/enroll/{token}/options", s.enrollOptions)
	mux.HandleFunc("POST /api/enroll/{token}", s.enrollFinish)
	mux.HandleFunc("POST /api/login/options", s.loginOptions)
	mux.HandleFunc("POST /api/login", s.loginFinish)
	mux.HandleFunc("POST /g/{id}/approve/options", s.approveOptions)
	mux.HandleFunc("POST /g/{id}/approve", s.approveFinish)
	mux.HandleFunc("POST /g/{id}/deny", s.deny)
	mux.HandleFunc("POST /logout", s.logout)
	return s.guard(mux)
}

// csp runs only the desk's own script and style files: a payload's
// markup that escaped escaping would still run nothing.
const csp = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; connect-src 'self'; " +
	"form-action 'self'; frame-ancestors 'none'; base-uri 'none'"

// guard sets the headers every answer carries and refuses a state
// change from another origin before it is read.
func (s *Server) guard(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		h.Set("Content-Security-Policy", csp)
		h.Set("X-Content-Type-Options", "nosniff")
		// same-origin, not no-referrer: with no-referrer a form POST carries
		// "Origin: null", which the check below must refuse.
		h.Set("Referrer-Policy", "same-origin")
		h.Set("X-Frame-Options", "DENY")
		h.Set("Cache-Control", "no-store")
		if r.Method != http.MethodGet && r.Method != http.MethodHead && !s.sameOrigin(r) {
			s.cfg.Logf("desk: %s %s refused: Origin %q is not %s", r.Method, r.URL.Path, r.Header.Get("Origin"), s.cfg.Origin)
			http.Error(w, ErrOrigin.Error(), http.StatusForbidden)
			return
		}
		r.Body = http.MaxBytesReader(w, r.Body, maxBody)
		next.ServeHTTP(w, r)
	})
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(v)
}

func fail(w http.ResponseWriter, code int, err error) {
	writeJSON(w, code, map[string]string{"error": err.Error()})
}

// ErrNoSession is a request that needs a sign-in.
var ErrNoSession = errors.New("not signed in, or the session ended")

func (s *Server) enrollOptions(w http.ResponseWriter, r *http.Request) {
	tok := r.PathValue("token")
	e, err := pending(s.cfg.Home, tok, s.cfg.Now(), false)
	if err != nil {
		fail(w, http.StatusNotFound, err)
		return
	}
	o, _, err := s.passkeys()
	if err != nil {
		fail(w, http.StatusInternalServerError, err)
		return
	}
	var exclude []protocol.CredentialDescriptor
	for _, c := range o.creds {
		exclude = append(exclude, c.Descriptor())
	}
	opts, data, err := s.wa.BeginRegistration(o,
		webauthn.WithRegistrationRelyingPartyName("impyard desk: "+e.Name),
		webauthn.WithAuthenticatorSelection(protocol.AuthenticatorSelection{
			ResidentKey: protocol.ResidentKeyRequirementRequired, UserVerification: protocol.VerificationRequired}),
		webauthn.WithCredentialParameters([]protocol.CredentialParameter{
			{Type: protocol.PublicKeyCredentialType, Algorithm: webauthncose.AlgES256},
			{Type: protocol.PublicKeyCredentialType, Algorithm: webauthncose.AlgEdDSA}}),
		webauthn.WithExclusions(exclude),
		webauthn.WithConveyancePreference(protocol.PreferNoAttestation))
	if err != nil {
		fail(w, http.StatusInternalServerError, err)
		return
	}
	_ = s.begin(w, &ceremony{kind: "enroll:" + tok, data: *data})
	writeJSON(w, http.StatusOK, opts)
}

func (s *Server) enrollFinish(w http.ResponseWriter, r *http.Request) {
	tok := r.PathValue("token")
	c := s.finish(r, "enroll:"+tok)
	if c == nil {
		fail(w, http.StatusBadRequest, errors.New("no enrollment under way here; reload the enrollment page"))
		return
	}
	parsed, err := protocol.ParseCredentialCreationResponseBody(r.Body)
	if err != nil {
		fail(w, http.StatusBadRequest, err)
		return
	}
	o, _, err := s.passkeys()
	if err != nil {
		fail(w, http.StatusInternalServerError, err)
		return
	}
	cred, err := s.wa.CreateCredential(o, c.data, parsed)
	if err != nil {
		fail(w, http.StatusBadRequest, fmt.Errorf("the passkey was not registered: %w", err))
		return
	}
	pk, err := passkeyOf(cred)
	if err != nil {
		fail(w, http.StatusBadRequest, err)
		return
	}
	// The token is spent only now, once the browser produced a
	// credential: a failed attempt can be repeated within its time.
	e, err := pending(s.cfg.Home, tok, s.cfg.Now(), true)
	if err != nil {
		fail(w, http.StatusNotFound, err)
		return
	}
	pk.Name, pk.RPID, pk.Origin, pk.Created = e.Name, s.cfg.RPID, s.cfg.Origin, s.cfg.Now().UTC()
	if err := approval.AddPasskey(s.cfg.Home, pk); err != nil {
		fail(w, http.StatusConflict, err)
		return
	}
	s.cfg.Logf("desk: enrolled passkey %s %s", pk.Name, pk.Fingerprint())
	writeJSON(w, http.StatusOK, map[string]string{"name": pk.Name, "fingerprint": pk.Fingerprint(), "next": "/login"})
}

// passkeyOf keeps what an offline verifier needs of a credential
// go-webauthn registered: its id, and its COSE public key both as sent
// and as go-webauthn parsed it.
func passkeyOf(cred *webauthn.Credential) (*approval.Passkey, error) {
	if !cred.Flags.UserVerified {
		return nil, errors.New("the authenticator did not verify the user (PIN or biometrics); a passkey that approves must")
	}
	key, err := webauthncose.ParsePublicKey(cred.PublicKey)
	if err != nil {
		return nil, fmt.Errorf("credential public key: %w", err)
	}
	pk := &approval.Passkey{CredentialID: cred.ID, COSEKey: cred.PublicKey, BackupEligible: cred.Flags.BackupEligible}
	switch k := key.(type) {
	case webauthncose.EC2PublicKeyData:
		if k.Algorithm != int64(webauthncose.AlgES256) || k.Curve != int64(webauthncose.P256) || len(k.XCoord) > 32 || len(k.YCoord) > 32 {
			return nil, fmt.Errorf("unsupported EC2 key (algorithm %d, curve %d)", k.Algorithm, k.Curve)
		}
		point := make([]byte, 65)
		point[0] = 4
		copy(point[33-len(k.XCoord):33], k.XCoord)
		copy(point[65-len(k.YCoord):], k.YCoord)
		pk.Alg, pk.PublicKey = approval.AlgES256, point
	case webauthncose.OKPPublicKeyData:
		if k.Algorithm != int64(webauthncose.AlgEdDSA) {
			return nil, fmt.Errorf("unsupported OKP key (algorithm %d)", k.Algorithm)
		}
		pk.Alg, pk.PublicKey = approval.AlgEdDSA, k.XCoord
	default:
		return nil, fmt.Errorf("unsupported credential key %T; want ES256 or EdDSA", key)
	}
	return pk, nil
}

func (s *Server) loginOptions(w http.ResponseWriter, r *http.Request) {
	o, _, err := s.passkeys()
	if err != nil {
		fail(w, http.StatusInternalServerError, err)
		return
	}
	if len(o.creds) == 0 {
		fail(w, http.StatusNotFound, errors.New("no passkey is enrolled for this desk; run impgate desk enroll --name NAME"))
		return
	}
	opts, data, err := s.wa.BeginLogin(o, webauthn.WithUserVerification(protocol.VerificationRequired))
	if err != nil {
		fail(w, http.StatusInternalServerError, err)
		return
	}
	if err := s.begin(w, &ceremony{kind: "login", data: *data}); err != nil {
		s.cfg.Logf("desk: sign-in refused: %v", err)
		w.Header().Set("Retry-After", strconv.Itoa(int(ceremonyTTL/time.Second)))
		fail(w, http.StatusServiceUnavailable, err)
		return
	}
	writeJSON(w, http.StatusOK, opts)
}

// assert checks the answer to ceremony c with go-webauthn and returns
// the passkey that made it and the parsed answer.
func (s *Server) assert(r *http.Request, c *ceremony) (*approval.Trusted, *protocol.ParsedCredentialAssertionData, error) {
	parsed, err := protocol.ParseCredentialRequestResponseBody(r.Body)
	if err != nil {
		return nil, nil, err
	}
	o, byID, err := s.passkeys()
	if err != nil {
		return nil, nil, err
	}
	cred, err := s.wa.ValidateLogin(o, c.data, parsed)
	if err != nil {
		return nil, nil, fmt.Errorf("the passkey's answer does not verify: %w", err)
	}
	t := byID[string(cred.ID)]
	if t == nil {
		return nil, nil, fmt.Errorf("passkey %x is not enrolled", cred.ID)
	}
	return t, parsed, nil
}

func (s *Server) loginFinish(w http.ResponseWriter, r *http.Request) {
	c := s.finish(r, "login")
	if c == nil {
		fail(w, http.StatusBadRequest, errors.New("no sign-in under way here; reload the page"))
		return
	}
	t, _, err := s.assert(r, c)
	if err != nil {
		fail(w, http.StatusForbidden, err)
		return
	}
	v := token()
	s.mu.Lock()
	s.sessions[hashed(v)] = &session{name: t.Name, key: t.Fingerprint, expires: s.cfg.Now().Add(SessionTTL)}
	s.mu.Unlock()
	http.SetCookie(w, s.cookie(sessionCookie, v, SessionTTL))
	s.cfg.Logf("desk: %s signed in", t.Name)
	writeJSON(w, http.StatusOK, map[string]string{"next": "/"})
}

func (s *Server) logout(w http.ResponseWriter, r *http.Request) {
	if c, err := r.Cookie(sessionCookie); err == nil {
		s.mu.Lock()
		delete(s.sessions, hashed(c.Value))
		s.mu.Unlock()
	}
	http.SetCookie(w, s.cookie(sessionCookie, "", -1))
	http.Redirect(w, r, "/login", http.StatusSeeOther)
}

// pendingGate reads gate id for a decision by a session.
func (s *Server) pendingGate(r *http.Request) (*gate.Gate, error) {
	gid := r.PathValue("id")
	if err := id.Check(id.Gate, gid); err != nil {
		return nil, err
	}
	return gate.Get(s.cfg.Yard, gid)
}

func (s *Server) approveOptions(w http.ResponseWriter, r *http.Request) {
	ss := s.session(r)
	if ss == nil {
		fail(w, http.StatusUnauthorized, ErrNoSession)
		return
	}
	var req struct {
		SHA256  string `json:"sha256"`
		Subject string `json:"subject"`
		Old     bool   `json:"old"`
	}
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
		fail(w, http.StatusBadRequest, err)
		return
	}
	g, err := s.pendingGate(r)
	if err != nil {
		fail(w, http.StatusNotFound, err)
		return
	}
	switch {
	case g.State != state.Filed:
		fail(w, http.StatusConflict, fmt.Errorf("gate %s is %s", g.ID, g.State))
		return
	case !g.Matches():
		fail(w, http.StatusConflict, fmt.Errorf("gate %s: its payload no longer matches its sha256; it cannot be approved", g.ID))
		return
	case req.SHA256 != g.SHA256:
		fail(w, http.StatusConflict, fmt.Errorf("gate %s: its payload sha256 is %s, not the %q shown; reload the page", g.ID, g.SHA256, req.SHA256))
		return
	case req.Subject != g.Subject().Digest():
		// The passkey signs the imp, intent, task, run, filing, verdict
		// and deadline too, and the phone shows none of them at the tap.
		fail(w, http.StatusConflict, fmt.Errorf("gate %s changed since its page was shown (imp, intent, task, run, filing, trust verdict or deadline); reload the page", g.ID))
		return
	}
	at := state.Second(s.cfg.Now())
	if d := s.deadline(g); !d.IsZero() && !at.Before(d) {
		fail(w, http.StatusConflict, fmt.Errorf("gate %s: %w: its deadline was %s; it cannot be approved", g.ID, gate.ErrExpired, d.UTC().Format(time.RFC3339)))
		return
	}
	if t := desk.Timing(g, s.org(), at); t.Old && !req.Old {
		fail(w, http.StatusConflict, fmt.Errorf("gate %s was filed %s ago, older than its executor's confirm_after: tick that you approve it although it is old", g.ID, t.AgeText()))
		return
	}
	challenge := approval.Challenge(g.Subject(), ss.name, at, ss.key)
	o, byID, err := s.passkeys()
	if err != nil {
		fail(w, http.StatusInternalServerError, err)
		return
	}
	var allow []protocol.CredentialDescriptor
	for _, c := range o.creds {
		if byID[string(c.ID)].Fingerprint == ss.key {
			allow = append(allow, c.Descriptor())
		}
	}
	opts, data, err := s.wa.BeginLogin(o, webauthn.WithChallenge(challenge), webauthn.WithAllowedCredentials(allow),
		webauthn.WithUserVerification(protocol.VerificationRequired))
	if err != nil {
		fail(w, http.StatusInternalServerError, err)
		return
	}
	_ = s.begin(w, &ceremony{kind: "approve:" + g.ID, data: *data, by: ss.name, key: ss.key, sha: g.SHA256, at: at})
	writeJSON(w, http.StatusOK, opts)
}

func (s *Server) approveFinish(w http.ResponseWriter, r *http.Request) {
	ss := s.session(r)
	if ss == nil {
		fail(w, http.StatusUnauthorized, ErrNoSession)
		return
	}
	gid := r.PathValue("id")
	c := s.finish(r, "approve:"+gid)
	if c == nil || c.key != ss.key {
		fail(w, http.StatusBadRequest, errors.New("no approval of this gate under way here; reload the page"))
		return
	}
	t, parsed, err := s.assert(r, c)
	if err != nil {
		fail(w, http.StatusForbidden, err)
		return
	}
	raw := parsed.Raw.AssertionResponse
	a := approval.WebAuthnApproval(c.by, c.at, t.Fingerprint, &approval.Assertion{
		CredentialID: parsed.RawID, AuthenticatorData: raw.AuthenticatorData,
		ClientDataJSON: raw.ClientDataJSON, Signature: raw.Signature})
	s.decide(w, gid, gate.Change{To: state.Approved, By: c.by, Actor: "impgate serve", SHA: c.sha, Signed: a, Deadline: s.deadline})
}

// deadline is g's deadline as org.toml says now (gate.Deadline), as
// impgate approve reckons it; unreadable, only a deadline set at filing
// holds, as for impexec.
func (s *Server) deadline(g *gate.Gate) time.Time { return g.Deadline(s.org()) }

// org is org.toml as it stands, nil when it does not load.
func (s *Server) org() *config.Org {
	org, err := config.LoadOrg(s.cfg.Yard)
	if err != nil {
		return nil
	}
	return org
}

// decide moves gate gid as ch says and answers with where to go next.
func (s *Server) decide(w http.ResponseWriter, gid string, ch gate.Change) {
	keys := func() (*approval.Keyring, error) { return approval.LoadKeyring(s.cfg.Home) }
	g, _, err := gate.Decide(s.cfg.Yard, gid, ch, keys)
	if err != nil && g == nil {
		s.cfg.Logf("desk: %s of %s by %s refused: %v", ch.To, gid, ch.By, err)
		fail(w, http.StatusConflict, err)
		return
	}
	if err != nil {
		s.cfg.Logf("desk: %s %s by %s, but: %v", gid, ch.To, ch.By, err)
	}
	s.cfg.Logf("desk: %s %s by %s", gid, g.State, ch.By)
	writeJSON(w, http.StatusOK, map[string]string{"state": g.State, "next": "/g/" + gid})
}

func (s *Server) deny(w http.ResponseWriter, r *http.Request) {
	ss := s.session(r)
	if ss == nil {
		http.Redirect(w, r, "/login", http.StatusSeeOther)
		return
	}
	gid := r.PathValue("id")
	if err := id.Check(id.Gate, gid); err != nil {
		http.Error(w, err.Error(), http.StatusNotFound)
		return
	}
	reason := strings.TrimSpace(r.PostFormValue("reason"))
	keys := func() (*approval.Keyring, error) { return approval.LoadKeyring(s.cfg.Home) }
	if _, _, err := gate.Decide(s.cfg.Yard, gid, gate.Change{To: state.Denied, By: ss.name, Actor: "impgate serve", Why: reason}, keys); err != nil {
		s.cfg.Logf("desk: deny of %s by %s refused: %v", gid, ss.name, err)
		s.render(w, http.StatusConflict, "error", pageData{Title: "Not denied", Error: err.Error(), Signed: ss.name})
		return
	}
	s.cfg.Logf("desk: %s denied by %s", gid, ss.name)
	http.Redirect(w, r, "/g/"+gid, http.StatusSeeOther)
}

// listed is one row of the pending list.
type listed struct {
	ID, Imp, Intent, Age, Where string
}

func (s *Server) list(w http.ResponseWriter, r *http.Request) {
	ss := s.session(r)
	if ss == nil {
		http.Redirect(w, r, "/login", http.StatusSeeOther)
		return
	}
	gates, bad := gate.List(s.cfg.Yard, gate.Filter{})
	sort.Slice(gates, func(i, j int) bool { return gates[i].Created.After(gates[j].Created) })
	now := s.cfg.Now()
	var rows []listed
	for _, g := range gates {
		rep := desk.Inspect(s.cfg.Yard, s.cfg.Home, g)
		where := "unknown: " + rep.DestinationError
		if rep.Destination != nil {
			where = rep.Destination.String()
		}
		rows = append(rows, listed{ID: g.ID, Imp: g.Imp, Intent: g.Intent, Age: age(now, g.Created), Where: where})
	}
	var problems []string
	for _, err := range bad {
		problems = append(problems, err.Error())
	}
	s.render(w, http.StatusOK, "list", pageData{Title: "Pending gates", Signed: ss.name, Rows: rows, Problems: problems})
}

func (s *Server) gatePage(w http.ResponseWriter, r *http.Request) {
	ss := s.session(r)
	if ss == nil {
		http.Redirect(w, r, "/login", http.StatusSeeOther)
		return
	}
	g, err := s.pendingGate(r)
	if err != nil {
		s.render(w, http.StatusNotFound, "error", pageData{Title: "No such gate", Error: err.Error(), Signed: ss.name})
		return
	}
	rep := desk.Inspect(s.cfg.Yard, s.cfg.Home, g)
	s.render(w, http.StatusOK, "gate", s.gateView(rep, ss))
}

func (s *Server) loginPage(w http.ResponseWriter, r *http.Request) {
	s.render(w, http.StatusOK, "login", pageData{Title: "Sign in"})
}

func (s *Server) enrollPage(w http.ResponseWriter, r *http.Request) {
	tok := r.PathValue("token")
	e, err := pending(s.cfg.Home, tok, s.cfg.Now(), false)
	if err != nil {
		s.render(w, http.StatusNotFound, "error", pageData{Title: "Enrollment", Error: err.Error()})
		return
	}
	s.render(w, http.StatusOK, "enroll", pageData{Title: "Enroll a passkey", Name: e.Name, Token: tok})
}

func (s *Server) static(w http.ResponseWriter, r *http.Request) {
	name := r.PathValue("file")
	b, err := staticFiles.ReadFile("static/" + name)
	if err != nil || strings.Contains(name, "/") {
		http.NotFound(w, r)
		return
	}
	switch {
	case strings.HasSuffix(name, ".js"):
		w.Header().Set("Content-Type", "text/javascript; charset=utf-8")
	case strings.HasSuffix(name, ".css"):
		w.Header().Set("Content-Type", "text/css; charset=utf-8")
	}
	w.Header().Set("Cache-Control", "no-cache")
	_, _ = io.Copy(w, bytes.NewReader(b))
}
