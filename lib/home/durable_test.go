package home_test

import (
	"path/filepath"
	"testing"

	"github.com/impyard/impyard/internal/tracetest"
	"github.com/impyard/impyard/lib/home"
	"github.com/impyard/impyard/lib/store"
)

// IMPYARD_HOME and its directories, made on first use, are synced into
// their parents, so a key, token or marker written durably inside them
// survives a power cut.
func TestHomeDirectoriesDurable(t *testing.T) {
	root := t.TempDir()
	h := home.Dir(filepath.Join(root, "home"))
	rec := tracetest.Record(t)
	if err := h.Private(h.Keys()); err != nil {
		t.Fatal(err)
	}
	if _, err := store.WriteNew(h.Key("owner"), []byte("k"), 0o600); err != nil {
		t.Fatal(err)
	}
	tokens, err := h.Tokens()
	if err != nil {
		t.Fatal(err)
	}
	if err := tokens.Update(func(tx *store.Tx) error { return tx.Write("org.token", []byte("t")) }); err != nil {
		t.Fatal(err)
	}
	// Made through the store, which syncs each into its parent.
	made := map[string]bool{}
	for _, op := range rec.Ops() {
		if op.Kind == store.OpMkdir {
			made[op.Path] = true
		}
	}
	for _, d := range []string{string(h), h.Keys(), tokens.Path()} {
		if !made[d] {
			t.Errorf("%s was not made through the store:\n%s", d, rec)
		}
	}
	for _, p := range []string{h.Key("owner"), filepath.Join(tokens.Path(), "org.token")} {
		if err := rec.Durable(rec.Len(), root, p); err != nil {
			t.Errorf("%v\n%s", err, rec)
		}
	}
}
