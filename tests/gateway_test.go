package tests

import (
	"bufio"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// serveGateway starts impgw serve for the spine's yard on a port the
// kernel picks, and returns the address impgw says it serves on: the
// listener is impgw's own from the start, so no other process can take
// the port between a probe and the gateway's bind.
func (s *spine) serveGateway(t testing.TB) string {
	t.Helper()
	return startImpgw(t, s.env, " serving on ")[0]
}

// startImpgw starts impgw serve --listen 127.0.0.1:0 with env, stopped
// when the test ends, and returns the address logged after each of
// marks (" serving on ", " inbound relay on "), in order.
func startImpgw(t testing.TB, env []string, marks ...string) []string {
	t.Helper()
	return startDaemon(t, env, "impgw", []string{"serve", "--listen", "127.0.0.1:0"}, marks...)
}

// startDaemon starts binary name with args and env, stopped when the
// test ends, and returns the word logged after each of marks, in order.
func startDaemon(t testing.TB, env []string, name string, args []string, marks ...string) []string {
	t.Helper()
	cmd := exec.Command(filepath.Join(bin, name), args...)
	cmd.Env = append(os.Environ(), env...)
	pr, pw, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = pw
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	pw.Close()
	var mu sync.Mutex
	var logged strings.Builder
	addrs := make([]string, len(marks))
	found := make(chan struct{})
	drained := make(chan struct{})
	go func() {
		defer close(drained)
		sc := bufio.NewScanner(pr)
		left := len(marks)
		for sc.Scan() {
			line := sc.Text()
			mu.Lock()
			logged.WriteString(line + "\n")
			mu.Unlock()
			for i, m := range marks {
				if _, rest, ok := strings.Cut(line, m); ok && addrs[i] == "" && left > 0 {
					addrs[i], _, _ = strings.Cut(rest, " ")
					if left--; left == 0 {
						close(found)
					}
				}
			}
		}
	}()
	t.Cleanup(func() {
		cmd.Process.Signal(os.Interrupt)
		done := make(chan struct{})
		go func() { cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(5 * time.Second):
			cmd.Process.Kill()
			<-done
		}
		<-drained
		if t.Failed() {
			t.Logf("%s stderr:\n%s", name, logged.String())
		}
	})
	select {
	case <-found:
		return addrs
	case <-drained:
	case <-time.After(10 * time.Second):
	}
	mu.Lock()
	defer mu.Unlock()
	t.Fatalf("%s did not say where it serves:\n%s", name, logged.String())
	return nil
}
