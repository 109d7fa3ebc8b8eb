// Package id makes and checks the identifiers that name yard files: task ids
// (t-…), gate ids (g-…), run ids (r-…), message ids (m-…), memory entry
// ids (e-…) and imp names.
//
// An id is a one-letter kind, a dash, ten characters of millisecond time and
// six random characters, all in lowercase Crockford base32, so ids sort by
// creation time as plain strings and as file names. Check refuses anything
// that is not exactly that shape before it can touch a path: no "..", no
// separators, no upper case, nothing longer.
package id

import (
	"fmt"
	"io"
	"math/rand/v2"
	"strings"
	"sync"
	"time"
)

// Kinds of id, as their prefixes.
const (
	Task    = "t"
	Gate    = "g"
	Run     = "r"
	Message = "m"
	Entry   = "e"
)

const alphabet = "0123456789abcdefghjkmnpqrstvwxyz"

// randReader reads the runtime's generator (ChaCha8, seeded from the
// kernel when the process starts). An id's random part keeps apart ids
// made in the same millisecond and is no secret (the time beside it is
// plain), and crypto/rand's first read costs every command that files
// something a timer, the network poller's start and a mapping for
// getrandom's state.
var randReader io.Reader = runtimeRand{}

type runtimeRand struct{}

func (runtimeRand) Read(p []byte) (int, error) {
	for i := range p {
		p[i] = byte(rand.Uint32())
	}
	return len(p), nil
}

// Now and Rand are package variables so tests can make ids deterministic.
var (
	Now            = time.Now
	Rand io.Reader = randReader
)

// wellFormed checks ^[tgrme]-[alphabet]{16}$ by hand: it runs on every
// path built from an id, and a regexp would cost every command its
// compilation at start-up.
func wellFormed(s string) bool {
	if len(s) != 18 || s[1] != '-' || !strings.ContainsRune("tgrme", rune(s[0])) {
		return false
	}
	for i := 2; i < len(s); i++ {
		if strings.IndexByte(alphabet, s[i]) < 0 {
			return false
		}
	}
	return true
}

func validName(s string) bool {
	if len(s) == 0 || len(s) > 32 || s[0] == '-' {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-') {
			return false
		}
	}
	return true
}

// New returns a fresh id of the given kind. Ids made by one process in the
// same millisecond still sort in the order they were made: the random part
// is raised above the last one's when it would not sort after it.
func New(kind string) string {
	var b [18]byte
	b[0], b[1] = kind[0], '-'
	ms := uint64(Now().UnixMilli())
	var r [6]byte
	if _, err := io.ReadFull(Rand, r[:]); err != nil {
		panic(fmt.Sprintf("id: no randomness: %v", err))
	}
	var rnd uint32
	for _, c := range r {
		rnd = rnd<<5 | uint32(c&31)
	}
	rnd = monotonic(ms, rnd)
	for i := 11; i >= 2; i-- {
		b[i] = alphabet[ms&31]
		ms >>= 5
	}
	for i := 17; i >= 12; i-- {
		b[i] = alphabet[rnd&31]
		rnd >>= 5
	}
	return string(b[:])
}

const maxRand = 1<<30 - 1

var last struct {
	sync.Mutex
	ms  uint64
	rnd uint32
}

// monotonic returns rnd, or the last random part plus one when the last id
// had the same millisecond and rnd would not sort after it. At the top of
// the range it gives up order rather than repeat an id.
func monotonic(ms uint64, rnd uint32) uint32 {
	last.Lock()
	defer last.Unlock()
	if ms == last.ms && rnd <= last.rnd && last.rnd < maxRand {
		rnd = last.rnd + 1
	}
	last.ms, last.rnd = ms, rnd
	return rnd
}

// Check returns an error unless s is a well-formed id of the given kind.
func Check(kind, s string) error {
	if !wellFormed(s) || s[:1] != kind {
		return fmt.Errorf("invalid %s id %q: want %s- and 16 lowercase base32 characters", kindName(kind), s, kind)
	}
	return nil
}

// KindOf returns the kind of a well-formed id, or "" if s is not one.
func KindOf(s string) string {
	if !wellFormed(s) {
		return ""
	}
	return s[:1]
}

// CheckName returns an error unless s is a valid imp name. "org" is not
// one: it names the trusted side's own subject.
func CheckName(s string) error {
	if s == "org" {
		return fmt.Errorf("invalid imp name %q: reserved for the trusted side", s)
	}
	if !validName(s) {
		return fmt.Errorf("invalid imp name %q: use 1-32 characters of a-z, 0-9 and '-', starting with a letter or digit", s)
	}
	return nil
}

// Time returns the creation time encoded in a well-formed id.
func Time(s string) time.Time {
	var ms int64
	for i := 2; i < 12 && i < len(s); i++ {
		ms = ms<<5 | int64(max(strings.IndexByte(alphabet, s[i]), 0))
	}
	return time.UnixMilli(ms)
}

func kindName(kind string) string {
	switch kind {
	case Task:
		return "task"
	case Gate:
		return "gate"
	case Run:
		return "run"
	case Message:
		return "message"
	case Entry:
		return "memory entry"
	}
	return "unknown"
}

// ValidIntent reports whether s is a valid intent, which is a policy rule
// name: 1 to 64 characters of a-z, 0-9, '.', '_' and '-', starting with a
// letter or digit. Checked by hand for the same reason as ids.
func ValidIntent(s string) bool {
	if len(s) == 0 || len(s) > 64 || s[0] == '.' || s[0] == '_' || s[0] == '-' {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '.' || c == '_' || c == '-') {
			return false
		}
	}
	return true
}
