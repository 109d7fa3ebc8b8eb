package tests

import (
	"bufio"
	"bytes"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestRefusalsVisible: proposals the live gateway refuses, by the
// payload's type checks and by a trust entry at deny, are listed by
// impgw log with their reasons, as they happen to one following with -f
// and afterwards; impq show of the task says what became of each of its
// actions, the gate the owner denied included.
func TestRefusalsVisible(t *testing.T) {
	s := newSpine(t, true, bin)
	orgPath := s.y.Path("org.toml")
	org, err := os.ReadFile(orgPath)
	if err != nil {
		t.Fatal(err)
	}
	deny := "[[trust]]\nintent = \"email-send\"\nimp = \"yuko\"\nmatch = { to = \"*@evil.com\" }\nlevel = \"deny\"\n\n[[trust]]"
	if err := os.WriteFile(orgPath, []byte(strings.Replace(string(org), "[[trust]]", deny, 1)), 0o640); err != nil {
		t.Fatal(err)
	}
	out, err := s.run(t, "impq", "add", "--force", "--imp", "yuko", "mail the team")
	if err != nil {
		t.Fatalf("impq add: %v %s", err, out)
	}
	task := strings.TrimSpace(out)
	tok := s.token(t, "yuko", "--task", task, "--run", "r-0000000000000002")

	// A follower started before anything is proposed: it lists what
	// comes after its note, and nothing from before.
	follow := exec.Command(filepath.Join(bin, "impgw"), "log", "-f", "--json", "--verdict", "refused")
	follow.Env = append(os.Environ(), s.env...)
	var followed bytes.Buffer
	follow.Stdout = &followed
	errPipe, err := follow.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := follow.Start(); err != nil {
		t.Fatal(err)
	}
	defer follow.Process.Kill()
	sc := bufio.NewScanner(errPipe)
	if !sc.Scan() || !strings.Contains(sc.Text(), "impgw: note: following ") {
		t.Fatalf("impgw log -f said %q, want its note that it follows", sc.Text())
	}

	for _, p := range []struct {
		envelope string
		code     int
	}{
		{`{"intent":"email-send","payload":{"to":"attacker@evil.com, team@ourco.com","subject":"s","body":"b"}}`, http.StatusBadRequest},
		{`{"intent":"email-send","payload":{"to":["team@ourco.com","attacker@evil.com"],"subject":"s","body":"b"}}`, http.StatusForbidden},
		{`{"intent":"email-send","payload":{"to":["team@ourco.com"],"bcc":["boss@elsewhere.com"],"subject":"s","body":"b"}}`, http.StatusAccepted},
	} {
		if code, answer, _ := s.propose(t, tok, p.envelope); code != p.code {
			t.Fatalf("%s: %d %v, want %d", p.envelope, code, answer, p.code)
		} else if code == http.StatusAccepted {
			if out, err := s.run(t, "impgate", "deny", "--reason", "no bcc to the boss", answer["gate_id"].(string)); err != nil {
				t.Fatalf("deny: %v %s", err, out)
			}
		}
	}

	follow.Process.Signal(os.Interrupt)
	for sc.Scan() {
		t.Logf("impgw log -f: %s", sc.Text())
	}
	if err := follow.Wait(); err != nil {
		t.Fatalf("impgw log -f: %v", err)
	}
	lines := strings.Split(strings.TrimSpace(followed.String()), "\n")
	if len(lines) != 2 || !strings.Contains(lines[0], `"refusal":"payload-refused"`) || !strings.Contains(lines[1], `"refusal":"trust-deny"`) ||
		!strings.Contains(lines[0], `"task":"`+task+`"`) {
		t.Errorf("impgw log -f listed:\n%s\nwant the two refusals, as recorded", followed.String())
	}

	table, err := s.run(t, "impgw", "log", "--verdict", "refused")
	if err != nil {
		t.Fatalf("impgw log: %v %s", err, table)
	}
	for _, want := range []string{"REASON", "(payload-refused)", `field "to"`, "(trust-deny)", `refused for yuko by`} {
		if !strings.Contains(table, want) {
			t.Errorf("impgw log --verdict refused lacks %q:\n%s", want, table)
		}
	}
	shown, err := s.run(t, "impq", "show", task)
	if err != nil {
		t.Fatalf("impq show: %v %s", err, shown)
	}
	var actions []string
	for _, l := range strings.Split(shown, "\n") {
		if strings.HasPrefix(l, "action ") {
			actions = append(actions, l)
		}
	}
	if len(actions) != 3 || !strings.Contains(shown, "refused (payload-refused) by impgw") || !strings.Contains(shown, "refused (trust-deny) by impgw") ||
		!strings.Contains(shown, "email-send denied by alice at ") || !strings.Contains(shown, ": no bcc to the boss") {
		t.Errorf("impq show:\n%s\nwant its three actions: two refusals and the denied gate", shown)
	}
}
