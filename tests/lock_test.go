package tests

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/impyard/impyard/lib/gate"
	"github.com/impyard/impyard/lib/state"
)

// TestExecutorRace starts two impexec on the same yard at once, with many
// gates approved and waiting, and checks at the upstream that every gate
// took effect exactly once and ended executed: the per-gate execution lock
// keeps the second executor from taking a gate the first is sending as
// one a dead executor left behind.
func TestExecutorRace(t *testing.T) {
	s := newSpine(t, true, bin)
	const n = 40
	gates := map[string]string{} // the payload's n -> gate
	for i := 0; i < n; i++ {
		g, err := gate.File(s.y, gate.FileOptions{Imp: "yuko", Intent: "email-send", Payload: []byte(fmt.Sprintf(`{"to":["x@elsewhere.com"],"n":%d}`, i)), By: "yuko", Actor: "test"})
		if err != nil {
			t.Fatal(err)
		}
		if out, err := s.run(t, "impgate", "approve", g.ID); err != nil {
			t.Fatalf("approve: %v %s", err, out)
		}
		gates[fmt.Sprint(i)] = g.ID
	}
	// A slow upstream keeps each gate executing for a while, and a rescan
	// every 100ms has each executor look again and again at the gates the
	// other is sending.
	mail := s.mail.srv.Config.Handler
	s.mail.srv.Config.Handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		time.Sleep(200 * time.Millisecond)
		mail.ServeHTTP(w, r)
	})
	s.daemon(t, bin, "impexec", "run", "--rescan", "100ms")
	s.daemon(t, bin, "impexec", "run", "--rescan", "100ms")
	for _, gid := range gates {
		if g := s.waitState(t, gid, state.Executed, state.Failed); g.State != state.Executed {
			t.Errorf("gate %s ended %s: %s", gid, g.State, g.History[len(g.History)-1].Why)
		}
	}
	got := map[string]int{}
	s.mail.mu.Lock()
	for i, body := range s.mail.bodies {
		var p struct{ N int }
		json.Unmarshal([]byte(body), &p)
		gid := gates[fmt.Sprint(p.N)]
		got[gid]++
		if s.mail.keys[i] != gid {
			t.Errorf("gate %s was sent under Idempotency-Key %q", gid, s.mail.keys[i])
		}
	}
	s.mail.mu.Unlock()
	for _, gid := range gates {
		if got[gid] != 1 {
			t.Errorf("gate %s reached the upstream %d times, want once", gid, got[gid])
		}
	}
}

// TestSupervisorLock starts two impsup on the same yard at once. The
// containerd they are pointed at is a socket this test holds open and
// never answers, so the supervisor that took the yard's lock stays in its
// dial; the other must refuse, naming the other supervisor, while the
// first still runs. No containerd is needed: the lock is taken first.
func TestSupervisorLock(t *testing.T) {
	y := newYard(t)
	// A unix socket path is at most 107 bytes; t.TempDir may be longer.
	sockDir, err := os.MkdirTemp("", "impsup-lock-")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(sockDir)
	sock := filepath.Join(sockDir, "containerd.sock")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	dialled := make(chan net.Conn, 16)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			dialled <- c
		}
	}()
	if err := os.WriteFile(y.Path("org.toml"), []byte(fmt.Sprintf("[containerd]\naddress = %q\n", sock)), 0o640); err != nil {
		t.Fatal(err)
	}
	type exit struct {
		i      int
		err    error
		stderr string
	}
	exits := make(chan exit, 2)
	var cmds [2]*exec.Cmd
	for i := range cmds {
		cmd := exec.Command(filepath.Join(bin, "impsup"), "run")
		cmd.Env = append(os.Environ(), "IMPYARD_ROOT="+y.Root, "IMPYARD_HOME="+t.TempDir(), "USER=tester")
		var e bytes.Buffer
		cmd.Stderr = &e
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		cmds[i] = cmd
		go func() { err := cmd.Wait(); exits <- exit{i, err, e.String()} }()
	}
	defer func() {
		for _, c := range cmds {
			c.Process.Kill()
		}
	}()
	select {
	case c := <-dialled:
		defer c.Close()
	case <-time.After(10 * time.Second):
		t.Fatal("no impsup dialled containerd")
	}
	var loser exit
	select {
	case loser = <-exits:
	case <-time.After(10 * time.Second):
		t.Fatal("neither impsup refused while the other held the yard")
	}
	var ee *exec.ExitError
	if !errors.As(loser.err, &ee) || ee.ExitCode() == 0 || !strings.Contains(loser.stderr, "another impsup is running on "+y.Root) {
		t.Errorf("the second impsup: %v, stderr %q; want a refusal naming the yard", loser.err, loser.stderr)
	}
	winner := cmds[1-loser.i]
	select {
	case e := <-exits:
		t.Fatalf("the supervisor holding the yard ended too: %v %s", e.err, e.stderr)
	default:
	}
	// Let go of the stand-in: the supervisor fails at its dial and goes.
	ln.Close()
	winner.Process.Kill()
}
