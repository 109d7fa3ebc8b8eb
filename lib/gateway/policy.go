package gateway

import (
	"bytes"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/impyard/impyard/lib/dial"
	"github.com/impyard/impyard/lib/judge"
	"github.com/impyard/impyard/lib/stale"
	"github.com/impyard/impyard/lib/store"
	"github.com/impyard/impyard/lib/yard"
)

// fileKey identifies one version of a file cheaply: a stat per request
// notices an edit in place and an atomic replace (see store.FileID)
// without reading the file; a file that cannot be stat'ed is its error.
type fileKey struct {
	id  store.FileID
	err string
}

func statKey(path string) fileKey {
	id, err := store.PathID(path, true)
	if err != nil {
		return fileKey{err: err.Error()}
	}
	return fileKey{id: id}
}

// loaded is the policy in force and the upstream it goes with.
type loaded struct {
	key fileKey
	// The watch's count of changes read before key was last found to be
	// the file's, and when that was (Unix nanoseconds).
	gen     atomic.Uint64
	checked atomic.Int64

	policy   *judge.Policy
	upstream *dial.Upstream
	broken   error // why policy denies everything, or nil
	refused  error // why the file as it is now is not in force, or nil
}

// policySource re-reads the policy file whenever its stat changes. It
// stats the file only when a watch on its directory saw it change, or
// stale.Max after it last did: a stat on every request was one system
// call in sixteen of a forwarded request's. A file
// that cannot be read or parsed, or whose upstream CA bundle cannot be
// loaded, becomes judge.Broken: every request is denied until it is fixed.
// A file that read refuses as unsafe (yard.ErrUnsafe: a writer of the
// yard could have written it) leaves the last good policy in force; only
// with none yet does it deny everything. The stat that triggers a reload
// is the file's own: a writer who could write its directory can change
// nothing without changing the file, and then the whole way is checked
// again.
type policySource struct {
	path       string
	flag       *stale.Flag
	flagBundle string // the --upstream-ca bundle, added to every policy's
	opts       dial.Options
	logf       func(format string, a ...any)
	read       func(path string) ([]byte, error)

	cur        atomic.Pointer[loaded]
	good       *loaded    // the last policy that loaded, under mu
	mu         sync.Mutex // serialises reloads
	bundleHash [32]byte
	lastBroken string
}

// get returns the policy for the file as it is now: as the watch last
// saw it, within stale.Max.
func (s *policySource) get() *loaded {
	gen, watched := s.flag.Gen()
	now := time.Now().UnixNano()
	if l := s.cur.Load(); watched && l != nil && l.gen.Load() == gen && now-l.checked.Load() < int64(stale.Max) {
		return l
	}
	key := statKey(s.path)
	if l := s.cur.Load(); l != nil && l.key == key {
		l.gen.Store(gen)
		l.checked.Store(now)
		return l
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if l := s.cur.Load(); l != nil && l.key == key {
		l.gen.Store(gen)
		l.checked.Store(now)
		return l
	}
	old := s.cur.Load()
	next := s.load(key, old)
	switch {
	case errors.Is(next.broken, yard.ErrUnsafe) && s.good != nil:
		// Only a load that succeeds changes the upstream, so the last
		// good one's is the one in use.
		next = &loaded{key: key, policy: s.good.policy, upstream: s.good.upstream, broken: s.good.broken, refused: next.broken}
	case next.broken == nil:
		s.good = next
	}
	next.gen.Store(gen)
	next.checked.Store(now)
	s.cur.Store(next)
	if old != nil && old.upstream != next.upstream {
		old.upstream.Close()
	}
	switch {
	case next.refused != nil && next.refused.Error() != s.lastBroken:
		s.lastBroken = next.refused.Error()
		s.logf("error: policy refused, the last good one stays in force: %v", next.refused)
	case next.refused != nil:
	case next.broken != nil && next.broken.Error() != s.lastBroken:
		s.lastBroken = next.broken.Error()
		s.logf("error: policy denies everything until fixed: %v", next.broken)
	case next.broken == nil && s.lastBroken != "":
		s.lastBroken = ""
		s.logf("policy %s loaded again; requests are judged by it", s.path)
	}
	return next
}

func (s *policySource) load(key fileKey, old *loaded) *loaded {
	l := &loaded{key: key}
	if old != nil {
		l.upstream = old.upstream
	}
	fail := func(err error) *loaded {
		l.broken = err
		l.policy = judge.Broken(err)
		if l.upstream == nil {
			l.upstream = dial.NewUpstream(nil, s.opts)
		}
		return l
	}
	data, err := s.read(s.path)
	if err != nil {
		return fail(err)
	}
	p, err := judge.Parse(data)
	if err != nil {
		return fail(fmt.Errorf("%s: %w", s.path, err))
	}
	var bundle []byte
	for _, path := range []string{s.flagBundle, p.UpstreamCA()} {
		if path == "" {
			continue
		}
		b, err := readBundle(path)
		if err != nil {
			return fail(fmt.Errorf("%s: upstream CA bundle: %w", s.path, err))
		}
		bundle = append(append(bundle, b...), '\n')
	}
	hash := sha256.Sum256(bundle)
	if l.upstream == nil || hash != s.bundleHash {
		roots, err := dial.Roots(bytes.TrimSpace(bundle))
		if err != nil {
			return fail(fmt.Errorf("%s: upstream CA bundle: %w", s.path, err))
		}
		l.upstream = dial.NewUpstream(roots, s.opts)
		s.bundleHash = hash
	}
	l.policy = p
	return l
}

const maxBundle = 16 << 20

// readBundle reads a PEM bundle the operator named. Unlike yard files it
// may be a symlink (system certificate stores are made of them).
func readBundle(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, maxBundle+1))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if len(b) > maxBundle {
		return nil, fmt.Errorf("%s: over %d bytes", path, maxBundle)
	}
	if len(bytes.TrimSpace(b)) == 0 {
		return nil, errors.New(path + ": empty")
	}
	return b, nil
}
