package ledger

import (
	"os"
	"strings"

	"github.com/impyard/impyard/lib/id"
	"github.com/impyard/impyard/lib/yard"
)

// Imps lists the imps with a ledger, by the names of the files in
// ledger/; a missing ledger/ has none. Names that are not imp names are
// skipped: Spent would refuse them.
func Imps(y *yard.Yard) ([]string, error) {
	entries, err := os.ReadDir(y.Path("ledger"))
	if os.IsNotExist(err) {
		return nil, nil
	}
	var imps []string
	for _, e := range entries {
		if n, ok := strings.CutSuffix(e.Name(), ".jsonl"); ok && id.CheckName(n) == nil {
			imps = append(imps, n)
		}
	}
	return imps, err
}
