package config

import (
	"errors"
	"os"

	"github.com/impyard/impyard/lib/id"
	"github.com/impyard/impyard/lib/store"
	"github.com/impyard/impyard/lib/yard"
)

// OrgPath is org.toml, the yard's configuration.
func OrgPath(y *yard.Yard) string { return y.Path("org.toml") }

// ImpPath is imps/<name>/imp.toml, an imp's configuration.
func ImpPath(y *yard.Yard, name string) string { return y.Path("imps", name, "imp.toml") }

// CharterPath is imps/<name>/charter.md, the owner's standing
// instructions to the imp; lib/memory reads it into every brief.
func CharterPath(y *yard.Yard, name string) string { return y.Path("imps", name, "charter.md") }

// MemoryPath is imps/<name>/memory.md, the imp's core memory; lib/memory
// reads and writes it.
func MemoryPath(y *yard.Yard, name string) string { return y.Path("imps", name, "memory.md") }

// ImpDir is imps/<name>/ as a store directory, one lock domain for the
// files of one imp's configuration: a program that rewrites its imp.toml
// or memory.md holds its lock.
func ImpDir(y *yard.Yard, name string) (*store.Dir, error) {
	if err := id.CheckName(name); err != nil {
		return nil, err
	}
	return y.Dir("imps", name)
}

// ImpNames lists the directories under imps/, each an imp that may have
// a configuration; a missing imps/ has none.
func ImpNames(y *yard.Yard) ([]string, error) {
	entries, err := os.ReadDir(y.Path("imps"))
	if os.IsNotExist(err) {
		return nil, nil
	}
	var names []string
	for _, e := range entries {
		if e.IsDir() {
			names = append(names, e.Name())
		}
	}
	return names, err
}

// Unsafe checks every authority file of the yard as the daemons read
// them (yard.ReadAuthority): org.toml, policies/gateway.json and each
// imps/<imp>/imp.toml. It returns the refusal of each that a daemon would
// refuse for its ownership or modes (each wrapping ErrUnsafe, naming the
// file); a missing or malformed file is not its concern.
func Unsafe(y *yard.Yard) []error {
	paths := []string{OrgPath(y), y.PolicyPath()}
	names, err := ImpNames(y)
	if err != nil {
		return []error{err}
	}
	for _, n := range names {
		paths = append(paths, ImpPath(y, n))
	}
	var unsafe []error
	for _, p := range paths {
		if err := y.CheckAuthority(p); errors.Is(err, ErrUnsafe) {
			unsafe = append(unsafe, err)
		}
	}
	return unsafe
}
