// Package tests drives the built impyard binaries as separate processes:
// concurrency, races and crashes that only real processes, real flock and
// real SIGKILL can show, and testscript files that drive several binaries
// together (a script that tests one binary lives in cmd/<bin>/testdata).
package tests

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/rogpeppe/go-internal/testscript"

	"github.com/impyard/impyard/internal/scripttest"
)

// bin holds the normal binaries, crashBin the same built with crash points.
var bin, crashBin string

func TestMain(m *testing.M) {
	if os.Getenv(peakRSSEnv) != "" {
		os.Exit(peakRSS(os.Args[1:]))
	}
	dir, err := os.MkdirTemp("", "impyard-bin-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	bin, crashBin = filepath.Join(dir, "bin"), filepath.Join(dir, "crash")
	for _, b := range []struct{ out, tags string }{{bin, ""}, {crashBin, "impyard_crash"}} {
		cmd := exec.Command("go", "build", "-tags", b.tags, "-o", b.out+"/", "../cmd/...")
		cmd.Stderr = os.Stderr
		if err := cmd.Run(); err != nil {
			fmt.Fprintln(os.Stderr, "build:", err)
			os.Exit(1)
		}
	}
	code := m.Run()
	boxes.Stop()
	os.RemoveAll(dir)
	os.Exit(code)
}

func TestScripts(t *testing.T) {
	testscript.Run(t, testscript.Params{
		Dir: "testdata/script",
		Setup: func(env *testscript.Env) error {
			env.Setenv("PATH", bin+string(os.PathListSeparator)+os.Getenv("PATH"))
			return scripttest.Setup(env)
		},
		Cmds: scripttest.Cmds(nil),
	})
}
