package control

import (
	"encoding/json"
	"net/http"
	"os"
	"strings"
	"sync"
	"testing"

	"github.com/impyard/impyard/lib/config"
	"github.com/impyard/impyard/lib/event"
	"github.com/impyard/impyard/lib/store"
	"github.com/impyard/impyard/lib/token"
)

// events counts the events of each kind in a JSONL file.
func events(t *testing.T, path string) map[string]int {
	t.Helper()
	n := map[string]int{}
	if _, err := store.ReadJSONL(path, func(line []byte) error {
		var e event.Event
		if json.Unmarshal(line, &e) == nil {
			n[e.Event]++
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	return n
}

// TestNoteFlood sends 300 notes of about 16 KiB at once from one run:
// the run's quota (by default 512 KiB) admits 32, the rest get 429, and
// the refusal is recorded exactly once. Another run is not affected.
func TestNoteFlood(t *testing.T) {
	f := newFixture(t)
	tok := f.token(t, "yuko", "")
	note, _ := json.Marshal(map[string]string{"note": strings.Repeat("n", 16000)})
	var wg sync.WaitGroup
	var mu sync.Mutex
	codes := map[int]int{}
	for range 300 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			code, _ := f.do(t, tok, "POST", "/v1/journal", string(note))
			mu.Lock()
			codes[code]++
			mu.Unlock()
		}()
	}
	wg.Wait()
	want := int(config.DefaultNoteBytesPerRun / 16000)
	if codes[200] != want || codes[429] != 300-want {
		t.Fatalf("statuses %v, want %d admitted and the rest 429", codes, want)
	}
	journal := events(t, f.y.Path("journal", "yuko", "events.jsonl"))
	audit := events(t, f.y.Path("runs", "decisions.jsonl"))
	for name, got := range map[string]map[string]int{"journal": journal, "audit log": audit} {
		if got["note"] != want || got["note-quota"] != 1 {
			t.Errorf("%s: %v, want %d notes and one note-quota", name, got, want)
		}
	}
	other, err := token.Issue(f.home, "yuko", "r-0000000000000002", "")
	if err != nil {
		t.Fatal(err)
	}
	if code, out := f.do(t, other, "POST", "/v1/journal", `{"note":"another run"}`); code != 200 {
		t.Fatalf("another run's note: %d %v", code, out)
	}
}

// The quotas come from org.toml.
func TestNoteQuotaFromOrg(t *testing.T) {
	f := newFixture(t)
	os.WriteFile(f.y.Path("org.toml"), []byte(strings.Replace(org, "[gateway]\n", "[gateway]\nnotes_per_run = 3\n", 1)), 0o640)
	tok := f.token(t, "yuko", "")
	for i := range 5 {
		code, out := f.do(t, tok, "POST", "/v1/journal", `{"note":"one"}`)
		if want := map[bool]int{true: http.StatusOK, false: http.StatusTooManyRequests}[i < 3]; code != want {
			t.Fatalf("note %d: %d %v, want %d", i+1, code, out, want)
		}
		if i >= 3 && !strings.Contains(out["error"].(string), "quota of 3 notes") {
			t.Fatalf("note %d: %v", i+1, out)
		}
	}
	os.WriteFile(f.y.Path("org.toml"), []byte(strings.Replace(org, "[gateway]\n", "[gateway]\nnote_bytes_per_run = 10\n", 1)), 0o640)
	tok = f.token(t, "rex", "")
	f.api = &API{Yard: f.y, Home: f.home, Policy: f.api.Policy}
	if code, _ := f.do(t, tok, "POST", "/v1/journal", `{"note":"0123456789"}`); code != 200 {
		t.Fatalf("a note of exactly the byte quota: %d", code)
	}
	if code, _ := f.do(t, tok, "POST", "/v1/journal", `{"note":"x"}`); code != 429 {
		t.Fatalf("one byte over the byte quota: %d", code)
	}
	if got := events(t, f.y.Path("journal", "rex", "events.jsonl")); got["note"] != 1 || got["note-quota"] != 1 {
		t.Fatalf("rex's journal: %v", got)
	}
}
