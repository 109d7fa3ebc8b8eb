package executor

import (
	"encoding/base64"
	"os"
	"path/filepath"
	"slices"
	"testing"
)

func TestPushBranch(t *testing.T) {
	for _, c := range []struct {
		branch, want string // want "" means refused
	}{
		{"imp/yuko/fix", "imp/yuko/fix"},
		{"refs/heads/imp/yuko/fix", "imp/yuko/fix"},
		{"imp/yuko/fix-2.1_a", "imp/yuko/fix-2.1_a"},
		{"imp/yuko/9", "imp/yuko/9"},
		{"imp/yuko/", ""},
		{"imp/yuko/.hidden", ""},
		{"imp/yuko/-flag", ""},
		{"imp/yuko/a..b", ""},
		{"imp/yuko/a.lock", ""},
		{"imp/yuko/a.", ""},
		{"imp/yuko/a/b", ""},
		{"imp/yuko/a b", ""},
		{"imp/yukon/fix", ""},
		{"imp/rex/fix", ""},
		{"main", ""},
		{"refs/tags/imp/yuko/fix", ""},
		{"refs/heads/refs/heads/imp/yuko/fix", ""},
	} {
		got, err := pushBranch("yuko", c.branch)
		if c.want == "" {
			if err == nil {
				t.Errorf("pushBranch(%q) = %q, want refused", c.branch, got)
			}
			continue
		}
		if err != nil || got != c.want {
			t.Errorf("pushBranch(%q) = %q %v, want %q", c.branch, got, err, c.want)
		}
	}
}

func TestGitCredentials(t *testing.T) {
	r := setup(t, "")
	// No secret yet: nothing to pass, and no error.
	if env, err := r.gitCredentials("yuko", "https://git.example/yuko.git"); err != nil || env != nil {
		t.Errorf("no secret: %q %v", env, err)
	}
	os.MkdirAll(filepath.Join(r.Home, "secrets"), 0o700)
	os.WriteFile(filepath.Join(r.Home, "secrets", "git-yuko"), []byte("s3cret\n"), 0o600)
	want := []string{"GIT_CONFIG_COUNT=1", "GIT_CONFIG_KEY_0=http.extraHeader",
		"GIT_CONFIG_VALUE_0=Authorization: Basic " + base64.StdEncoding.EncodeToString([]byte("x-access-token:s3cret"))}
	if env, err := r.gitCredentials("yuko", "https://git.example/yuko.git"); err != nil || !slices.Equal(env, want) {
		t.Errorf("with a secret: %q %v, want %q", env, err, want)
	}
	// A local remote never gets the secret; another imp never gets yuko's.
	if env, err := r.gitCredentials("yuko", "/srv/git/yuko.git"); err != nil || env != nil {
		t.Errorf("local remote: %q %v", env, err)
	}
	if env, err := r.gitCredentials("rex", "https://git.example/rex.git"); err != nil || env != nil {
		t.Errorf("another imp: %q %v", env, err)
	}
	// A secret that cannot be read is an error, not a push without it.
	os.Remove(filepath.Join(r.Home, "secrets", "git-yuko"))
	os.Mkdir(filepath.Join(r.Home, "secrets", "git-yuko"), 0o700)
	if env, err := r.gitCredentials("yuko", "https://git.example/yuko.git"); err == nil {
		t.Errorf("unreadable secret: %q, want an error", env)
	}
}
