// Package gittest serves a git repository over git's smart HTTP
// protocol on loopback, for tests that drive a real git client through
// the gateway.
package gittest

import (
	"net"
	"net/http/cgi"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// Content is the README of the repository Serve serves.
const Content = "through the gateway\n"

// Env is an environment for git that keeps it from the machine's and
// the user's configuration and from any proxy in the environment.
func Env(t testing.TB) []string {
	return []string{"HOME=" + t.TempDir(), "PATH=" + os.Getenv("PATH"), "GIT_CONFIG_NOSYSTEM=1", "GIT_TERMINAL_PROMPT=0", "LANG=C"}
}

// Serve serves a bare repository, /repo.git, holding one commit of a
// README with Content, by git http-backend run as CGI on 127.0.0.1
// until the test ends, and returns the server's port.
func Serve(t testing.TB) int {
	t.Helper()
	git, err := exec.LookPath("git")
	if err != nil {
		t.Fatal("git is needed (scripts/deps installs it): ", err)
	}
	root := t.TempDir()
	run := func(dir string, args ...string) string {
		t.Helper()
		cmd := exec.Command(git, args...)
		cmd.Dir = dir
		cmd.Env = Env(t)
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("git %s: %v", strings.Join(args, " "), err)
		}
		return strings.TrimSpace(string(out))
	}
	work := filepath.Join(root, "work")
	if err := os.MkdirAll(work, 0o755); err != nil {
		t.Fatal(err)
	}
	run(work, "init", "-q", "-b", "main")
	if err := os.WriteFile(filepath.Join(work, "README"), []byte(Content), 0o644); err != nil {
		t.Fatal(err)
	}
	run(work, "add", "README")
	run(work, "-c", "user.name=t", "-c", "user.email=t@example.invalid", "commit", "-q", "-m", "one")
	run(root, "clone", "-q", "--bare", work, filepath.Join(root, "srv", "repo.git"))
	srv := httptest.NewServer(&cgi.Handler{
		Path: filepath.Join(run(root, "--exec-path"), "git-http-backend"),
		Env:  []string{"GIT_PROJECT_ROOT=" + filepath.Join(root, "srv"), "GIT_HTTP_EXPORT_ALL=1"},
	})
	t.Cleanup(srv.Close)
	return srv.Listener.Addr().(*net.TCPAddr).Port
}
