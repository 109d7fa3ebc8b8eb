package ledger

import (
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/impyard/impyard/lib/config"
	"github.com/impyard/impyard/lib/yard/yardtest"
)

// Share names the cap a day's proactive spend has used most of, by its
// share of the cap; on a tie the first of daily, bytes and tokens_daily;
// a cap of zero is not a cap, and a budget without one has no share.
func TestShare(t *testing.T) {
	for _, tc := range []struct {
		b     config.Budget
		p     Totals
		share float64
		key   string
		used  string
	}{
		{config.Budget{}, Totals{Cost: 5, Bytes: 5, InputTokens: 5}, 0, "", ""},
		{config.Budget{Daily: 2}, Totals{}, 0, "daily", "spent 0 of its daily 2"},
		{config.Budget{Daily: 2}, Totals{Cost: 1}, 0.5, "daily", "spent 1 of its daily 2"},
		{config.Budget{Bytes: 8}, Totals{Cost: 1, Bytes: 2}, 0.25, "bytes", "moved 2 of its daily 8 bytes"},
		{config.Budget{TokensDaily: 10}, Totals{InputTokens: 3, OutputTokens: 5}, 0.8, "tokens_daily", "used 8 of its daily 10 model tokens"},
		{config.Budget{Daily: 2, Bytes: 10, TokensDaily: 100}, Totals{Cost: 1, Bytes: 5, InputTokens: 50}, 0.5, "daily", "spent 1 of its daily 2"},
		{config.Budget{Daily: 2, Bytes: 10, TokensDaily: 100}, Totals{Cost: 1, Bytes: 6, InputTokens: 50}, 0.6, "bytes", "moved 6 of its daily 10 bytes"},
		{config.Budget{Daily: 2, Bytes: 10, TokensDaily: 100}, Totals{Cost: 1, Bytes: 5, InputTokens: 60, OutputTokens: 60}, 1.2, "tokens_daily", "used 120 of its daily 100 model tokens"},
	} {
		share, key, used := Share(tc.b, tc.p)
		if share != tc.share || key != tc.key || used != tc.used {
			t.Errorf("Share(%+v, %+v) = %v, %q, %q; want %v, %q, %q", tc.b, tc.p, share, key, used, tc.share, tc.key, tc.used)
		}
	}
}

// Imps lists the imps by their ledger files, skipping names that are not
// an imp's, and a yard without ledger/ has none.
func TestImps(t *testing.T) {
	y := yardtest.New(t)
	if imps, err := Imps(y); err != nil || imps != nil {
		t.Fatalf("no ledger/: %v, %v", imps, err)
	}
	dir := y.Path("ledger")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, n := range []string{"yuko.jsonl", "kai.jsonl", "yuko.jsonl.tmp", "Not An Imp.jsonl", ".jsonl", "notes.txt"} {
		if err := os.WriteFile(filepath.Join(dir, n), nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	imps, err := Imps(y)
	slices.Sort(imps)
	if err != nil || !slices.Equal(imps, []string{"kai", "yuko"}) {
		t.Errorf("Imps = %v, %v; want kai and yuko", imps, err)
	}
}

// A call refused for the tokens it would reserve says how many, its
// input and its output together.
func TestPassesNamesTheReservation(t *testing.T) {
	b := config.Budget{TokensDaily: 1000}
	why := Passes(b, Totals{InputTokens: 500, OutputTokens: 100}, Entry{InputTokens: 300, OutputTokens: 200})
	if want := "used 600 of its daily 1000 model tokens on proactive work, and this call reserves 500 more"; why != want {
		t.Errorf("Passes = %q, want %q", why, want)
	}
}
