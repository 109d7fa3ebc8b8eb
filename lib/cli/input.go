package cli

import (
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
)

// Stdin is the name that means standard input wherever a command takes a
// file to read.
const Stdin = "-"

// OpenInput opens the file a command was given to read: standard input
// for "-", else the file path, which must exist (a missing file is an
// error naming it, never an empty input). name is what errors should call
// it. Closing standard input through it is a no-op.
func (e *Env) OpenInput(path string) (r io.ReadCloser, name string, err error) {
	if path == Stdin {
		return io.NopCloser(e.Stdin), "standard input", nil
	}
	f, err := os.Open(path)
	if err != nil {
		return nil, "", err
	}
	return f, path, nil
}

// ReadInput reads the whole of a file a command was given (see OpenInput),
// refusing more than limit bytes.
func (e *Env) ReadInput(path string, limit int64) ([]byte, error) {
	r, name, err := e.OpenInput(path)
	if err != nil {
		return nil, err
	}
	defer r.Close()
	b, err := io.ReadAll(io.LimitReader(r, limit+1))
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", name, err)
	}
	if int64(len(b)) > limit {
		return nil, fmt.Errorf("%s: over the %d byte limit", name, limit)
	}
	return b, nil
}

// OneStdin refuses a command line that names standard input ("-") for
// more than one of the files it reads: there is only one.
func OneStdin(flags map[string]string) error {
	var named []string
	for what, path := range flags {
		if path == Stdin {
			named = append(named, what)
		}
	}
	if len(named) > 1 {
		slices.Sort(named)
		return Usagef("only one of %s may be '-' (standard input)", strings.Join(named, " and "))
	}
	return nil
}
