package mcpcall

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/impyard/impyard/lib/approval"
	"github.com/impyard/impyard/lib/config"
	"github.com/impyard/impyard/lib/gate"
	"github.com/impyard/impyard/lib/health"
	"github.com/impyard/impyard/lib/home"
	"github.com/impyard/impyard/lib/mcpserv"
	"github.com/impyard/impyard/lib/state"
	"github.com/impyard/impyard/lib/yard/yardtest"
)

// served serves a Handler of a fresh yard on its socket, the way impgw
// serve does; org is what the handler reads org.toml as.
func served(t *testing.T, org *config.Org) (*Handler, *approval.Key) {
	t.Helper()
	h := &Handler{Yard: yardtest.New(t), Home: t.TempDir(), Org: func() (*config.Org, error) { return org, nil }, M: &mcpserv.Manager{}}
	key, err := approval.Ensure(h.Home, approval.Gateway, io.Discard, "test")
	if err != nil {
		t.Fatal(err)
	}
	ln, err := Listen(h.Home)
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: h}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close(); h.M.Close() })
	return h, key
}

func file(t *testing.T, h *Handler, key *approval.Key, imp string, approved bool) *gate.Gate {
	t.Helper()
	g, err := gate.File(h.Yard, gate.FileOptions{Imp: imp, Intent: "mcp.every", Payload: []byte(`{"server":"every","tool":"echo","arguments":{"message":"hi"}}`),
		By: imp, Actor: "test", Approved: approved, Signer: key})
	if err != nil {
		t.Fatal(err)
	}
	return g
}

func executing(t *testing.T, h *Handler, g *gate.Gate) {
	t.Helper()
	if _, err := gate.Move(h.Yard, g.ID, gate.Change{To: state.Executing, By: "impexec", Actor: "impexec"}); err != nil {
		t.Fatal(err)
	}
}

// The gateway makes the call of an executing gate only: one filed,
// approved but not taken up, whose approval no longer verifies, whose
// server org.toml lacks or whose imp it does not allow is refused,
// nothing sent; a gate that passes reaches the server manager.
func TestCallRefused(t *testing.T) {
	org := &config.Org{MCP: map[string]*config.MCPServer{"every": {
		Command: []string{filepath.Join(t.TempDir(), "no-such-server")}, Isolation: config.IsolationHost, Imps: []string{"yuko"}}}}
	h, key := served(t, org)
	ctx := context.Background()

	filed := file(t, h, key, "yuko", false)
	approved := file(t, h, key, "yuko", true)
	tampered := file(t, h, key, "yuko", true)
	executing(t, h, tampered)
	// The approval signs the gate's subject: its task changed on disk
	// after the approval no longer verifies.
	found, _ := filepath.Glob(filepath.Join(gate.Dir(h.Yard), "*", tampered.ID+".json"))
	if len(found) != 1 {
		t.Fatalf("gate file of %s: %v", tampered.ID, found)
	}
	var doc map[string]any
	b, err := os.ReadFile(found[0])
	if err == nil {
		err = json.Unmarshal(b, &doc)
	}
	if err != nil {
		t.Fatal(err)
	}
	doc["task"] = "t-forged"
	b, _ = json.Marshal(doc)
	if err := os.WriteFile(found[0], b, 0o640); err != nil {
		t.Fatal(err)
	}
	stranger := file(t, h, key, "kai", true)
	executing(t, h, stranger)

	for _, tc := range []struct {
		gate, want string
	}{
		{filed.ID, "is filed, not executing"},
		{approved.ID, "is approved, not executing"},
		{tampered.ID, "approval"},
		{stranger.ID, "imp kai may not call [mcp.every]"},
		{"g-nosuchgate", "g-nosuchgate"},
	} {
		res, sent, err := Call(ctx, h.Home, tc.gate)
		if !errors.Is(err, ErrRefused) || sent || res != nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("gate %s: %s %v %v; want refused, %q, nothing sent", tc.gate, res, sent, err, tc.want)
		}
	}

	ok := file(t, h, key, "yuko", true)
	executing(t, h, ok)
	delete(org.MCP, "every")
	if _, sent, err := Call(ctx, h.Home, ok.ID); !errors.Is(err, ErrRefused) || sent || !strings.Contains(err.Error(), "org.toml has no [mcp.every]") {
		t.Errorf("server not in org.toml: %v %v", sent, err)
	}
	org.MCP["every"] = &config.MCPServer{Command: []string{filepath.Join(t.TempDir(), "no-such-server")}, Isolation: config.IsolationHost, Imps: []string{"yuko"}}
	// Past every check, the manager starts the server, which is not
	// there: an error that is no refusal, nothing sent.
	if _, sent, err := Call(ctx, h.Home, ok.ID); err == nil || errors.Is(err, ErrRefused) || sent || !strings.Contains(err.Error(), "no-such-server") {
		t.Errorf("server that cannot start: %v %v", sent, err)
	}
}

// The socket is its owner's alone, and with no gateway serving it Up
// and Call say the gateway is down, nothing sent.
func TestSocket(t *testing.T) {
	h, _ := served(t, &config.Org{})
	p := home.Dir(h.Home).GatewaySocket()
	for _, f := range []string{p, filepath.Dir(p)} {
		fi, err := os.Stat(f)
		if err != nil || fi.Mode().Perm()&0o077 != 0 {
			t.Errorf("%s: %v %v; want no access for group or others", f, fi.Mode(), err)
		}
	}
	if err := Up(h.Home); err != nil {
		t.Fatalf("Up with a gateway serving: %v", err)
	}
	down := t.TempDir()
	if err := Up(down); !errors.Is(err, health.ErrGatewayDown) {
		t.Errorf("Up with no gateway: %v; want ErrGatewayDown", err)
	}
	if _, sent, err := Call(context.Background(), down, "g-any"); !errors.Is(err, health.ErrGatewayDown) || sent {
		t.Errorf("Call with no gateway: %v %v; want ErrGatewayDown, nothing sent", sent, err)
	}
}
