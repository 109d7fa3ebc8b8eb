package config_test

import (
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"

	"github.com/impyard/impyard/lib/config"
	"github.com/impyard/impyard/lib/yard/yardtest"
)

// autoEmail is the one line a writer of the yard would add to org.toml
// to have an email to any address sent without the owner.
const autoEmail = "\n[[trust]]\nintent = \"send-email\"\nlevel = \"auto\"\n"

const gated = "[executors.send-email]\nkind = \"message-user\"\n"

// TestKeeperKeepsLastGood: an org.toml a writer of the yard could have
// written is refused by LoadOrg, naming it; a Keeper that read a good one
// before keeps that one in force, and says so once per change.
func TestKeeperKeepsLastGood(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to give a file to another uid")
	}
	y := yardtest.New(t)
	p := config.OrgPath(y)
	if err := os.WriteFile(p, []byte(gated), 0o644); err != nil {
		t.Fatal(err)
	}
	var logged []string
	logf := func(format string, a ...any) { logged = append(logged, fmt.Sprintf(format, a...)) }
	var k config.Keeper
	if o, err := k.Load(y, logf); err != nil || len(o.Trust) != 0 {
		t.Fatalf("the owner's org.toml: %v, %v", o, err)
	}
	// The writer's edit: the file rewritten, then given to its account
	// (as its own file would be).
	if err := os.WriteFile(p, []byte(gated+autoEmail), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(p, 65534, 65534); err != nil {
		t.Fatal(err)
	}
	if _, err := config.LoadOrg(y); !errors.Is(err, config.ErrUnsafe) || !strings.Contains(err.Error(), p+" is owned by uid 65534") {
		t.Fatalf("LoadOrg of the writer's org.toml: %v; want ErrUnsafe naming %s and its owner", err, p)
	}
	for range 2 {
		o, err := k.Load(y, logf)
		if err != nil || len(o.Trust) != 0 {
			t.Fatalf("Keeper.Load: %v, %v; want the last good org.toml, without the auto entry", o, err)
		}
	}
	if len(logged) != 1 || !strings.Contains(logged[0], p) || !strings.Contains(logged[0], "last good") {
		t.Fatalf("logged %q; want one line naming %s and the last good one", logged, p)
	}
	// A new reason is told again; a fresh Keeper has nothing to keep.
	if err := os.Chown(p, 0, 0); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(p, 0o666); err != nil {
		t.Fatal(err)
	}
	if _, err := k.Load(y, logf); err != nil || len(logged) != 2 || !strings.Contains(logged[1], "writable by its group or others") {
		t.Fatalf("a group-writable org.toml: %v, logged %q", err, logged)
	}
	if o, err := new(config.Keeper).Load(y, logf); !errors.Is(err, config.ErrUnsafe) {
		t.Fatalf("a fresh Keeper: %v, %v; want ErrUnsafe", o, err)
	}
	// The owner takes it back: the file is read again.
	if err := os.Chmod(p, 0o644); err != nil {
		t.Fatal(err)
	}
	if o, err := k.Load(y, logf); err != nil || len(o.Trust) != 1 {
		t.Fatalf("the owner's own org.toml again: %v, %v", o, err)
	}
}

// TestLoadImpUnsafe: imp.toml naming IMPYARD_HOME as its repo and the
// owner as its user, left by a writer of the yard, is refused by name.
func TestLoadImpUnsafe(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to give a file to another uid")
	}
	y := yardtest.New(t)
	p := config.ImpPath(y, "a")
	if err := os.MkdirAll(y.Path("imps", "a"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte("image = \"x\"\nrepo = \"/root/.impyard\"\nuser = \"1000\"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := config.LoadImp(y, "a"); err != nil {
		t.Fatalf("the owner's imp.toml: %v", err)
	}
	for _, spoil := range []func() error{
		func() error { return os.Chown(p, 65534, 65534) },
		func() error { os.Chown(p, 0, 0); return os.Chmod(y.Path("imps"), 0o777) },
	} {
		if err := spoil(); err != nil {
			t.Fatal(err)
		}
		if _, err := config.LoadImp(y, "a"); !errors.Is(err, config.ErrUnsafe) {
			t.Fatalf("LoadImp: %v; want ErrUnsafe", err)
		}
	}
}
