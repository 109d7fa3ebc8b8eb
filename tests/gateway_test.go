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
	cmd := exec.Command(filepath.Join(bin, "impgw"), "serve", "--listen", "127.0.0.1:0")
	cmd.Env = append(os.Environ(), s.env...)
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
	addr := make(chan string, 1)
	drained := make(chan struct{})
	go func() {
		defer close(drained)
		sc := bufio.NewScanner(pr)
		for sc.Scan() {
			line := sc.Text()
			mu.Lock()
			logged.WriteString(line + "\n")
			mu.Unlock()
			if _, rest, ok := strings.Cut(line, " serving on "); ok {
				a, _, _ := strings.Cut(rest, " ")
				select {
				case addr <- a:
				default:
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
			t.Logf("impgw stderr:\n%s", logged.String())
		}
	})
	select {
	case a := <-addr:
		return a
	case <-drained:
	case <-time.After(10 * time.Second):
	}
	mu.Lock()
	defer mu.Unlock()
	t.Fatalf("impgw did not say where it serves:\n%s", logged.String())
	return ""
}
