package cli

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestReadInput(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "in.json")
	if err := os.WriteFile(p, []byte(`{"a":1}`), 0o600); err != nil {
		t.Fatal(err)
	}
	e := &Env{Name: "impq", Stdin: strings.NewReader("from stdin")}
	if b, err := e.ReadInput("-", 100); err != nil || string(b) != "from stdin" {
		t.Errorf("stdin: %q, %v", b, err)
	}
	if b, err := e.ReadInput(p, 100); err != nil || string(b) != `{"a":1}` {
		t.Errorf("file: %q, %v", b, err)
	}
	missing := filepath.Join(dir, "missing.json")
	if b, err := e.ReadInput(missing, 100); !errors.Is(err, os.ErrNotExist) || !strings.Contains(err.Error(), missing) || b != nil {
		t.Errorf("missing file: %q, %v; want an error naming it", b, err)
	}
	if _, err := e.ReadInput(p, 3); err == nil || !strings.Contains(err.Error(), p+": over the 3 byte limit") {
		t.Errorf("over the limit: %v", err)
	}
	e.Stdin = strings.NewReader("0123456789")
	if _, err := e.ReadInput("-", 3); err == nil || !strings.Contains(err.Error(), "standard input: over the 3 byte limit") {
		t.Errorf("stdin over the limit: %v", err)
	}
}

func TestOneStdin(t *testing.T) {
	if err := OneStdin(map[string]string{"--policy": "-", "DECISIONS": "x.jsonl"}); err != nil {
		t.Errorf("one '-': %v", err)
	}
	err := OneStdin(map[string]string{"--policy": "-", "DECISIONS": "-", "--other": ""})
	var u *UsageError
	if !errors.As(err, &u) || err.Error() != "only one of --policy and DECISIONS may be '-' (standard input)" {
		t.Errorf("two '-': %v; want a usage error naming both", err)
	}
}
