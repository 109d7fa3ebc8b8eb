package deskd

import (
	"encoding/base64"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/go-webauthn/webauthn/webauthn"

	"github.com/impyard/impyard/internal/passkeytest"
	"github.com/impyard/impyard/internal/testclock"
	"github.com/impyard/impyard/lib/approval"
	"github.com/impyard/impyard/lib/gate"
	"github.com/impyard/impyard/lib/yard/yardtest"
)

// rig is a desk on a test yard with one passkey enrolled and a clock
// the test moves.
type rig struct {
	s    *Server
	home string
	now  time.Time
	g    *gate.Gate
}

func newRig(t *testing.T) *rig {
	t.Helper()
	y := yardtest.New(t)
	r := &rig{home: t.TempDir(), now: testclock.Now(t)}
	a := passkeytest.New(t, approval.AlgES256, "phone")
	a.Passkey.Origin, a.Passkey.RPID = "http://localhost:7400", "localhost"
	if err := approval.AddPasskey(r.home, a.Passkey); err != nil {
		t.Fatal(err)
	}
	s, err := New(Config{Yard: y, Home: r.home, Origin: "http://localhost:7400", RPID: "localhost", Now: func() time.Time { return r.now }})
	if err != nil {
		t.Fatal(err)
	}
	r.s = s
	if r.g, err = gate.File(y, gate.FileOptions{Imp: "yuko", Intent: "email-send", Payload: []byte(`{"subject":"secret plans"}`), By: "yuko", Actor: "test"}); err != nil {
		t.Fatal(err)
	}
	return r
}

// signIn gives the rig a session of passkey phone, as a sign-in does.
func (r *rig) signIn() *http.Cookie {
	v := token()
	r.s.sessions[hashed(v)] = &session{name: "phone", key: approval.PasskeyFingerprint([]byte("cred-phone")), expires: r.now.Add(SessionTTL)}
	return &http.Cookie{Name: sessionCookie, Value: v}
}

func (r *rig) do(method, path, origin string, c *http.Cookie, body string) *httptest.ResponseRecorder {
	req := httptest.NewRequest(method, path, strings.NewReader(body))
	if origin != "" {
		req.Header.Set("Origin", origin)
	}
	if c != nil {
		req.AddCookie(c)
	}
	w := httptest.NewRecorder()
	r.s.Handler().ServeHTTP(w, req)
	return w
}

// TestSessions: a gate page is served only within a session; a session
// older than SessionTTL, or whose passkey was revoked, ends, and the gate
// page sends the browser to sign in without a byte of the gate.
func TestSessions(t *testing.T) {
	r := newRig(t)
	page := "/g/" + r.g.ID
	if w := r.do("GET", page, "", nil, ""); w.Code != http.StatusSeeOther || strings.Contains(w.Body.String(), "secret plans") {
		t.Errorf("no session: %d %q", w.Code, w.Body.String())
	}
	c := r.signIn()
	if w := r.do("GET", page, "", c, ""); w.Code != http.StatusOK || !strings.Contains(w.Body.String(), "secret plans") {
		t.Fatalf("in a session: %d", w.Code)
	}
	r.now = r.now.Add(SessionTTL)
	if w := r.do("GET", page, "", c, ""); w.Code != http.StatusSeeOther || w.Header().Get("Location") != "/login" {
		t.Errorf("a stale session: %d %s", w.Code, w.Header().Get("Location"))
	}
	r.now = r.now.Add(-SessionTTL)
	if w := r.do("GET", page, "", c, ""); w.Code != http.StatusSeeOther {
		t.Errorf("an ended session came back: %d", w.Code)
	}
	c = r.signIn()
	if err := approval.RemovePasskey(r.home, "phone"); err != nil {
		t.Fatal(err)
	}
	if w := r.do("GET", page, "", c, ""); w.Code != http.StatusSeeOther {
		t.Errorf("a revoked passkey's session: %d", w.Code)
	}
}

// TestCookies: the desk's cookies are HttpOnly and SameSite=Strict
// always, and Secure when it serves HTTPS.
func TestCookies(t *testing.T) {
	for _, secure := range []bool{false, true} {
		c := (&Server{cfg: Config{Secure: secure}}).cookie(sessionCookie, "v", SessionTTL)
		if !c.HttpOnly || c.SameSite != http.SameSiteStrictMode || c.Secure != secure || c.MaxAge != int(SessionTTL/time.Second) {
			t.Errorf("TLS %v: cookie %+v", secure, c)
		}
	}
}

// TestStateChangesCheckOrigin: every POST from another origin, or naming
// none, is refused before anything is decided.
func TestStateChangesCheckOrigin(t *testing.T) {
	r := newRig(t)
	c := r.signIn()
	for _, p := range []string{"/g/" + r.g.ID + "/deny", "/g/" + r.g.ID + "/approve/options", "/api/login/options", "/logout"} {
		for _, o := range []string{"", "null", "http://localhost:7401", "https://localhost:7400"} {
			if w := r.do("POST", p, o, c, "reason=x"); w.Code != http.StatusForbidden {
				t.Errorf("POST %s from %q: %d", p, o, w.Code)
			}
		}
	}
	if g, _ := gate.Get(r.s.cfg.Yard, r.g.ID); g.State != "filed" {
		t.Errorf("gate %s", g.State)
	}
	if w := r.do("POST", "/g/"+r.g.ID+"/deny", "http://localhost:7400", c, "reason=not+now"); w.Code != http.StatusSeeOther {
		t.Errorf("a same-origin deny: %d %s", w.Code, w.Body.String())
	}
	if g, _ := gate.Get(r.s.cfg.Yard, r.g.ID); g.State != "denied" || g.History[len(g.History)-1].By != "phone" {
		t.Errorf("after the deny: %+v", g)
	}
}

// TestApproveOptions: an approval's challenge is asked only in a
// session, for a pending gate, for the payload sha256 and the gate the
// page showed.
func TestApproveOptions(t *testing.T) {
	r := newRig(t)
	p := "/g/" + r.g.ID + "/approve/options"
	o := "http://localhost:7400"
	if w := r.do("POST", p, o, nil, `{"sha256":"`+r.g.SHA256+`"}`); w.Code != http.StatusUnauthorized {
		t.Errorf("without a session: %d", w.Code)
	}
	c := r.signIn()
	if w := r.do("POST", p, o, c, `{"sha256":"00"}`); w.Code != http.StatusConflict || !strings.Contains(w.Body.String(), "reload the page") {
		t.Errorf("another sha256: %d %s", w.Code, w.Body.String())
	}
	w := r.do("POST", p, o, c, `{"sha256":"`+r.g.SHA256+`","subject":"`+r.g.Subject().Digest()+`"}`)
	if w.Code != http.StatusOK || !strings.Contains(w.Body.String(), `"challenge"`) {
		t.Fatalf("options: %d %s", w.Code, w.Body.String())
	}
	// Its challenge is the approval message's hash, for phone, now.
	var cer *ceremony
	for _, c := range r.s.ceremonies {
		cer = c
	}
	want := approval.Challenge(r.g.Subject(), "phone", cer.at, cer.key)
	if cer.data.Challenge != b64(want) || !cer.at.Equal(r.now.UTC().Truncate(time.Second)) {
		t.Errorf("ceremony challenge %s at %s, want %s", cer.data.Challenge, cer.at, b64(want))
	}
}

// TestEnrollOnce: an enrollment token works until it is used or its ten
// minutes pass, and a used or expired one leaves no file behind.
func TestEnrollOnce(t *testing.T) {
	home := t.TempDir()
	now := testclock.Now(t)
	tok, exp, err := Enroll(home, "phone", now)
	if err != nil || !exp.Equal(now.Add(EnrollTTL).UTC()) {
		t.Fatal(err, exp)
	}
	if _, err := pending(home, tok, now, false); err != nil {
		t.Fatalf("a fresh token: %v", err)
	}
	if e, err := pending(home, tok, now.Add(time.Minute), true); err != nil || e.Name != "phone" {
		t.Fatalf("taking it: %v", err)
	}
	if _, err := pending(home, tok, now, true); !errors.Is(err, ErrEnrollment) {
		t.Errorf("a used token: %v", err)
	}
	tok, _, _ = Enroll(home, "tablet", now)
	if _, err := pending(home, tok, now.Add(EnrollTTL), false); !errors.Is(err, ErrEnrollment) {
		t.Errorf("an expired token: %v", err)
	}
	if _, err := os.Stat(enrollPath(home, tok)); !os.IsNotExist(err) {
		t.Errorf("an expired token's file: %v", err)
	}
	for _, bad := range []string{"", "../../keys/owner", strings.Repeat("A", 43)} {
		if _, err := pending(home, bad, now, false); !errors.Is(err, ErrEnrollment) {
			t.Errorf("token %q: %v", bad, err)
		}
	}
	a := passkeytest.New(t, approval.AlgES256, "phone")
	if err := approval.AddPasskey(home, a.Passkey); err != nil {
		t.Fatal(err)
	}
	if _, _, err := Enroll(home, "phone", now); !errors.Is(err, approval.ErrExists) {
		t.Errorf("enrolling a name taken: %v", err)
	}
}

func b64(b []byte) string { return base64.RawURLEncoding.EncodeToString(b) }

// TestEnrollRefusesUnverified: a credential registered without user
// verification, or whose key is no COSE key, is not kept.
func TestEnrollRefusesUnverified(t *testing.T) {
	if _, err := passkeyOf(&webauthn.Credential{ID: []byte("c"), PublicKey: []byte{0xa0}}); err == nil || !strings.Contains(err.Error(), "did not verify the user") {
		t.Errorf("no UV: %v", err)
	}
	c := &webauthn.Credential{ID: []byte("c"), PublicKey: []byte("not cbor"), Flags: webauthn.CredentialFlags{UserPresent: true, UserVerified: true}}
	if _, err := passkeyOf(c); err == nil || !strings.Contains(err.Error(), "credential public key") {
		t.Errorf("a key that is no COSE key: %v", err)
	}
}

// TestApproveWhatWasShown: the challenge a passkey signs is asked only
// for the gate the page showed, whole: a writer of the yard who changes
// its imp, intent, task or run between the page and the tap (the
// payload's sha256 unchanged) gets the page reloaded, not a signature
// over what the owner never saw. A gate past its deadline is refused
// before any passkey is asked, and at the approval itself.
func TestApproveWhatWasShown(t *testing.T) {
	r := newRig(t)
	c := r.signIn()
	o := "http://localhost:7400"
	page := r.do("GET", "/g/"+r.g.ID, "", c, "")
	m := regexp.MustCompile(`data-subject="([0-9a-f]{64})"`).FindStringSubmatch(page.Body.String())
	if m == nil {
		t.Fatalf("the gate page carries no data-subject: %s", page.Body.String())
	}
	shown := `{"sha256":"` + r.g.SHA256 + `","subject":"` + m[1] + `"}`
	path := filepath.Join(r.s.cfg.Yard.Path("gates", "pending"), r.g.ID+".json")
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	edited := strings.Replace(string(b), `"intent": "email-send"`, `"intent": "message-user"`, 1)
	if edited == string(b) {
		t.Fatalf("no intent to edit in %s", b)
	}
	if err := os.WriteFile(path, []byte(edited), 0o644); err != nil {
		t.Fatal(err)
	}
	w := r.do("POST", "/g/"+r.g.ID+"/approve/options", o, c, shown)
	if w.Code != http.StatusConflict || !strings.Contains(w.Body.String(), "reload the page") {
		t.Errorf("a gate changed since its page: %d %s, want 409 asking to reload", w.Code, w.Body.String())
	}
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
	if w := r.do("POST", "/g/"+r.g.ID+"/approve/options", o, c, shown); w.Code != http.StatusOK {
		t.Errorf("the gate as shown: %d %s", w.Code, w.Body.String())
	}

	g, err := gate.File(r.s.cfg.Yard, gate.FileOptions{Imp: "yuko", Intent: "email-send", Payload: []byte(`{"subject":"meeting tomorrow"}`), By: "yuko", Actor: "test", Expires: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	r.now = g.Created.Add(2 * time.Hour)
	c = r.signIn()
	late := `{"sha256":"` + g.SHA256 + `","subject":"` + g.Subject().Digest() + `"}`
	if w := r.do("POST", "/g/"+g.ID+"/approve/options", o, c, late); w.Code != http.StatusConflict || !strings.Contains(w.Body.String(), "expired") {
		t.Errorf("a gate past its deadline: %d %s, want 409 expired", w.Code, w.Body.String())
	}
}

// TestSignInsBounded: a stranger who begins sign-ins in a loop holds at
// most MaxSignIns of them; the next is 503 with Retry-After and keeps
// nothing, while the owner, signed in, still approves; once they expire,
// sign-ins begin again.
func TestSignInsBounded(t *testing.T) {
	r := newRig(t)
	o := "http://localhost:7400"
	for i := range MaxSignIns {
		if w := r.do("POST", "/api/login/options", o, nil, ""); w.Code != http.StatusOK {
			t.Fatalf("sign-in %d: %d %s", i+1, w.Code, w.Body.String())
		}
	}
	w := r.do("POST", "/api/login/options", o, nil, "")
	if w.Code != http.StatusServiceUnavailable || w.Header().Get("Retry-After") == "" || w.Header().Get("Set-Cookie") != "" {
		t.Errorf("sign-in past the bound: %d %v %s, want 503 with Retry-After and no ceremony", w.Code, w.Header(), w.Body.String())
	}
	if n := len(r.s.ceremonies); n != MaxSignIns {
		t.Errorf("%d ceremonies kept, want %d", n, MaxSignIns)
	}
	c := r.signIn()
	if w := r.do("POST", "/g/"+r.g.ID+"/approve/options", o, c, `{"sha256":"`+r.g.SHA256+`","subject":"`+r.g.Subject().Digest()+`"}`); w.Code != http.StatusOK {
		t.Errorf("an approval while sign-ins are full: %d %s", w.Code, w.Body.String())
	}
	r.now = r.now.Add(ceremonyTTL)
	if w := r.do("POST", "/api/login/options", o, nil, ""); w.Code != http.StatusOK {
		t.Errorf("a sign-in once the others expired: %d %s", w.Code, w.Body.String())
	}
}

// TestApproveOldAsksAgain: the gate page shows when the gate was filed,
// and a gate older than its executor's confirm_after is approved only
// when the owner ticks that it is old, as impgate approve asks again:
// the passkey is not asked for before.
func TestApproveOldAsksAgain(t *testing.T) {
	r := newRig(t)
	if err := os.WriteFile(r.s.cfg.Yard.Path("org.toml"), []byte("[executors.email-send]\nkind = \"message-user\"\nconfirm_after = \"1h\"\n"), 0o640); err != nil {
		t.Fatal(err)
	}
	r.now = r.g.Created.Add(26 * time.Hour)
	c := r.signIn()
	page := r.do("GET", "/g/"+r.g.ID, "", c, "").Body.String()
	if !strings.Contains(page, `id="old-ok"`) || !strings.Contains(page, "26h ago") {
		t.Errorf("the page of a gate filed a day ago does not say it is old:\n%s", page)
	}
	o := "http://localhost:7400"
	shown := `"sha256":"` + r.g.SHA256 + `","subject":"` + r.g.Subject().Digest() + `"`
	if w := r.do("POST", "/g/"+r.g.ID+"/approve/options", o, c, "{"+shown+"}"); w.Code != http.StatusConflict || !strings.Contains(w.Body.String(), "confirm_after") {
		t.Errorf("an old gate approved without saying so: %d %s, want 409 naming confirm_after", w.Code, w.Body.String())
	}
	if w := r.do("POST", "/g/"+r.g.ID+"/approve/options", o, c, "{"+shown+`,"old":true}`); w.Code != http.StatusOK {
		t.Errorf("an old gate the owner says is old: %d %s", w.Code, w.Body.String())
	}
}
