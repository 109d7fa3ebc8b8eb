package crashstate

import (
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/impyard/impyard/lib/store"
)

// outcomes lists what each state of h after its "ack" mark leaves at rel
// (or "absent"), once each, sorted.
func outcomes(t *testing.T, h *History, plan Plan, rel string) []string {
	t.Helper()
	seen := map[string]bool{}
	for _, s := range h.States(plan) {
		if !s.Marked("ack") {
			continue
		}
		if err := s.Write(); err != nil {
			t.Fatal(err)
		}
		b, err := os.ReadFile(filepath.Join(h.base, rel))
		got := string(b)
		if err != nil {
			got = "absent"
		}
		seen[got] = true
	}
	var out []string
	for k := range seen {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

func history(t *testing.T, recs func(base string) []Record) *History {
	t.Helper()
	base := filepath.Join(t.TempDir(), "base")
	if err := os.MkdirAll(filepath.Join(base, "d", ".tmp"), 0o750); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(base, "d", "log"), []byte("a\n"), 0o640); err != nil {
		t.Fatal(err)
	}
	h, err := Load(base)
	if err != nil {
		t.Fatal(err)
	}
	if err := h.Replay(append(recs(base), Record{Mark: "ack"})); err != nil {
		t.Fatal(err)
	}
	return h
}

// atomicWrite is what store.Tx.Write does, with or without its
// directory's sync.
func atomicWrite(base string, sync bool) []Record {
	tmp, f := filepath.Join(base, "d", ".tmp", ".f1"), filepath.Join(base, "d", "f")
	r := []Record{
		{Kind: store.OpCreate, Path: tmp},
		{Kind: store.OpWrite, Path: tmp, Data: []byte("hello")},
		{Kind: store.OpFsync, Path: tmp},
		{Kind: store.OpRename, Path: tmp, To: f},
	}
	if sync {
		r = append(r, Record{Kind: store.OpDirSync, Path: filepath.Join(base, "d")})
	}
	return r
}

func TestRenameDurableOnlyAfterDirSync(t *testing.T) {
	for _, tc := range []struct {
		sync bool
		want string
	}{
		{false, "absent hello"},
		{true, "hello"},
	} {
		h := history(t, func(base string) []Record { return atomicWrite(base, tc.sync) })
		if got := strings.Join(outcomes(t, h, Plan{}, "d/f"), " "); got != tc.want {
			t.Errorf("dir synced %v: d/f after a power cut: got %q, want %q", tc.sync, got, tc.want)
		}
	}
}

func TestUnsyncedAppendCut(t *testing.T) {
	h := history(t, func(base string) []Record {
		return []Record{{Kind: store.OpAppend, Path: filepath.Join(base, "d", "log"), Off: 2, Data: []byte("bcdef\n")}}
	})
	want := "a\n a\nb a\nbcd a\nbcdef a\nbcdef\n"
	if got := strings.Join(outcomes(t, h, Plan{Wide: true}, "d/log"), " "); got != want {
		t.Errorf("an unsynced append: got %q, want %q", got, want)
	}
	if got := strings.Join(outcomes(t, h, Plan{}, "d/log"), " "); got != "a\n a\nbcd a\nbcdef\n" {
		t.Errorf("an unsynced append, narrow plan: got %q", got)
	}
	h = history(t, func(base string) []Record {
		p := filepath.Join(base, "d", "log")
		return []Record{{Kind: store.OpAppend, Path: p, Off: 2, Data: []byte("bcdef\n")}, {Kind: store.OpFdatasync, Path: p}}
	})
	if got := strings.Join(outcomes(t, h, Plan{}, "d/log"), " "); got != "a\nbcdef\n" {
		t.Errorf("a synced append: got %q", got)
	}
}

// A new directory lost with its parent unsynced takes what was synced
// inside it along.
func TestNewDirectoryNeedsParentSync(t *testing.T) {
	h := history(t, func(base string) []Record {
		n := filepath.Join(base, "d", "new")
		tmp, f := filepath.Join(base, "d", ".tmp", ".g1"), filepath.Join(n, "g")
		return []Record{
			{Kind: store.OpMkdir, Path: n},
			{Kind: store.OpCreate, Path: tmp},
			{Kind: store.OpWrite, Path: tmp, Data: []byte("x")},
			{Kind: store.OpFsync, Path: tmp},
			{Kind: store.OpRename, Path: tmp, To: f},
			{Kind: store.OpDirSync, Path: n},
		}
	})
	if got := strings.Join(outcomes(t, h, Plan{}, "d/new/g"), " "); got != "absent x" {
		t.Errorf("a file in a directory never synced into its parent: got %q, want both", got)
	}
}

func TestMarksAndUntraced(t *testing.T) {
	h := history(t, func(base string) []Record {
		return atomicWrite(base, true)
	})
	var acked int
	for _, s := range h.States(Plan{}) {
		if s.Marked("ack") {
			acked++
		}
	}
	if acked == 0 {
		t.Error("no state lies after the mark")
	}
	base := filepath.Join(t.TempDir(), "b")
	os.Mkdir(base, 0o750)
	h, err := Load(base)
	if err != nil {
		t.Fatal(err)
	}
	if err := h.Replay([]Record{{Kind: store.OpWrite, Path: filepath.Join(base, "ghost"), Data: []byte("x")}}); err == nil {
		t.Error("a write to a file the trace never made was replayed")
	}
}
