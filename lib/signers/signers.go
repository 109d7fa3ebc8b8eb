// Package signers keeps, in the yard, the record of the keys its executors
// verify approvals with (signers/trusted.json: each key's name and
// fingerprint), so that an approver can tell, before it signs, that
// impexec would not accept its key: 'impgate approve' run with another
// IMPYARD_HOME is refused, and never creates an owner key there.
//
// Guarantees:
//   - The record only ever refuses. Approvals are verified against the
//     public keys in IMPYARD_HOME/keys/, never against this record, so
//     whoever writes the yard can make an approver refuse (or not refuse)
//     to sign, but cannot make any approval execute.
//   - impexec writes it from its own keyring (Record), so it says what the
//     executors trust as they last looked; impsup init starts it (Init).
//     An approver adds to it only its owner key, and only when the yard
//     records no owner key and nothing but keys its home holds.
//   - Signer creates the owner key only on those same terms: once the
//     yard records an owner key, a home without one is refused, and
//     nothing is created.
//
// What it rests on: impexec reading the same IMPYARD_HOME whenever it
// runs. A yard made before the record existed has none until impexec
// writes it (an approver never starts one); until then an approver in the
// wrong home is not refused, and impexec leaves what it signs approved,
// waiting for an approval with a key it trusts.
package signers

import (
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/impyard/impyard/lib/approval"
	"github.com/impyard/impyard/lib/store"
	"github.com/impyard/impyard/lib/yard"
)

// Dir and Name place the record in the yard.
const (
	Dir  = "signers"
	Name = "trusted.json"
)

const (
	kind  = "signers"
	major = 1
)

// ErrNotTrusted is an approver's key, or the lack of one, that the
// yard's executors would not accept: signing would only leave the gate
// waiting, so nothing is signed.
var ErrNotTrusted = errors.New("not a key this yard's executors verify approvals with")

// Key is one trusted public key.
type Key struct {
	Name        string `json:"name"`
	Fingerprint string `json:"fingerprint"`
}

func (k Key) String() string { return k.Name + " " + k.Fingerprint }

// Trusted is the record.
type Trusted struct {
	Schema string    `json:"schema"`
	Keys   []Key     `json:"keys"`
	By     string    `json:"by"`
	At     time.Time `json:"at"`
}

// Has reports whether fingerprint is recorded.
func (t *Trusted) Has(fingerprint string) bool {
	return slices.ContainsFunc(t.Keys, func(k Key) bool { return k.Fingerprint == fingerprint })
}

func (t *Trusted) named(name string) bool {
	return slices.ContainsFunc(t.Keys, func(k Key) bool { return k.Name == name })
}

// List names the recorded keys in one line.
func (t *Trusted) List() string {
	s := make([]string, len(t.Keys))
	for i, k := range t.Keys {
		s[i] = k.String()
	}
	return strings.Join(s, ", ")
}

// Path is the record's file in y.
func Path(y *yard.Yard) string { return y.Path(Dir, Name) }

// Load reads the record; with none it returns nil and no error.
func Load(y *yard.Yard) (*Trusted, error) {
	b, err := store.ReadFileIn(y.Root, Dir+"/"+Name)
	if store.IsNotExist(err) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	return decode(Path(y), b)
}

func decode(path string, b []byte) (*Trusted, error) {
	var t Trusted
	if err := store.Decode(path, b, kind, major, &t); err != nil {
		return nil, err
	}
	return &t, nil
}

// update runs fn on the record (nil if none) under the record's lock and
// writes what it returns, unless that is nil.
func update(y *yard.Yard, fn func(t *Trusted) *Trusted) error {
	d, err := y.Dir(Dir)
	if err != nil {
		return err
	}
	return d.Update(func(tx *store.Tx) error {
		var cur *Trusted
		b, err := tx.Read(Name)
		switch {
		case err == nil:
			if cur, err = decode(tx.Path(Name), b); err != nil {
				return err
			}
		case !store.IsNotExist(err):
			return err
		}
		next := fn(cur)
		if next == nil {
			return nil
		}
		next.Schema = store.Schema(kind, major)
		next.At = store.Now()
		sort.Slice(next.Keys, func(i, j int) bool { return next.Keys[i].Name < next.Keys[j].Name })
		out, err := store.Encode(next)
		if err != nil {
			return err
		}
		return tx.Write(Name, out)
	})
}

func keysOf(kr *approval.Keyring) []Key {
	out := make([]Key, len(kr.Keys))
	for i, k := range kr.Keys {
		out[i] = Key{Name: k.Name, Fingerprint: k.Fingerprint}
	}
	return out
}

// Record makes the record say exactly kr's keys, by by (impexec), when it
// says anything else; it writes nothing when it already does.
func Record(y *yard.Yard, kr *approval.Keyring, by string) error {
	want := keysOf(kr)
	sort.Slice(want, func(i, j int) bool { return want[i].Name < want[j].Name })
	if t, err := Load(y); err == nil && t != nil && slices.Equal(t.Keys, want) {
		return nil
	}
	return update(y, func(t *Trusted) *Trusted {
		if t != nil && slices.Equal(t.Keys, want) {
			return nil
		}
		return &Trusted{Keys: want, By: by}
	})
}

// Init starts the record with kr's keys, by by, unless there is one, and
// reports whether it did.
func Init(y *yard.Yard, kr *approval.Keyring, by string) (created bool, err error) {
	err = update(y, func(t *Trusted) *Trusted {
		if t != nil {
			return nil
		}
		created = true
		return &Trusted{Keys: keysOf(kr), By: by}
	})
	return created, err
}

// add records k, of home, beside the keys recorded, checked again under
// the record's lock: only while the record lists no owner key and home
// holds every key it lists.
func add(y *yard.Yard, home string, k *approval.Key, by string) error {
	return update(y, func(t *Trusted) *Trusted {
		if t == nil || t.Has(k.Fingerprint()) || t.named(approval.Owner) || !holds(home, t) {
			return nil
		}
		return &Trusted{By: by, Keys: append(slices.Clone(t.Keys), Key{Name: k.Name, Fingerprint: k.Fingerprint()})}
	})
}

// holds reports whether home's keyring has every key t records: the sign
// that home is the one the executors read.
func holds(home string, t *Trusted) bool {
	kr, err := approval.LoadKeyring(home)
	if err != nil {
		return false
	}
	for _, want := range t.Keys {
		if !slices.ContainsFunc(kr.Keys, func(k *approval.Trusted) bool { return k.Fingerprint == want.Fingerprint }) {
			return false
		}
	}
	return true
}

// Signer returns the owner's key in home to sign an approval in y with.
// When the yard records the keys its executors trust, the key must be one
// of them, or be recorded now: a key of a home that holds every key
// recorded, in a yard that records no owner key. Without a key, home gets
// one (with a notice on notice, as approval.Ensure does) only on the same
// terms, or when the yard has no record yet. Anything else is refused
// with an error wrapping ErrNotTrusted that names the keys recorded, and
// nothing is created.
func Signer(y *yard.Yard, home string, notice io.Writer, prog string) (*approval.Key, error) {
	t, err := Load(y)
	if err != nil {
		return nil, fmt.Errorf("the record of the keys the executors trust: %w", err)
	}
	// Only the executors' own home holds every key they trust, and a
	// second owner key is never taken on.
	joins := t == nil || !t.named(approval.Owner) && holds(home, t)
	k, err := approval.Load(home, approval.Owner)
	switch {
	case err == nil:
		if t != nil && !t.Has(k.Fingerprint()) && !joins {
			return nil, fmt.Errorf("%s (%s): %w (%s, recorded in %s): impexec would leave the approval waiting; run impgate with the IMPYARD_HOME impexec uses",
				k.Path, k.Fingerprint(), ErrNotTrusted, t.List(), Path(y))
		}
		// A process that died between the private key and its public
		// half left a key nothing verifies: Ensure writes the half now.
		if k, err = approval.Ensure(home, approval.Owner, notice, prog); err != nil {
			return nil, err
		}
	case !errors.Is(err, os.ErrNotExist):
		return nil, err
	case !joins:
		return nil, fmt.Errorf("%s: no owner key in this IMPYARD_HOME, and none created: %w; they are %s, recorded in %s; run impgate with the IMPYARD_HOME impexec uses",
			approval.KeyPath(home, approval.Owner), ErrNotTrusted, t.List(), Path(y))
	default:
		if k, err = approval.Ensure(home, approval.Owner, notice, prog); err != nil {
			return nil, err
		}
	}
	// With no record, this home is not known to be the executors' own:
	// impexec starts the record from its keyring.
	if t != nil && !t.Has(k.Fingerprint()) {
		if err := add(y, home, k, prog); err != nil {
			return nil, err
		}
	}
	return k, nil
}
