// Package tests drives the built impyard binaries as separate processes:
// concurrency, races and crashes that only real processes, real flock and
// real SIGKILL can show, and the command-line behaviour as testscript files.
package tests

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/rogpeppe/go-internal/testscript"
)

// bin holds the normal binaries, crashBin the same built with crash points.
var bin, crashBin string

func TestMain(m *testing.M) {
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
			env.Setenv("USER", "alice")
			env.Setenv("IMPYARD_ROOT", env.WorkDir)
			env.Setenv("IMPYARD_HOME", filepath.Join(env.WorkDir, ".home"))
			return nil
		},
		Cmds: map[string]func(ts *testscript.TestScript, neg bool, args []string){
			// capture VAR sets VAR to the trimmed stdout of the last command,
			// as id=$(impq add ...) would in a shell.
			"capture": func(ts *testscript.TestScript, neg bool, args []string) {
				if neg || len(args) != 1 {
					ts.Fatalf("usage: capture VAR")
				}
				ts.Setenv(args[0], strings.TrimSpace(ts.ReadFile("stdout")))
			},
		},
	})
}
