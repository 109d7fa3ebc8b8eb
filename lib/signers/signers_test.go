package signers

import (
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/impyard/impyard/lib/approval"
	"github.com/impyard/impyard/lib/yard"
	"github.com/impyard/impyard/lib/yard/yardtest"
)

func keyring(t *testing.T, home string) *approval.Keyring {
	t.Helper()
	kr, err := approval.LoadKeyring(home)
	if err != nil {
		t.Fatal(err)
	}
	return kr
}

func mustLoad(t *testing.T, y *yard.Yard) *Trusted {
	t.Helper()
	rec, err := Load(y)
	if err != nil {
		t.Fatal(err)
	}
	return rec
}

func exists(p string) bool { _, err := os.Lstat(p); return err == nil }

// The executors' home and another one, as 'impgate approve' meets them:
// a key is made only where the record allows, the other home is refused
// naming the keys recorded, and nothing is created there.
func TestSigner(t *testing.T) {
	for _, c := range []struct {
		name string
		// setup prepares the yard, the executors' home and the approver's
		// home, and returns the latter.
		setup   func(t *testing.T, y *yard.Yard, right, other string) string
		refused bool
		created bool // an owner key is made in the approver's home
	}{
		{"the executors' home", func(t *testing.T, y *yard.Yard, right, other string) string {
			return right
		}, false, false},
		{"another home without a key", func(t *testing.T, y *yard.Yard, right, other string) string {
			return other
		}, true, false},
		{"another home with its own key", func(t *testing.T, y *yard.Yard, right, other string) string {
			approval.Create(other, approval.Owner)
			return other
		}, true, false},
		{"no record yet: nothing to tell by", func(t *testing.T, y *yard.Yard, right, other string) string {
			os.Remove(Path(y))
			return other
		}, false, true},
		{"the executors' home, its owner key gone and not recorded", func(t *testing.T, y *yard.Yard, right, other string) string {
			if _, err := approval.Create(right, approval.Gateway); err != nil {
				t.Fatal(err)
			}
			os.Remove(approval.KeyPath(right, approval.Owner))
			os.Remove(approval.PubPath(right, approval.Owner))
			if err := Record(y, keyring(t, right), "impexec"); err != nil {
				t.Fatal(err)
			}
			return right
		}, false, true},
		{"another home while no owner key is recorded", func(t *testing.T, y *yard.Yard, right, other string) string {
			if _, err := approval.Create(right, approval.Gateway); err != nil {
				t.Fatal(err)
			}
			os.Remove(approval.PubPath(right, approval.Owner))
			if err := Record(y, keyring(t, right), "impexec"); err != nil {
				t.Fatal(err)
			}
			return other
		}, true, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			y := yardtest.New(t)
			right, other := t.TempDir(), filepath.Join(t.TempDir(), "other")
			if _, err := approval.Create(right, approval.Owner); err != nil {
				t.Fatal(err)
			}
			if _, err := Init(y, keyring(t, right), "impsup"); err != nil {
				t.Fatal(err)
			}
			home := c.setup(t, y, right, other)
			had := exists(approval.KeyPath(home, approval.Owner))
			k, err := Signer(y, home, io.Discard, "impgate")
			if c.refused {
				rec := mustLoad(t, y)
				if !errors.Is(err, ErrNotTrusted) || k != nil || !strings.Contains(err.Error(), rec.List()) || !strings.Contains(err.Error(), Path(y)) {
					t.Fatalf("Signer: %v, %v; want refused naming %s and %s", k, err, rec.List(), Path(y))
				}
				if !had && exists(approval.KeyPath(home, approval.Owner)) {
					t.Errorf("an owner key was created in %s", home)
				}
				return
			}
			if err != nil {
				t.Fatalf("Signer: %v", err)
			}
			if created := !had && exists(approval.KeyPath(home, approval.Owner)); created != c.created {
				t.Errorf("owner key created: %v, want %v", created, c.created)
			}
			if rec := mustLoad(t, y); rec != nil && !rec.Has(k.Fingerprint()) {
				t.Errorf("the key signing is not recorded: %s", rec.List())
			}
		})
	}
}

// Record says exactly the keyring's keys and writes nothing when it
// already does; Init never replaces a record.
func TestRecordAndInit(t *testing.T) {
	y := yardtest.New(t)
	home := t.TempDir()
	approval.Create(home, approval.Owner)
	if ok, err := Init(y, keyring(t, home), "impsup"); !ok || err != nil {
		t.Fatalf("Init: %v %v", ok, err)
	}
	approval.Create(home, approval.Gateway)
	if ok, err := Init(y, keyring(t, home), "impsup"); ok || err != nil {
		t.Fatalf("Init over a record: %v %v; want nothing written", ok, err)
	}
	if rec := mustLoad(t, y); len(rec.Keys) != 1 || rec.Keys[0].Name != approval.Owner {
		t.Fatalf("record %+v, want the owner key alone", rec)
	}
	if err := Record(y, keyring(t, home), "impexec"); err != nil {
		t.Fatal(err)
	}
	rec := mustLoad(t, y)
	if got := rec.List(); got != keyring(t, home).Keys[0].Name+" "+keyring(t, home).Keys[0].Fingerprint+", "+keyring(t, home).Keys[1].Name+" "+keyring(t, home).Keys[1].Fingerprint || rec.By != "impexec" {
		t.Fatalf("record %q by %s, want the keyring's two keys by impexec", got, rec.By)
	}
	before, _ := os.Stat(Path(y))
	if err := Record(y, keyring(t, home), "impexec"); err != nil {
		t.Fatal(err)
	}
	if after, _ := os.Stat(Path(y)); !os.SameFile(before, after) {
		t.Errorf("an unchanged record was written again")
	}
}

// A damaged record refuses every approval rather than being ignored.
func TestDamagedRecordRefuses(t *testing.T) {
	y := yardtest.New(t)
	home := t.TempDir()
	approval.Create(home, approval.Owner)
	os.MkdirAll(y.Path(Dir), 0o750)
	os.WriteFile(Path(y), []byte(`{"schema":"impyard.signers/1","keys":[`), 0o640)
	if k, err := Signer(y, home, io.Discard, "impgate"); err == nil || k != nil || !strings.Contains(err.Error(), Path(y)) {
		t.Errorf("Signer over a damaged record: %v %v; want refused naming it", k, err)
	}
}

// TestSignerMendsAMissingPublicHalf: a process that died between writing
// the owner key and its public half left a key no approval made with it
// would verify by. Signer writes the half, so the next approval counts.
func TestSignerMendsAMissingPublicHalf(t *testing.T) {
	y := yardtest.New(t)
	home := t.TempDir()
	k, err := approval.Create(home, approval.Owner)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(approval.PubPath(home, approval.Owner)); err != nil {
		t.Fatal(err)
	}
	got, err := Signer(y, home, io.Discard, "impgate")
	if err != nil || got.Fingerprint() != k.Fingerprint() {
		t.Fatalf("Signer: %v %v, want the key made before", got, err)
	}
	kr := keyring(t, home)
	if len(kr.Keys) != 1 || kr.Keys[0].Fingerprint != k.Fingerprint() {
		t.Errorf("keyring %+v, want the owner key's public half back", kr.Keys)
	}
}
