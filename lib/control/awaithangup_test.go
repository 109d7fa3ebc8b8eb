package control

import (
	"context"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/impyard/impyard/lib/ca"
	"github.com/impyard/impyard/lib/gate"
	"github.com/impyard/impyard/lib/gateway"
	"github.com/impyard/impyard/lib/state"
)

// A box that hangs up while its auto-approved proposal waits for the
// execution (no executor runs here, so the wait would last the whole
// [gateway] wait of 15s) ends the handler at once, through the gateway
// as impgw serves it. The gate stays approved, for the executor.
func TestHangupEndsAwait(t *testing.T) {
	f := newFixture(t)
	dir := t.TempDir()
	policyPath := filepath.Join(dir, "gateway.json")
	if err := os.WriteFile(policyPath, []byte(policy), 0o640); err != nil {
		t.Fatal(err)
	}
	authority, err := ca.Init(filepath.Join(dir, "home"))
	if err != nil {
		t.Fatal(err)
	}
	minter, err := ca.NewMinter(authority, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	returned := make(chan struct{})
	g, err := gateway.New(gateway.Config{PolicyPath: policyPath, DecisionsPath: filepath.Join(dir, "decisions.jsonl"), Minter: minter,
		Control: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			f.api.ServeHTTP(w, r)
			if r.URL.Path == "/v1/actions" {
				close(returned)
			}
		})})
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan struct{})
	go func() { defer close(served); g.Serve(ctx, ln, time.Second) }()
	t.Cleanup(func() { cancel(); <-served })

	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	body := `{"intent":"email-send","payload":{"to":["a@ourco.com"],"subject":"hi"}}`
	if _, err := io.WriteString(c, "POST /v1/actions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer "+f.token(t, "yuko", "")+
		"\r\nContent-Length: "+strconv.Itoa(len(body))+"\r\n\r\n"+body); err != nil {
		t.Fatal(err)
	}
	// The proposal's record is written once its gate is filed, before the
	// wait begins.
	var gateID string
	for gateID == "" {
		select {
		case <-returned:
			t.Fatal("the handler returned before the client hung up")
		case <-time.After(5 * time.Millisecond):
		}
		if recs := proposalRecords(t, f); len(recs) == 1 {
			gateID, _ = recs[0]["gate_id"].(string)
			if gateID == "" {
				t.Fatalf("record %v", recs[0])
			}
		}
	}
	c.Close()
	select {
	case <-returned:
	case <-time.After(10 * time.Second):
		t.Fatal("the handler still waits for a box that hung up")
	}
	if g, err := gate.Get(f.y, gateID); err != nil || g.State != state.Approved {
		t.Errorf("gate %s: %+v %v, want it approved still", gateID, g, err)
	}
}
