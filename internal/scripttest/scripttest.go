// Package scripttest is what the commands' testscript files share: the
// yard (the work directory, with its marker) and IMPYARD_HOME inside it,
// and the script commands capture (as $(...) in a shell), exits (a
// command's exact exit status), hold/release (a lock in the yard kept
// by another process, as a live impyard process would keep it) and
// snapshot/unchanged (a tree a command must not have changed).
package scripttest

import (
	"errors"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/rogpeppe/go-internal/testscript"

	"github.com/impyard/impyard/lib/store"
	"github.com/impyard/impyard/lib/yard"
)

// LockTimeoutEnv, set in a script (env LOCK_TIMEOUT=200ms), shortens how
// long a command run through Main waits for a held lock, so a script can
// see it give up without waiting the real 30 seconds.
const LockTimeoutEnv = "LOCK_TIMEOUT"

// Main returns main wrapped for testscript.Main: the command as built,
// except that LockTimeoutEnv, when set, replaces store.LockTimeout.
func Main(main func()) func() {
	return func() {
		if v := os.Getenv(LockTimeoutEnv); v != "" {
			d, err := time.ParseDuration(v)
			if err != nil {
				panic(LockTimeoutEnv + ": " + err.Error())
			}
			store.LockTimeout = d
		}
		main()
	}
}

// Setup makes the work directory a yard (its marker, nothing else) and
// points IMPYARD_ROOT at it, IMPYARD_HOME below it, and USER at alice.
func Setup(env *testscript.Env) error {
	env.Setenv("USER", "alice")
	env.Setenv("IMPYARD_ROOT", env.WorkDir)
	env.Setenv("IMPYARD_HOME", filepath.Join(env.WorkDir, ".home"))
	y, _, err := yard.Prepare(env.WorkDir)
	if err != nil {
		return err
	}
	// The yard root is made as 'impsup init' makes it, whatever the
	// umask: writable by its owner alone, or no authority file in it is
	// taken.
	if err := os.Chmod(env.WorkDir, 0o755); err != nil {
		return err
	}
	_, err = y.Mark()
	return err
}

// Params runs a binary's scripts in testdata/script with the shared
// setup and commands, and more commands added.
func Params(more map[string]func(ts *testscript.TestScript, neg bool, args []string)) testscript.Params {
	return testscript.Params{Dir: "testdata/script", Setup: Setup, Cmds: Cmds(more)}
}

// Cmds returns the shared script commands, with more added.
func Cmds(more map[string]func(ts *testscript.TestScript, neg bool, args []string)) map[string]func(ts *testscript.TestScript, neg bool, args []string) {
	// Scripts run in parallel: held is keyed by absolute path, which is
	// unique to a script's work directory.
	var mu sync.Mutex
	held := map[string]func(){}
	release := func(p string) bool {
		mu.Lock()
		unlock := held[p]
		delete(held, p)
		mu.Unlock()
		if unlock != nil {
			unlock()
		}
		return unlock != nil
	}
	cmds := map[string]func(ts *testscript.TestScript, neg bool, args []string){
		// capture VAR sets VAR to the trimmed stdout of the last command.
		"capture": func(ts *testscript.TestScript, neg bool, args []string) {
			if neg || len(args) != 1 {
				ts.Fatalf("usage: capture VAR")
			}
			ts.Setenv(args[0], strings.TrimSpace(ts.ReadFile("stdout")))
		},
		// hold FILE takes the flock on FILE (creating it) the way the
		// store does, and keeps it until release FILE or the script ends.
		"hold": func(ts *testscript.TestScript, neg bool, args []string) {
			if neg || len(args) != 1 {
				ts.Fatalf("usage: hold FILE")
			}
			p := ts.MkAbs(args[0])
			unlock, err := store.Lock(p)
			ts.Check(err)
			mu.Lock()
			held[p] = unlock
			mu.Unlock()
			ts.Defer(func() { release(p) })
		},
		// exits N PROG ARGS... runs PROG as exec does and fails unless it
		// exits with status N; its stdout and stderr are kept for the
		// next stdout and stderr commands.
		"exits": func(ts *testscript.TestScript, neg bool, args []string) {
			if neg || len(args) < 2 {
				ts.Fatalf("usage: exits N PROG [ARGS...]")
			}
			want, err := strconv.Atoi(args[0])
			ts.Check(err)
			got := 0
			if err := ts.Exec(args[1], args[2:]...); err != nil {
				var ee *exec.ExitError
				if !errors.As(err, &ee) {
					ts.Fatalf("%s: %v", args[1], err)
				}
				got = ee.ExitCode()
			}
			if got != want {
				ts.Fatalf("%s exited %d, want %d", args[1], got, want)
			}
		},
		// chown UID FILE... gives the files to another account, as a
		// writer of the yard would leave them (scripts run as root).
		"chown": func(ts *testscript.TestScript, neg bool, args []string) {
			if neg || len(args) < 2 {
				ts.Fatalf("usage: chown UID FILE...")
			}
			uid, err := strconv.Atoi(args[0])
			ts.Check(err)
			for _, f := range args[1:] {
				ts.Check(os.Lchown(ts.MkAbs(f), uid, -1))
			}
		},
		"release": func(ts *testscript.TestScript, neg bool, args []string) {
			if neg || len(args) != 1 || !release(ts.MkAbs(args[0])) {
				ts.Fatalf("usage: release FILE (a file held by hold)")
			}
		},
		// snapshot VAR [DIR] keeps a listing of every path below DIR
		// (default the work directory) with its mode and contents;
		// unchanged VAR [DIR] fails if the tree is no longer
		// byte-for-byte the same.
		"snapshot": func(ts *testscript.TestScript, neg bool, args []string) {
			if neg || len(args) < 1 || len(args) > 2 {
				ts.Fatalf("usage: snapshot VAR [DIR]")
			}
			ts.Setenv(args[0], listTree(ts, treeRoot(ts, args[1:])))
		},
		"unchanged": func(ts *testscript.TestScript, neg bool, args []string) {
			if neg || len(args) < 1 || len(args) > 2 {
				ts.Fatalf("usage: unchanged VAR [DIR]")
			}
			if now := listTree(ts, treeRoot(ts, args[1:])); now != ts.Getenv(args[0]) {
				ts.Fatalf("the tree changed:\nbefore:\n%s\nafter:\n%s", ts.Getenv(args[0]), now)
			}
		},
	}
	for k, v := range more {
		cmds[k] = v
	}
	return cmds
}

func treeRoot(ts *testscript.TestScript, dir []string) string {
	if len(dir) == 0 {
		return ts.Getenv("WORK")
	}
	return ts.MkAbs(dir[0])
}

// listTree lists every path below root with its mode and, for a regular
// file, its contents, one line each, sorted.
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
