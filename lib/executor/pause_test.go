package executor

import (
	"context"
	"errors"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/impyard/impyard/lib/mcpcall"
	"github.com/impyard/impyard/lib/mcpserv"
	"github.com/impyard/impyard/lib/pause"
	"github.com/impyard/impyard/lib/state"
)

// A paused imp's approved MCP call is held as any approved gate is: the
// server is not started, the call not made, the gate stays approved;
// after resume it is made.
func TestPauseHoldsMCPCall(t *testing.T) {
	started := filepath.Join(t.TempDir(), "started")
	r := setup(t, "[mcp.notes]\ncommand = [\"/bin/sh\", \"-c\", \"touch "+started+"; exit 1\"]\nisolation = \"host\"\nimps = [\"yuko\"]\n")
	g := approved(t, r, "mcp.notes", `{"server":"notes","tool":"append","arguments":{"text":"hi"}}`)
	if _, err := pause.Pause(r.Yard, pause.Change{Imps: []string{"yuko"}, By: "alice", At: time.Now(), Reason: "travelling"}); err != nil {
		t.Fatal(err)
	}
	out, err := r.Execute(context.Background(), g.ID)
	if !errors.Is(err, ErrPaused) || out == nil || out.State != state.Approved {
		t.Fatalf("an approved MCP call of a paused imp: %v %v, want held, approved", out, err)
	}
	if _, err := os.Stat(started); !os.IsNotExist(err) {
		t.Fatalf("the server was started while its imp was paused: %v", err)
	}
	if _, err := pause.Resume(r.Yard, pause.Change{Imps: []string{"yuko"}, By: "alice", At: time.Now()}); err != nil {
		t.Fatal(err)
	}
	// The gateway makes the call, on its socket.
	ln, err := mcpcall.Listen(r.Home)
	if err != nil {
		t.Fatal(err)
	}
	m := &mcpserv.Manager{Yard: r.Yard, Home: r.Home, Org: r.Org}
	srv := &http.Server{Handler: &mcpcall.Handler{Yard: r.Yard, Home: r.Home, Org: r.Org, M: m}}
	go srv.Serve(ln)
	defer m.Close()
	defer srv.Close()
	out, _ = r.Execute(context.Background(), g.ID)
	if _, err := os.Stat(started); err != nil || out.State == state.Approved {
		t.Errorf("after resume: %v, server started: %v; want the call made", out.State, err)
	}
}
