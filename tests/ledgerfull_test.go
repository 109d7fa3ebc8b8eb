package tests

import (
	"errors"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/impyard/impyard/lib/gateway"
)

// TestFullLedgerRefusesProactiveCalls runs impgw serve with the yard's
// ledger/ on a full file system: a model call of proactive work is
// refused 503 before it goes out, since its usage could not be recorded,
// and the decision log says so; owner work still goes; with room again,
// the proactive call goes too.
func TestFullLedgerRefusesProactiveCalls(t *testing.T) {
	m := newMeterYard(t, "[budget.yuko]\ntokens_daily = 100000\n")
	dir := m.y.Path("ledger")
	if err := os.MkdirAll(dir, 0o750); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mount("tmpfs", dir, "tmpfs", 0, "size=64k,mode=0750"); err != nil {
		t.Skipf("cannot mount a tmpfs for a full ledger (needs root): %v", err)
	}
	t.Cleanup(func() { unix.Unmount(dir, unix.MNT_DETACH) })
	filler := filepath.Join(dir, "filler")
	f, err := os.Create(filler)
	if err != nil {
		t.Fatal(err)
	}
	for err == nil {
		_, err = f.Write(make([]byte, 4096))
	}
	f.Close()
	if !errors.Is(err, syscall.ENOSPC) {
		t.Fatalf("filling the ledger's file system: %v", err)
	}
	owner, proactive := m.client(t, m.task(t, "asked by alice")), m.client(t, m.task(t, "--proactive", "digest"))

	body, h := m.call(t, proactive, "/v1/chat/completions", http.StatusServiceUnavailable)
	if !strings.Contains(body, "spend cannot be recorded") || !strings.Contains(body, "no space left on device") {
		t.Errorf("refusal: %q", body)
	}
	id := h.Get("X-Impgw-Decision")
	recs, _, err := gateway.ReadRecords(m.y.Path("runs", "decisions.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range recs {
		if r.ID == id && (r.Verdict != gateway.VerdictDeny || r.Status != http.StatusServiceUnavailable || r.RefusedBy != gateway.RefusedByGateway) {
			t.Errorf("record of the refused call: %+v", r)
		}
		if r.Verdict == gateway.VerdictAllow {
			t.Errorf("a call went out with the ledger full: %+v", r)
		}
	}

	// Owner work is never held for its spend: it goes, and the ledger's
	// failure is logged.
	m.call(t, owner, "/v1/chat/completions", http.StatusOK)

	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
	m.call(t, proactive, "/v1/chat/completions", http.StatusOK)
}
