package config

import (
	"errors"
	"sync"

	"github.com/impyard/impyard/lib/yard"
)

// Keeper is org.toml as a long-running daemon re-reads it: an org.toml
// refused as unsafe (ErrUnsafe: a writer of the yard could have written
// it) leaves the last good one in force, so such a writer can neither
// grant authority nor take the owner's away; one that does not load for
// any other reason is an error, as for LoadOrg. The zero Keeper has no
// good configuration yet and is ready to use; it is safe for concurrent
// use.
type Keeper struct {
	mu   sync.Mutex
	last *Org
	told string // the refusal logged last, so each is logged once
	imps map[string]*keptImp
}

// keptImp is the last good imp.toml of one imp and the refusal logged
// last.
type keptImp struct {
	last *Imp
	told string
}

// Load reads org.toml as LoadOrg does. When it is refused as unsafe and
// an earlier Load succeeded, it returns that configuration instead and
// logs the refusal through logf (may be nil), once for each new reason.
func (k *Keeper) Load(y *yard.Yard, logf func(format string, a ...any)) (*Org, error) {
	o, err := LoadOrg(y)
	k.mu.Lock()
	defer k.mu.Unlock()
	switch {
	case err == nil:
		if k.told != "" && logf != nil {
			logf("%s is taken again", o.Path())
		}
		k.last, k.told = o, ""
		return o, nil
	case errors.Is(err, ErrUnsafe) && k.last != nil:
		if err.Error() != k.told && logf != nil {
			logf("error: %v; the last good %s stays in force", err, k.last.Path())
		}
		k.told = err.Error()
		return k.last, nil
	}
	return nil, err
}

// LoadImp reads imps/<name>/imp.toml as LoadImp does, keeping the last
// good one of each imp as Load keeps org.toml's.
func (k *Keeper) LoadImp(y *yard.Yard, name string, logf func(format string, a ...any)) (*Imp, error) {
	im, err := LoadImp(y, name)
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.imps == nil {
		k.imps = map[string]*keptImp{}
	}
	kept := k.imps[name]
	switch {
	case err == nil:
		if kept != nil && kept.told != "" && logf != nil {
			logf("%s is taken again", ImpPath(y, name))
		}
		k.imps[name] = &keptImp{last: im}
		return im, nil
	case errors.Is(err, ErrUnsafe) && kept != nil:
		if err.Error() != kept.told && logf != nil {
			logf("error: %v; the last good %s stays in force", err, ImpPath(y, name))
		}
		kept.told = err.Error()
		return kept.last, nil
	}
	return nil, err
}
