// Package blob keeps content-addressed bytes under blobs/sha256/<hex>,
// written through lib/store and verified on every read: a file whose bytes
// no longer hash to its name is refused, never returned.
package blob

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"regexp"
	"strings"

	"github.com/impyard/impyard/lib/store"
	"github.com/impyard/impyard/lib/yard"
)

// Dir is the store directory of blobs, relative to the yard.
const Dir = "blobs/sha256"

// Prefix marks a blob reference in a payload: "sha256:<hex>".
const Prefix = "sha256:"

var hexPattern = regexp.MustCompile(`^[0-9a-f]{64}$`)

// Sum is the hex sha256 of data.
func Sum(data []byte) string {
	s := sha256.Sum256(data)
	return hex.EncodeToString(s[:])
}

// Put stores data and returns its hex sha256. Storing the same bytes again
// is a no-op.
func Put(y *yard.Yard, data []byte) (string, error) {
	sum := Sum(data)
	d, err := store.OpenDir(y.Root, Dir)
	if err != nil {
		return "", err
	}
	err = d.Update(func(tx *store.Tx) error {
		if old, err := tx.Read(sum); err == nil && Sum(old) == sum {
			return nil
		}
		return tx.Write(sum, data)
	})
	if err != nil {
		return "", fmt.Errorf("blob %s: %w", sum, err)
	}
	return sum, nil
}

// Get reads the blob named by hex (or "sha256:<hex>") and checks its bytes
// still hash to that name.
func Get(y *yard.Yard, ref string) ([]byte, error) {
	sum := strings.TrimPrefix(ref, Prefix)
	if !hexPattern.MatchString(sum) {
		return nil, fmt.Errorf("blob reference %q is not sha256:<64 hex digits>", ref)
	}
	path := y.Path(Dir, sum)
	data, err := store.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("blob %s: %w", sum, err)
	}
	if got := Sum(data); got != sum {
		return nil, fmt.Errorf("blob %s: its bytes hash to %s, not to its name (changed on disk?); refusing it", path, got)
	}
	return data, nil
}
