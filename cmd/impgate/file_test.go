package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/impyard/impyard/lib/yard/yardtest"
)

// impgate file holds a payload to its executor's declared fields, as the
// gateway does: a refused payload files nothing.
func TestFileChecksDeclaredFields(t *testing.T) {
	y := yardtest.New(t)
	os.WriteFile(y.Path("org.toml"), []byte(`[executors.email-send]
kind = "message-user"
fields = { to = "addresses", subject = "text" }
`), 0o640)
	for _, tc := range []struct {
		payload string
		code    int
		stderr  string
	}{
		{`{"to":"attacker@evil.com, team@ourco.com"}`, 1, `field "to" is not of its declared type addresses`},
		{`{"to":["team@ourco.com"],"bcc":["attacker@evil.com"]}`, 1, `field "bcc" is not a declared field`},
		{`{"to":["team@ourco.com"],"subject":"hi"}`, 0, ""},
	} {
		var stdout, stderr bytes.Buffer
		code := run(context.Background(), []string{"file", "--root", y.Root, "--imp", "yuko", "--intent", "email-send", "--payload-file", "-", "--as", "alice"},
			strings.NewReader(tc.payload), &stdout, &stderr)
		if code != tc.code || !strings.Contains(stderr.String(), tc.stderr) {
			t.Errorf("%s: exit %d, stderr %q; want %d, %q", tc.payload, code, stderr.String(), tc.code, tc.stderr)
		}
	}
	pending, _ := filepath.Glob(y.Path("gates", "pending", "*.json"))
	if len(pending) != 1 {
		t.Errorf("%d gates filed, want the one whose payload fits", len(pending))
	}
}
