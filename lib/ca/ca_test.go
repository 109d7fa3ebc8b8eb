package ca

import (
	"crypto/x509"
	"encoding/pem"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

func newCA(t *testing.T) (*CA, string) {
	t.Helper()
	home := filepath.Join(t.TempDir(), "home")
	c, err := Init(home)
	if err != nil {
		t.Fatal(err)
	}
	return c, home
}

func TestInitModesAndRefusal(t *testing.T) {
	c, home := newCA(t)
	for _, tc := range []struct {
		path string
		want os.FileMode
	}{{Dir(home), 0o700 | os.ModeDir}, {KeyPath(home), 0o600}, {CertPath(home), 0o644}} {
		fi, err := os.Stat(tc.path)
		if err != nil {
			t.Fatal(err)
		}
		if got := fi.Mode(); got != tc.want {
			t.Errorf("%s: mode %v, want %v", tc.path, got, tc.want)
		}
	}
	if !c.Cert.IsCA || c.Cert.MaxPathLen != 0 || !c.Cert.MaxPathLenZero {
		t.Errorf("CA constraints: IsCA %v MaxPathLen %d zero %v", c.Cert.IsCA, c.Cert.MaxPathLen, c.Cert.MaxPathLenZero)
	}
	if d := c.Cert.NotAfter.Sub(c.Cert.NotBefore); d < Lifetime {
		t.Errorf("CA validity %s, want at least %s", d, Lifetime)
	}
	before, _ := os.ReadFile(KeyPath(home))
	if _, err := Init(home); !errors.Is(err, ErrExists) {
		t.Fatalf("second Init: got %v, want ErrExists", err)
	}
	after, _ := os.ReadFile(KeyPath(home))
	if string(before) != string(after) {
		t.Fatal("second Init changed the key")
	}
	// Half a CA (a crash between the writes) is refused too.
	if err := os.Remove(CertPath(home)); err != nil {
		t.Fatal(err)
	}
	if _, err := Init(home); !errors.Is(err, ErrExists) {
		t.Fatalf("Init over a lone key: got %v, want ErrExists", err)
	}
}

func TestLoad(t *testing.T) {
	c, home := newCA(t)
	got, err := Load(home)
	if err != nil {
		t.Fatal(err)
	}
	if !got.Cert.Equal(c.Cert) || !got.Key.Equal(c.Key) {
		t.Fatal("Load returned a different CA")
	}
	if got.Fingerprint() != c.Fingerprint() || len(c.Fingerprint()) != 95 {
		t.Fatalf("fingerprint %q", c.Fingerprint())
	}
}

func TestLoadRefuses(t *testing.T) {
	for name, damage := range map[string]func(t *testing.T, home string){
		"group-readable key": func(t *testing.T, home string) {
			if err := os.Chmod(KeyPath(home), 0o640); err != nil {
				t.Fatal(err)
			}
		},
		"symlinked key": func(t *testing.T, home string) {
			moved := filepath.Join(t.TempDir(), "k")
			if err := os.Rename(KeyPath(home), moved); err != nil {
				t.Fatal(err)
			}
			if err := os.Symlink(moved, KeyPath(home)); err != nil {
				t.Fatal(err)
			}
		},
		"hard-linked key": func(t *testing.T, home string) {
			if err := os.Link(KeyPath(home), filepath.Join(t.TempDir(), "k")); err != nil {
				t.Fatal(err)
			}
		},
		"key of another CA": func(t *testing.T, home string) {
			_, other := newCA(t)
			b, _ := os.ReadFile(KeyPath(other))
			if err := os.WriteFile(KeyPath(home), b, 0o600); err != nil {
				t.Fatal(err)
			}
		},
		"garbage cert": func(t *testing.T, home string) {
			if err := os.WriteFile(CertPath(home), []byte("-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n"), 0o644); err != nil {
				t.Fatal(err)
			}
		},
		"missing cert": func(t *testing.T, home string) {
			if err := os.Remove(CertPath(home)); err != nil {
				t.Fatal(err)
			}
		},
	} {
		t.Run(name, func(t *testing.T) {
			_, home := newCA(t)
			damage(t, home)
			if _, err := Load(home); err == nil {
				t.Fatal("Load accepted it")
			}
		})
	}
}

func TestLoadRefusesExpired(t *testing.T) {
	_, home := newCA(t)
	defer func(f func() time.Time) { Now = f }(Now)
	Now = func() time.Time { return time.Now().Add(Lifetime + time.Hour) }
	if _, err := Load(home); err == nil || !strings.Contains(err.Error(), "valid only") {
		t.Fatalf("got %v, want an expiry error", err)
	}
}

func TestLeafChains(t *testing.T) {
	c, _ := newCA(t)
	m, err := NewMinter(c, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	roots.AddCert(c.Cert)
	for _, name := range []string{"example.com", "a-b.c_d.example", "xn--bcher-kva.example", "127.0.0.1", "::1", "2001:db8::7"} {
		t.Run(name, func(t *testing.T) {
			tc, err := m.Leaf(name)
			if err != nil {
				t.Fatal(err)
			}
			l := tc.Leaf
			if _, err := l.Verify(x509.VerifyOptions{DNSName: name, Roots: roots, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}); err != nil {
				t.Fatalf("verify: %v", err)
			}
			if n := len(l.DNSNames) + len(l.IPAddresses); n != 1 {
				t.Errorf("%d SANs, want exactly 1", n)
			}
			if l.NotAfter.Sub(l.NotBefore) > MaxLeafLifetime+backdate {
				t.Errorf("lifetime %s over %s", l.NotAfter.Sub(l.NotBefore), MaxLeafLifetime)
			}
			if since := time.Since(l.NotBefore); since < 59*time.Minute {
				t.Errorf("NotBefore only %s ago, want backdated an hour", since)
			}
			if l.IsCA {
				t.Error("leaf is a CA")
			}
			// A leaf for one name does not speak for another.
			if _, err := l.Verify(x509.VerifyOptions{DNSName: "other.example", Roots: roots}); err == nil {
				t.Error("leaf verified for other.example")
			}
		})
	}
}

func TestLeafRefusesNonCanonical(t *testing.T) {
	c, _ := newCA(t)
	m, _ := NewMinter(c, 0, 0)
	for _, name := range []string{"", "*.example.com", "Example.com", "example.com.", "a..b", "fe80::1%eth0", "exa mple.com", "bücher.example", strings.Repeat("a", 64) + ".com"} {
		if _, err := m.Leaf(name); err == nil {
			t.Errorf("Leaf(%q) minted", name)
		}
	}
}

func TestMinterLifetimeBounds(t *testing.T) {
	c, _ := newCA(t)
	if _, err := NewMinter(c, MaxLeafLifetime+time.Hour, 0); err == nil {
		t.Fatal("a leaf lifetime over 180 days was accepted")
	}
}

func TestLeafCacheAndRenewal(t *testing.T) {
	c, _ := newCA(t)
	m, _ := NewMinter(c, 0, 2)
	a, _ := m.Leaf("a.example")
	if b, _ := m.Leaf("a.example"); b != a {
		t.Fatal("second Leaf minted again")
	}
	var wg sync.WaitGroup
	got := make([]any, 16)
	for i := range got {
		wg.Add(1)
		go func() {
			defer wg.Done()
			cert, err := m.Leaf("b.example")
			if err != nil {
				t.Error(err)
			}
			got[i] = cert
		}()
	}
	wg.Wait()
	for _, g := range got {
		if g != got[0] {
			t.Fatal("concurrent Leaf calls minted more than once")
		}
	}
	m.Leaf("c.example")
	if n := len(m.cache); n > 2 {
		t.Fatalf("cache holds %d, bound is 2", n)
	}
	defer func(f func() time.Time) { Now = f }(Now)
	Now = func() time.Time { return time.Now().Add(DefaultLeafLifetime - time.Hour) }
	renewed, _ := m.Leaf("c.example")
	if !renewed.Leaf.NotAfter.After(time.Now().Add(DefaultLeafLifetime)) {
		t.Fatal("a leaf within a day of expiry was not renewed")
	}
}

func TestOpenSSLVerify(t *testing.T) {
	if _, err := exec.LookPath("openssl"); err != nil {
		t.Skip("openssl not installed")
	}
	c, home := newCA(t)
	m, _ := NewMinter(c, 0, 0)
	for _, name := range []string{"api.example.com", "10.1.2.3"} {
		tc, err := m.Leaf(name)
		if err != nil {
			t.Fatal(err)
		}
		p := filepath.Join(t.TempDir(), "leaf.pem")
		if err := os.WriteFile(p, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: tc.Certificate[0]}), 0o644); err != nil {
			t.Fatal(err)
		}
		check := "-verify_hostname"
		if name[0] >= '0' && name[0] <= '9' {
			check = "-verify_ip"
		}
		out, err := exec.Command("openssl", "verify", "-CAfile", CertPath(home), "-purpose", "sslserver", check, name, p).CombinedOutput()
		if err != nil || !strings.Contains(string(out), ": OK") {
			t.Fatalf("openssl verify %s: %v\n%s", name, err, out)
		}
		out, err = exec.Command("openssl", "verify", "-CAfile", CertPath(home), "-verify_hostname", "evil.example", p).CombinedOutput()
		if err == nil {
			t.Fatalf("openssl verified %s for evil.example:\n%s", name, out)
		}
	}
}

func BenchmarkMint(b *testing.B) {
	home := filepath.Join(b.TempDir(), "home")
	c, err := Init(home)
	if err != nil {
		b.Fatal(err)
	}
	m, _ := NewMinter(c, 0, 0)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := m.Mint("bench.example.com"); err != nil {
			b.Fatal(err)
		}
	}
}
