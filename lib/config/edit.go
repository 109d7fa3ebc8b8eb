package config

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"
	"strings"

	"github.com/impyard/impyard/lib/id"
	"github.com/impyard/impyard/lib/store"
	"github.com/impyard/impyard/lib/yard"
)

// Authority is one authority file of a yard, as 'impsup config edit'
// edits it: its path, the store directory that holds it, and how a new
// content is checked before it replaces the old.
type Authority struct {
	Path string
	dir  []string // below the root
	// check refuses content that would not load.
	check func(b []byte) error
}

// ErrNotAuthority is AuthorityFile's error for a name that is none of
// the yard's authority files.
var ErrNotAuthority = errors.New("not an authority file (org.toml, policies/gateway.json or imps/<imp>/imp.toml)")

// AuthorityFile names one of the yard's authority files by its path,
// absolute or relative to the root: org.toml, policies/gateway.json or
// imps/<imp>/imp.toml.
func AuthorityFile(y *yard.Yard, name string) (*Authority, error) {
	p := name
	if !filepath.IsAbs(p) {
		p = y.Path(p)
	}
	rel, err := store.Below(y.Root, p)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", name, ErrNotAuthority)
	}
	parts := strings.Split(filepath.ToSlash(rel), "/")
	switch {
	case rel == "org.toml":
		return &Authority{Path: OrgPath(y), check: func(b []byte) error { _, err := ParseOrg(OrgPath(y), b); return err }}, nil
	case p == y.PolicyPath():
		// Its schema and JSON here; its rules are impgw's to judge, as
		// 'impsup doctor' leaves them (impsup links no judge).
		return &Authority{Path: p, dir: []string{"policies"}, check: func(b []byte) error { return store.CheckSchema(p, b, "policy", 1) }}, nil
	case len(parts) == 3 && parts[0] == "imps" && parts[2] == "imp.toml" && id.CheckName(parts[1]) == nil:
		imp := parts[1]
		ip := ImpPath(y, imp)
		return &Authority{Path: ip, dir: []string{"imps", imp}, check: func(b []byte) error { _, err := ParseImp(ip, imp, b); return err }}, nil
	}
	return nil, fmt.Errorf("%s: %w", name, ErrNotAuthority)
}

// Read returns the file's content, nil for a file not there yet, read
// in strict modes: a file a writer of the yard could have written is
// refused (ErrUnsafe), since an edit would make it the owner's.
func (a *Authority) Read(y *yard.Yard) ([]byte, error) {
	b, err := y.ReadAuthority(a.Path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	return b, err
}

// Check refuses content that would not load, naming the file, line and
// key as the daemons would.
func (a *Authority) Check(b []byte) error { return a.check(b) }

// ErrChanged is Replace's error when the file is no longer what the edit
// started from.
var ErrChanged = errors.New("changed while it was edited; nothing was written")

// Replace writes next over the file atomically, under the lock of its
// directory, if it still holds old (nil: is still missing); the previous
// content is kept as <name>.N. The new file is written as every yard
// file is (mode 0640, by this process's account), and is read back in
// strict modes before Replace returns.
func (a *Authority) Replace(y *yard.Yard, old, next []byte) (backup string, err error) {
	if err := a.check(next); err != nil {
		return "", err
	}
	d, err := y.Dir(a.dir...)
	if err != nil {
		return "", err
	}
	name := filepath.Base(a.Path)
	err = d.Update(func(tx *store.Tx) error {
		cur, err := y.ReadAuthority(a.Path)
		switch {
		case errors.Is(err, fs.ErrNotExist) && old == nil:
		case errors.Is(err, fs.ErrNotExist):
			return fmt.Errorf("%s %w", a.Path, ErrChanged)
		case err != nil:
			return err
		case old == nil || !bytes.Equal(cur, old):
			return fmt.Errorf("%s %w", a.Path, ErrChanged)
		default:
			if backup, err = tx.Backup(name, cur); err != nil {
				return err
			}
		}
		return tx.Write(name, next)
	})
	if err != nil {
		return "", err
	}
	return backup, y.CheckAuthority(a.Path)
}
