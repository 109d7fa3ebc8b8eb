package main

import (
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/rogpeppe/go-internal/testscript"

	"github.com/impyard/impyard/internal/scripttest"
)

// TestMain makes this test binary double as impq, on PATH for the scripts.
func TestMain(m *testing.M) {
	testscript.Main(m, map[string]func(){"impq": scripttest.Main(main)})
}

func TestScripts(t *testing.T) {
	testscript.Run(t, testscript.Params{
		Dir:   "testdata/script",
		Setup: scripttest.Setup,
		Cmds: scripttest.Cmds(map[string]func(ts *testscript.TestScript, neg bool, args []string){
			// snapshot VAR keeps a listing of every path below the work
			// directory with its mode and contents; unchanged VAR fails if
			// the tree is no longer byte-for-byte the same.
			"snapshot": func(ts *testscript.TestScript, neg bool, args []string) {
				if neg || len(args) != 1 {
					ts.Fatalf("usage: snapshot VAR")
				}
				ts.Setenv(args[0], listTree(ts, ts.Getenv("WORK")))
			},
			"unchanged": func(ts *testscript.TestScript, neg bool, args []string) {
				if neg || len(args) != 1 {
					ts.Fatalf("usage: unchanged VAR")
				}
				if now := listTree(ts, ts.Getenv("WORK")); now != ts.Getenv(args[0]) {
					ts.Fatalf("the tree changed:\nbefore:\n%s\nafter:\n%s", ts.Getenv(args[0]), now)
				}
			},
		}),
	})
}

func listTree(ts *testscript.TestScript, root string) string {
	var lines []string
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		line := strings.TrimPrefix(p, root) + " " + fi.Mode().String()
		if fi.Mode().IsRegular() {
			b, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			line += " " + string(b)
		}
		lines = append(lines, line)
		return nil
	})
	ts.Check(err)
	sort.Strings(lines)
	return strings.Join(lines, "\n")
}
