package approval

import (
	"fmt"
	"os"
	"strings"
	"testing"
)

// TestKeyringRefusesWritableByOthers: a key folder or a public key that
// the group or others may write is refused as a whole, each bit on its
// own; one only the owner writes loads. Whoever can write there can add
// or replace a key that approvals verify against.
func TestKeyringRefusesWritableByOthers(t *testing.T) {
	for _, tc := range []struct {
		dir, pub os.FileMode
		bad      string // the path refused, "" when the ring loads
	}{
		{0o700, 0o644, ""},
		{0o755, 0o600, ""},
		{0o770, 0o644, "dir"},
		{0o702, 0o644, "dir"},
		{0o700, 0o664, "pub"},
		{0o700, 0o646, "pub"},
	} {
		t.Run(fmt.Sprintf("dir %04o pub %04o", tc.dir, tc.pub), func(t *testing.T) {
			home := t.TempDir()
			if _, err := Create(home, Owner); err != nil {
				t.Fatal(err)
			}
			if err := os.Chmod(PubPath(home, Owner), tc.pub); err != nil {
				t.Fatal(err)
			}
			if err := os.Chmod(Dir(home), tc.dir); err != nil {
				t.Fatal(err)
			}
			kr, err := LoadKeyring(home)
			switch tc.bad {
			case "":
				if err != nil || len(kr.Keys) != 1 {
					t.Errorf("LoadKeyring: %v, %v; want the owner's key", kr, err)
				}
			case "dir":
				if want := fmt.Sprintf("%s: mode %04o lets others add keys", Dir(home), tc.dir); err == nil || !strings.HasPrefix(err.Error(), want) {
					t.Errorf("LoadKeyring: %v, want %q", err, want)
				}
			case "pub":
				if want := fmt.Sprintf("%s: mode %04o lets others replace a trusted key", PubPath(home, Owner), tc.pub); err == nil || !strings.HasPrefix(err.Error(), want) {
					t.Errorf("LoadKeyring: %v, want %q", err, want)
				}
			}
		})
	}
}

// TestSigningKeyRefusesReadableByOthers: the private key must be the
// owner's alone, each bit of the group's and others' on its own.
func TestSigningKeyRefusesReadableByOthers(t *testing.T) {
	for _, mode := range []os.FileMode{0o640, 0o604, 0o610, 0o601, 0o620, 0o602} {
		home := t.TempDir()
		if _, err := Create(home, Owner); err != nil {
			t.Fatal(err)
		}
		os.Chmod(KeyPath(home, Owner), mode)
		want := fmt.Sprintf("%s: mode %04o lets others read the signing key", KeyPath(home, Owner), mode)
		if _, err := Load(home, Owner); err == nil || !strings.HasPrefix(err.Error(), want) {
			t.Errorf("mode %04o: %v, want %q", mode, err, want)
		}
	}
	home := t.TempDir()
	Create(home, Owner)
	if _, err := Load(home, Owner); err != nil {
		t.Errorf("mode 0600: %v", err)
	}
}
