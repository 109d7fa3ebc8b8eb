package executor

import (
	"context"
	"encoding/json"
	"os"
	"strings"
	"testing"
	"time"
)

// TestNotifyEditedGate: a gate whose file was edited after filing, its
// sha256 cut short, is told as edited, with no sha256 or command to
// approve it (none could), and the executor goes on.
func TestNotifyEditedGate(t *testing.T) {
	r, received, _, _ := notifyRunner(t, "[notify]\ncommand = [\"RECEIVE\"]\n")
	g := fileGate(t, r, `{"to":["team@ourco.com"],"subject":"Weekly digest"}`)
	p := r.Yard.Path("gates", "pending", g.ID+".json")
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	json.Unmarshal(b, &m)
	m["sha256"] = "ab"
	b, _ = json.Marshal(m)
	if err := os.WriteFile(p, b, 0o640); err != nil {
		t.Fatal(err)
	}
	if err := r.NotifyOnce(context.Background(), time.Now()); err != nil {
		t.Fatal(err)
	}
	got := receivedMessages(t, received)
	if len(got) != 1 || got[0].Gate != g.ID || got[0].SHA256 != "" || got[0].Approve != "" ||
		!strings.HasPrefix(got[0].Summary, "EDITED after filing, it can never be approved: ") {
		t.Fatalf("messages %+v, want one telling the gate edited, with nothing to approve it", got)
	}
}
