package desk

import (
	"bufio"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/impyard/impyard/lib/id"
)

// Actions a review takes on a gate.
const (
	Approve = "approve"
	Deny    = "deny"
	Skip    = "skip"
)

// MinSha is the fewest hex digits of a payload's sha256 an approval may
// name, as for impgate approve --sha.
const MinSha = 8

// Line is one decision of a review script.
type Line struct {
	N      int    // line number, from 1
	Action string // Approve, Deny or Skip
	Gate   string
	SHA    string // Approve: a prefix of the payload's sha256
	Reason string // Deny: the rest of the line
}

// MaxScript bounds a review script's bytes.
const MaxScript = 1 << 20

// ParseScript reads a review script: one decision a line,
//
//	approve GATE SHA
//	deny GATE REASON...
//	skip GATE
//
// with blank lines and lines starting with # ignored. SHA is at least
// MinSha hex digits of the payload's sha256. The whole script is read and
// checked before any line is returned, so a script with a mistake
// anywhere decides nothing; the error names the line.
func ParseScript(r io.Reader) ([]Line, error) {
	sc := bufio.NewScanner(io.LimitReader(r, MaxScript+1))
	sc.Buffer(make([]byte, 0, 4096), MaxScript+1)
	var out []Line
	n, size := 0, 0
	for sc.Scan() {
		n++
		size += len(sc.Bytes()) + 1
		if size > MaxScript {
			return nil, fmt.Errorf("review script is over %d bytes", MaxScript)
		}
		text := strings.TrimSpace(sc.Text())
		if text == "" || strings.HasPrefix(text, "#") {
			continue
		}
		f := strings.Fields(text)
		l := Line{N: n, Action: f[0]}
		bad := func(format string, a ...any) error {
			return fmt.Errorf("review script line %d: %s", n, fmt.Sprintf(format, a...))
		}
		if len(f) < 2 {
			return nil, bad("%q wants a gate id", f[0])
		}
		l.Gate = f[1]
		if _, err := id.CheckPrefix(id.Gate, l.Gate); err != nil {
			return nil, bad("%v", err)
		}
		switch l.Action {
		case Approve:
			if len(f) != 3 {
				return nil, bad("want 'approve GATE SHA'")
			}
			l.SHA = strings.ToLower(f[2])
			if !IsSha(l.SHA) {
				return nil, bad("%q is not at least %d hex digits of the payload's sha256", f[2], MinSha)
			}
		case Deny:
			if len(f) < 3 {
				return nil, bad("want 'deny GATE REASON'")
			}
			// The reason as written, after the id.
			l.Reason = strings.TrimSpace(strings.SplitN(text, l.Gate, 2)[1])
		case Skip:
			if len(f) != 2 {
				return nil, bad("want 'skip GATE'")
			}
		default:
			return nil, bad("unknown action %q; want approve, deny or skip", f[0])
		}
		out = append(out, l)
	}
	if err := sc.Err(); errors.Is(err, bufio.ErrTooLong) {
		return nil, fmt.Errorf("review script is over %d bytes", MaxScript)
	} else if err != nil {
		return nil, fmt.Errorf("reading the review script: %w", err)
	}
	return out, nil
}

// IsSha reports whether s is MinSha to 64 hex digits.
func IsSha(s string) bool {
	if len(s) < MinSha || len(s) > 64 {
		return false
	}
	if len(s)%2 == 1 {
		s += "0"
	}
	_, err := hex.DecodeString(s)
	return err == nil
}
