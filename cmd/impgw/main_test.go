package main

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/rogpeppe/go-internal/testscript"

	"github.com/impyard/impyard/internal/scripttest"
)

// TestMain makes this test binary double as impgw, on PATH for the
// scripts and for the tests that run a live gateway.
func TestMain(m *testing.M) {
	testscript.Main(m, map[string]func(){"impgw": scripttest.Main(main)})
}

func TestScripts(t *testing.T) {
	testscript.Run(t, testscript.Params{
		Dir: "testdata/script",
		Setup: func(env *testscript.Env) error {
			if err := scripttest.Setup(env); err != nil {
				return err
			}
			env.Setenv("HOME", env.WorkDir)
			return os.MkdirAll(filepath.Join(env.WorkDir, "policies"), 0o755)
		},
		Cmds: scripttest.Cmds(nil),
	})
}
