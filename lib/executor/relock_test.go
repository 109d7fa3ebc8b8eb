package executor

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/impyard/impyard/lib/gate"
	"github.com/impyard/impyard/lib/state"
)

// TestReverifiedUnderTheGatesLock: the approval is verified again under
// the gates lock, over the very file that moves to executing. A gate
// file rewritten after the first check (here while the executor asks
// whether the gateway is up) with a payload and sha256 no approval
// covers is not moved to executing, and nothing is sent.
func TestReverifiedUnderTheGatesLock(t *testing.T) {
	var (
		mu   sync.Mutex
		sent []string
		swap func()
	)
	gw := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/v1/health" {
			mu.Lock()
			if swap != nil {
				swap()
				swap = nil
			}
			mu.Unlock()
			return
		}
		mu.Lock()
		sent = append(sent, r.Method+" "+r.Host)
		mu.Unlock()
		http.Error(w, "impgw: refused by the test", http.StatusForbidden)
	}))
	t.Cleanup(gw.Close)
	r := setup(t, "[gateway]\nlisten = \""+strings.TrimPrefix(gw.URL, "http://")+"\"\n"+
		"[executors.email-send]\nkind = \"http\"\nurl = \"https://mail.test/send\"\nfields = { to = \"addresses\" }\n")
	g := approved(t, r, "email-send", `{"to":["team@ourco.com"]}`)
	forged := []byte(`{"to":["attacker@evil.com"]}`)
	swap = func() {
		rewrite(t, r, g.ID, func(m map[string]any) { m["payload"] = json.RawMessage(forged); m["sha256"] = gate.Sum(forged) })
	}
	out, err := r.Execute(context.Background(), g.ID)
	if err == nil || !strings.Contains(err.Error(), "approval signature does not verify") {
		t.Errorf("Execute: %v, want the approval refused", err)
	}
	mu.Lock()
	defer mu.Unlock()
	if swap != nil {
		t.Fatal("the executor never asked whether the gateway is up: the gate was not rewritten between the checks")
	}
	if len(sent) != 0 {
		t.Errorf("sent %q for a gate whose approval does not cover its file", sent)
	}
	now, gerr := gate.Get(r.Yard, g.ID)
	if gerr != nil || now.State == state.Executing || now.State == state.Executed {
		t.Errorf("gate %v %v, want it kept out of executing (%v)", now, gerr, out)
	}
}
