package main

import (
	"testing"

	"github.com/rogpeppe/go-internal/testscript"

	"github.com/impyard/impyard/internal/scripttest"
)

// TestMain makes this test binary double as impq, on PATH for the scripts.
func TestMain(m *testing.M) {
	testscript.Main(m, map[string]func(){"impq": scripttest.Main(main)})
}

func TestScripts(t *testing.T) {
	testscript.Run(t, scripttest.Params(nil))
}
