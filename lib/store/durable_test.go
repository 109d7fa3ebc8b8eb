package store_test

import (
	"path/filepath"
	"testing"

	"github.com/impyard/impyard/internal/tracetest"
	"github.com/impyard/impyard/lib/store"
)

// Each write the store acknowledges is durable when it returns: the
// trace shows its data synced and every new name on its path synced into
// its directory, a directory the write had to make included.

func TestTxWriteDurableInNewDirectories(t *testing.T) {
	root := t.TempDir()
	rec := tracetest.Record(t)
	d, err := store.OpenDir(root, filepath.Join("queue", "yuko"))
	if err != nil {
		t.Fatal(err)
	}
	err = d.Update(func(tx *store.Tx) error {
		if err := tx.Write("t-1.json", []byte("{}")); err != nil {
			return err
		}
		return tx.Write(filepath.Join(".unique", "k"), []byte("t-1\n"))
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{filepath.Join(d.Path(), "t-1.json"), filepath.Join(d.Path(), ".unique", "k")} {
		if err := rec.Durable(rec.Len(), root, p); err != nil {
			t.Errorf("%v\n%s", err, rec)
		}
	}
}

func TestTxRemoveDurable(t *testing.T) {
	root := t.TempDir()
	d, err := store.OpenDir(root, "gates")
	if err != nil {
		t.Fatal(err)
	}
	if err := d.Update(func(tx *store.Tx) error { return tx.Write("a", []byte("1")) }); err != nil {
		t.Fatal(err)
	}
	rec := tracetest.Record(t)
	if err := d.Update(func(tx *store.Tx) error { return tx.Remove("a") }); err != nil {
		t.Fatal(err)
	}
	ops := rec.Ops()
	if len(ops) != 2 || ops[0].Kind != store.OpUnlink || ops[0].Path != filepath.Join(d.Path(), "a") ||
		ops[1].Kind != store.OpDirSync || ops[1].Path != d.Path() {
		t.Errorf("a removal is not an unlink then its directory synced:\n%s", rec)
	}
}

func TestWriteAtomicDurable(t *testing.T) {
	root := t.TempDir()
	if _, err := store.MkdirAll(root, "ca"); err != nil {
		t.Fatal(err)
	}
	rec := tracetest.Record(t)
	p := filepath.Join(root, "ca", "ca.key")
	if err := store.WriteMode(p, []byte("k"), 0o600); err != nil {
		t.Fatal(err)
	}
	q := filepath.Join(root, "ca", "other")
	if err := store.WriteAtomic(q, []byte("o"), root); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{p, q} {
		if err := rec.Durable(rec.Len(), root, p); err != nil {
			t.Errorf("%v\n%s", err, rec)
		}
	}
}

func TestAppendDurable(t *testing.T) {
	root := t.TempDir()
	rec := tracetest.Record(t)
	// A new directory and a new file, then an existing file.
	line := []byte(`{"a":1}` + "\n")
	if err := store.AppendLineIn(root, filepath.Join("journal", "yuko"), "events.jsonl", line, "mid-append"); err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(root, "journal", "yuko", "events.jsonl")
	if err := rec.Durable(rec.Len(), root, p); err != nil {
		t.Errorf("AppendLineIn into a new directory: %v\n%s", err, rec)
	}
	n := rec.Len()
	if err := store.AppendLine(p, line); err != nil {
		t.Fatal(err)
	}
	if err := rec.Durable(rec.Len(), root, p); err != nil || rec.Len() == n {
		t.Errorf("AppendLine to an existing file: %v\n%s", err, rec)
	}
	q := filepath.Join(root, "notifications.jsonl")
	if err := store.AppendJSONL(q, map[string]int{"a": 1}); err != nil {
		t.Fatal(err)
	}
	if err := rec.Durable(rec.Len(), root, q); err != nil {
		t.Errorf("AppendJSONL creating its file: %v\n%s", err, rec)
	}
}

func TestOverwriteDurable(t *testing.T) {
	root := t.TempDir()
	d, err := store.OpenDir(root, "gates")
	if err != nil {
		t.Fatal(err)
	}
	rec := tracetest.Record(t)
	p := filepath.Join(d.Path(), ".recording")
	var afterFirst, afterSecond int
	err = d.Update(func(tx *store.Tx) error {
		if err := tx.Overwrite(".recording", []byte("g-1 "), true); err != nil {
			return err
		}
		afterFirst = rec.Len()
		if err := tx.Overwrite(".recording", []byte("    "), false); err != nil {
			return err
		}
		afterSecond = rec.Len()
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := rec.Durable(afterFirst, root, p); err != nil {
		t.Errorf("a durable Overwrite: %v\n%s", err, rec)
	}
	// Not asked to be durable, it costs no sync.
	if err := rec.Durable(afterSecond, root, p); err == nil {
		t.Errorf("an Overwrite not asked to be durable was synced:\n%s", rec)
	}
}

// OverwriteAhead's sync runs on while the transaction goes on, and is
// done before the transaction's next file is renamed into place and
// before the transaction ends, even when nothing follows it.
func TestOverwriteAhead(t *testing.T) {
	root := t.TempDir()
	d, err := store.OpenDir(root, "queue")
	if err != nil {
		t.Fatal(err)
	}
	rec := tracetest.Record(t)
	mark := filepath.Join(d.Path(), ".recording")
	file := filepath.Join(d.Path(), "t-1.json")
	err = d.Update(func(tx *store.Tx) error {
		if err := tx.OverwriteAhead(".recording", []byte("t-1 ")); err != nil {
			return err
		}
		return tx.Write("t-1.json", []byte("{}"))
	})
	if err != nil {
		t.Fatal(err)
	}
	rename := -1
	for i, op := range rec.Ops() {
		if op.Kind == store.OpRename && op.To == file {
			rename = i
		}
	}
	if rename < 0 {
		t.Fatalf("no rename of %s:\n%s", file, rec)
	}
	if err := rec.Durable(rename, root, mark); err != nil {
		t.Errorf("the mark is not durable before the next file is renamed into place: %v\n%s", err, rec)
	}
	if err := d.Update(func(tx *store.Tx) error { return tx.OverwriteAhead(".recording", []byte("    ")) }); err != nil {
		t.Fatal(err)
	}
	if err := rec.Durable(rec.Len(), root, mark); err != nil {
		t.Errorf("the mark is not durable when its transaction ends: %v\n%s", err, rec)
	}
}
