package tests

import (
	"context"
	"encoding/json"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/cdproto/page"
	cdpwebauthn "github.com/chromedp/cdproto/webauthn"
	"github.com/chromedp/chromedp"

	"github.com/impyard/impyard/lib/approval"
	"github.com/impyard/impyard/lib/gate"
	"github.com/impyard/impyard/lib/state"
)

// hostile is a payload body a box could write to break out of the gate
// page: markup, a closing </pre>, a javascript: link, an event handler
// and a right-to-left override that would reverse what the owner reads.
const hostile = "</pre><script>document.title='pwned';alert(1)</script>" +
	"<img src=x onerror=\"document.title='pwned'\"><a id=evil href=\"javascript:alert(2)\">open</a>" +
	"pay \u202egnp.exe"

// TestDeskInBrowser drives headless Chromium, with a virtual CTAP2
// authenticator that verifies the user, through the whole desk: a
// stranger gets the login page and no gate; the owner enrolls a passkey
// from the one-time URL, signs in, opens a pending gate and approves it;
// impexec verifies the passkey's signature and sends the mail, and the
// approval fails after any edit of the gate or when replayed onto
// another; a hostile payload renders as inert text; a cross-origin POST
// is refused; a deny records the passkey's name; a revoked passkey's
// session ends and its approvals stop verifying.
func TestDeskInBrowser(t *testing.T) {
	chromium, err := exec.LookPath("chromium")
	if err != nil {
		t.Fatal("chromium is not installed: scripts/deps installs it")
	}
	s := newSpine(t, true, bin)
	tok := s.token(t, "yuko", "--run", "r-0000000000000001")
	file := func(subject, body string) string {
		t.Helper()
		env, _ := json.Marshal(map[string]any{"intent": "email-send", "rationale": "because " + body,
			"payload": map[string]any{"to": []string{"boss@elsewhere.com"}, "subject": subject, "body": body}})
		code, out, _ := s.propose(t, tok, string(env))
		if code != http.StatusAccepted {
			t.Fatalf("proposal: %d %v", code, out)
		}
		return out["gate_id"].(string)
	}
	approveMe := file("report", "the weekly report")
	other := file("other", "another mail")
	evil := file("evil", hostile)
	crossed := file("crossed", "a gate a foreign page tries to deny")

	addrs := startDaemon(t, s.env, "impgate", []string{"serve", "--listen", "127.0.0.1:0"}, " desk serving on ", " origin ")
	origin := addrs[1]
	if !strings.HasPrefix(origin, "http://localhost:") {
		t.Fatalf("desk origin %q", origin)
	}
	client := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	get := func(path string, cookie *http.Cookie) (int, string, http.Header) {
		t.Helper()
		req, _ := http.NewRequest("GET", origin+path, nil)
		if cookie != nil {
			req.AddCookie(cookie)
		}
		resp, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var b strings.Builder
		buf := make([]byte, 32<<10)
		for {
			n, err := resp.Body.Read(buf)
			b.Write(buf[:n])
			if err != nil {
				break
			}
		}
		return resp.StatusCode, b.String(), resp.Header
	}

	t.Run("stranger", func(t *testing.T) {
		code, body, h := get("/login", nil)
		if code != http.StatusOK || !strings.Contains(body, `id="login"`) || !strings.Contains(h.Get("Content-Security-Policy"), "script-src 'self'") {
			t.Errorf("login page: %d %q %v", code, body, h)
		}
		for _, p := range []string{"/", "/g/" + approveMe} {
			code, body, h := get(p, nil)
			if code != http.StatusSeeOther || h.Get("Location") != "/login" || strings.Contains(body, "weekly report") || strings.Contains(body, approveMe) {
				t.Errorf("%s without a session: %d %s %q", p, code, h.Get("Location"), body)
			}
		}
	})

	out, err := s.run(t, "impgate", "desk", "enroll", "--name", "phone", "--json")
	if err != nil {
		t.Fatalf("desk enroll: %v %s", err, out)
	}
	var enrolled struct{ URL string }
	if err := json.Unmarshal([]byte(out), &enrolled); err != nil {
		t.Fatalf("desk enroll --json: %v %q", err, out)
	}
	u, err := url.Parse(enrolled.URL)
	if err != nil || !strings.HasPrefix(u.Path, "/enroll/") {
		t.Fatalf("enrollment URL %q", enrolled.URL)
	}

	ctx, cancel := chromedp.NewExecAllocator(context.Background(), chromedp.ExecPath(chromium), chromedp.Headless, chromedp.NoSandbox,
		chromedp.DisableGPU, chromedp.NoFirstRun, chromedp.Flag("disable-quic", true), chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true), chromedp.Flag("disable-sync", true), chromedp.UserDataDir(t.TempDir()))
	defer cancel()
	ctx, cancel = chromedp.NewContext(ctx)
	defer cancel()
	ctx, cancel = context.WithTimeout(ctx, 90*time.Second)
	defer cancel()
	var mu sync.Mutex
	var dialogs []string
	do := func(what string, steps ...chromedp.Action[chromedp.Void]) {
		t.Helper()
		if err := chromedp.Do(ctx, steps...); err != nil {
			t.Fatalf("%s: %v", what, err)
		}
	}
	do("start", chromedp.Navigate("about:blank"))
	if err := chromedp.Listen(ctx, func(ev any) {
		if d, ok := ev.(*page.EventJavascriptDialogOpening); ok {
			mu.Lock()
			dialogs = append(dialogs, d.Message)
			mu.Unlock()
		}
	}); err != nil {
		t.Fatal(err)
	}
	if _, err := chromedp.Call(ctx, cdpwebauthn.Enable, cdpwebauthn.EnableParams{}); err != nil {
		t.Fatal(err)
	}
	if _, err := chromedp.Call(ctx, cdpwebauthn.AddVirtualAuthenticator, cdpwebauthn.AddVirtualAuthenticatorParams{Options: &cdpwebauthn.VirtualAuthenticatorOptions{
		Protocol: cdpwebauthn.AuthenticatorProtocolCtap2, Transport: cdpwebauthn.AuthenticatorTransportInternal,
		HasResidentKey: true, HasUserVerification: true, IsUserVerified: true, AutomaticPresenceSimulation: true}}); err != nil {
		t.Fatal(err)
	}
	text := func(sel string) string {
		t.Helper()
		v, err := chromedp.Run(ctx, chromedp.TextContent(chromedp.CSS(sel)))
		if err != nil {
			t.Fatalf("text of %s: %v", sel, err)
		}
		return v
	}

	do("enroll", chromedp.Navigate(origin+u.Path), chromedp.Click(chromedp.ID("enroll")), chromedp.WaitVisible(chromedp.ID("login")))
	if out, err := s.run(t, "impgate", "key", "ls"); err != nil || !strings.Contains(out, "phone") || !strings.Contains(out, "webauthn:") {
		t.Fatalf("key ls after enrolling: %v %s", err, out)
	}
	if code, _, _ := get(u.Path, nil); code != http.StatusNotFound {
		t.Errorf("the enrollment URL answers %d after its use, want 404", code)
	}
	do("sign in", chromedp.Click(chromedp.ID("login")), chromedp.WaitVisible(chromedp.CSS("ul.gates")))
	if list := text("ul.gates"); !strings.Contains(list, approveMe) || !strings.Contains(list, "email-send") || !strings.Contains(list, "POST "+s.mail.srv.URL) {
		t.Errorf("pending list: %q", list)
	}

	t.Run("approve", func(t *testing.T) {
		shot := filepath.Join(os.TempDir(), "impyard-desk-gate-390x844.png")
		var png []byte
		do("gate page", chromedp.EmulateViewport(390, 844, chromedp.EmulateMobile), chromedp.Navigate(origin+"/g/"+approveMe),
			chromedp.WaitVisible(chromedp.ID("approve")))
		png, err := chromedp.Run(ctx, chromedp.CaptureScreenshot())
		if err != nil || os.WriteFile(shot, png, 0o644) != nil {
			t.Fatalf("screenshot: %v", err)
		}
		t.Logf("gate page at phone size: %s", shot)
		if p := text("#payload"); !strings.Contains(p, "the weekly report") || !strings.Contains(text("#where"), s.mail.srv.URL) {
			t.Errorf("gate page shows payload %q, destination %q", p, text("#where"))
		}
		do("approve", chromedp.Click(chromedp.ID("approve")), chromedp.WaitVisible(chromedp.ID("approval")))
		if a := text("#approval"); !strings.Contains(a, "verifies: signed by phone webauthn:") {
			t.Errorf("approval line %q", a)
		}
		g, err := gate.Get(s.y, approveMe)
		if err != nil || g.State != state.Approved || g.Approval.Kind != approval.KindWebAuthn || g.Approval.By != "phone" || g.Approval.WebAuthn == nil {
			t.Fatalf("gate after approving: %v %+v", err, g)
		}
		kr, err := approval.LoadKeyring(s.home)
		if err != nil {
			t.Fatal(err)
		}
		// Every field the approval covers, edited, breaks it.
		edits := map[string]func(g *gate.Gate){
			"imp":     func(g *gate.Gate) { g.Imp = "mallory" },
			"intent":  func(g *gate.Gate) { g.Intent = "discord-post" },
			"task":    func(g *gate.Gate) { g.Task = "t-0000000000000009" },
			"decider": func(g *gate.Gate) { g.Approval.By = "owner"; g.History[len(g.History)-1].By = "owner" },
			"time": func(g *gate.Gate) {
				g.Approval.At = g.Approval.At.Add(time.Second)
				g.History[len(g.History)-1].At = g.Approval.At
			},
			"payload": func(g *gate.Gate) {
				p := []byte(`{"body":"wire the money","subject":"report","to":["all@world.com"]}`)
				g.Payload, g.SHA256 = p, gate.Sum(p)
			},
		}
		for name, edit := range edits {
			c, _ := gate.Get(s.y, approveMe)
			edit(c)
			if _, err := c.VerifyApproval(kr); err == nil {
				t.Errorf("edited %s: the passkey's approval still verifies", name)
			}
		}
		if _, err := g.VerifyApproval(kr); err != nil {
			t.Fatalf("the approval made in the browser does not verify: %v", err)
		}
		if out, err := s.run(t, "impexec", "once", approveMe); err != nil {
			t.Fatalf("impexec once: %v %s", err, out)
		}
		if g := s.waitState(t, approveMe, state.Executed); g.State != state.Executed {
			t.Fatalf("gate %s", g.State)
		}
		s.mail.mu.Lock()
		bodies := strings.Join(s.mail.bodies, "\n")
		s.mail.mu.Unlock()
		if !strings.Contains(bodies, "the weekly report") {
			t.Errorf("the mail API saw %q", bodies)
		}
	})

	t.Run("replayed onto another gate", func(t *testing.T) {
		done, _ := gate.Get(s.y, approveMe)
		p := s.y.Path("gates", "pending", other+".json")
		b, _ := os.ReadFile(p)
		var m map[string]any
		json.Unmarshal(b, &m)
		m["state"] = state.Approved
		m["approval"] = done.Approval
		h := m["history"].([]any)
		m["history"] = append(h, map[string]any{"from": "filed", "to": "approved", "by": done.Approval.By, "at": done.Approval.At})
		b, _ = json.Marshal(m)
		os.Remove(p)
		if err := os.WriteFile(s.y.Path("gates", "resolved", other+".json"), b, 0o640); err != nil {
			t.Fatal(err)
		}
		out, err := s.run(t, "impexec", "once", other)
		g, _ := gate.Get(s.y, other)
		if err == nil || g == nil || g.State != state.Failed || !strings.Contains(out, "its challenge is not this approval's message hash") {
			t.Errorf("impexec once on a replayed approval: %v %s; gate %v", err, out, g)
		}
		s.mail.mu.Lock()
		n := len(s.mail.bodies)
		s.mail.mu.Unlock()
		if n != 1 {
			t.Errorf("the mail API saw %d requests, want the one approved", n)
		}
	})

	t.Run("hostile payload is inert", func(t *testing.T) {
		do("evil gate", chromedp.Navigate(origin+"/g/"+evil), chromedp.WaitVisible(chromedp.ID("payload")))
		title, err := chromedp.Run(ctx, chromedp.Title())
		if err != nil || title == "pwned" {
			t.Errorf("title %q %v: a payload's script ran", title, err)
		}
		p := text("#payload")
		if !strings.Contains(p, "<script>document.title='pwned'") || !strings.Contains(p, `href=\"javascript:alert(2)\"`) || !strings.Contains(p, `\u202e`) {
			t.Errorf("payload not shown as its text, bidi override escaped: %q", p)
		}
		n, err := chromedp.Run(ctx, chromedp.Evaluate[int](`document.querySelectorAll("#evil, img, main script, a[href^='javascript']").length`))
		if err != nil || n != 0 {
			t.Errorf("the payload made %d elements (%v)", n, err)
		}
		mu.Lock()
		defer mu.Unlock()
		if len(dialogs) != 0 {
			t.Errorf("dialogs opened: %q", dialogs)
		}
	})

	cookies, err := chromedp.Call(ctx, network.GetCookies, network.GetCookiesParams{URLs: []string{origin}})
	if err != nil {
		t.Fatal(err)
	}
	var session *http.Cookie
	for _, c := range cookies.Cookies {
		if c.Name == "desk_session" {
			session = &http.Cookie{Name: c.Name, Value: c.Value}
			if !c.HTTPOnly || c.SameSite != network.CookieSameSiteStrict {
				t.Errorf("session cookie %+v: want HttpOnly, SameSite=Strict", c)
			}
		}
	}
	if session == nil {
		t.Fatal("no session cookie in the browser")
	}

	t.Run("cross-origin POST", func(t *testing.T) {
		for _, o := range []string{"http://evil.example", ""} {
			req, _ := http.NewRequest("POST", origin+"/g/"+crossed+"/deny", strings.NewReader("reason=csrf"))
			req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
			if o != "" {
				req.Header.Set("Origin", o)
			}
			req.AddCookie(session)
			resp, err := client.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if g, _ := gate.Get(s.y, crossed); resp.StatusCode != http.StatusForbidden || g.State != state.Filed {
				t.Errorf("POST with Origin %q: %d, gate %s", o, resp.StatusCode, g.State)
			}
		}
	})

	t.Run("deny records the passkey", func(t *testing.T) {
		do("deny", chromedp.Navigate(origin+"/g/"+evil), chromedp.SendKeys(chromedp.ID("reason"), "looks like an attack"),
			chromedp.Click(chromedp.ID("deny")), chromedp.WaitNotPresent(chromedp.ID("deny")))
		g, err := gate.Get(s.y, evil)
		if err != nil || g.State != state.Denied {
			t.Fatalf("evil gate: %v %v", err, g)
		}
		if h := g.History[len(g.History)-1]; h.By != "phone" || h.Why != "looks like an attack" {
			t.Errorf("deny recorded as %+v", h)
		}
	})

	t.Run("revoked passkey", func(t *testing.T) {
		if out, err := s.run(t, "impgate", "desk", "revoke", "phone"); err != nil {
			t.Fatalf("revoke: %v %s", err, out)
		}
		if code, body, h := get("/g/"+crossed, session); code != http.StatusSeeOther || h.Get("Location") != "/login" || strings.Contains(body, "foreign page") {
			t.Errorf("a revoked passkey's session still serves: %d %s", code, h.Get("Location"))
		}
		kr, err := approval.LoadKeyring(s.home)
		if err != nil {
			t.Fatal(err)
		}
		g, _ := gate.Get(s.y, approveMe)
		if _, err := g.VerifyApproval(kr); err == nil {
			t.Error("an approval by a revoked passkey still verifies")
		}
		if out, err := s.run(t, "impgate", "desk", "revoke", "phone"); err == nil || !strings.Contains(out, "no such passkey") {
			t.Errorf("revoking again: %v %s", err, out)
		}
	})
}
